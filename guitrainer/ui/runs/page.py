"""Runs page: every training run kept, its curves, several overlaid, a settings diff, and what to do next.

The list reads only the runs table of the store (one short query); the series of the selected runs
are read when selected, and the chart (pyqtgraph) is built after the list is on screen, so the page
opens fast with thousands of runs. Decisions (what differs, whether a run can be resumed) live in
:mod:`guitrainer.core.runs.compare` and :mod:`guitrainer.core.runs.store`; this page shows them.
"""

from __future__ import annotations

import logging
import sqlite3
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QItemSelection, QItemSelectionModel, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from guitrainer.config import ConfigError, TrainingConfig, field_info
from guitrainer.config.files import config_from_dict
from guitrainer.core.dataset.report import plural
from guitrainer.core.demo.progress import demo_progress, is_demo
from guitrainer.core.runs import recovery
from guitrainer.core.runs import timings as run_timings
from guitrainer.core.runs.checks import remove_paths, resumable
from guitrainer.core.runs.compare import config_diff, format_value
from guitrainer.core.runs.samples import first_and_last, from_artifacts
from guitrainer.core.runs.store import (
    STATUSES,
    RunRow,
    RunStore,
    RunStoreError,
    StoreUnavailable,
    is_not_damage,
    unavailable,
)
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.runs.model import ID_ROLE, RunsFilter, RunsTableModel
from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.before_after import BeforeAfterView
from guitrainer.ui.widgets.desktop import open_with_desktop
from guitrainer.ui.widgets.messages import Button, MessageBox
from guitrainer.ui.widgets.pages import Page

log = logging.getLogger(__name__)

MAX_OVERLAY = 16  # runs drawn at once; more selected ones are listed but not drawn
LIVE_REFRESH_MS = 3000  # how often a shown page re-reads the list while a run is running


class RunsPage(Page):
    """The run history. Public: :meth:`refresh`, :meth:`selected_ids`, :meth:`load_settings`,
    :meth:`resume_selected`, :meth:`open_output_folder`, :meth:`delete_selected`, :meth:`check_interrupted`."""

    title = "Runs"
    subtitle = (
        "Every training run, kept: select one to see its curves, several to overlay them, two to see "
        "which settings differ. Load a run's settings, resume it, or open its files."
    )

    resume_requested = Signal(object, str)  # TrainingConfig, the state folder to resume from
    status_changed = Signal(str)
    chart_ready = Signal()

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None, *, store_path: str | Path | None = None):
        super().__init__(binding, parent)
        self.store_path = Path(store_path) if store_path is not None else None
        self._store: RunStore | None = None
        self.store_error = ""
        self.chart: Any = None  # RunsChart, built after the first paint
        self.interrupted_box: MessageBox | None = None
        self.delete_dialog: Any = None
        self._loaded = False
        self._build()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.notice = QLabel()
        self.notice.setObjectName("runs_notice")
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("color: #b3261e;")
        self.notice.hide()
        self.bring_back_button = QPushButton("Bring back its runs")
        self.bring_back_button.setObjectName("runs_bring_back")
        self.bring_back_button.setToolTip("Copy the runs that can still be read from the history that was moved aside "
                                          "into this one (the moved file is kept).")
        self.bring_back_button.clicked.connect(self.bring_back)
        self.bring_back_button.hide()
        notice_row = QHBoxLayout()
        notice_row.addWidget(self.notice, 1)
        notice_row.addWidget(self.bring_back_button, 0, Qt.AlignmentFlag.AlignTop)
        self.body.addLayout(notice_row)
        bar = QHBoxLayout()
        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("runs_filter")
        self.filter_edit.setPlaceholderText("Filter: name, model, precision, status, folder, date…")
        self.filter_edit.setClearButtonEnabled(True)
        bar.addWidget(self.filter_edit, 1)
        self.status_combo = QComboBox()
        self.status_combo.setObjectName("runs_status_filter")
        self.status_combo.addItem("Any status", "")
        for s in STATUSES:
            self.status_combo.addItem(s.capitalize(), s)
        bar.addWidget(self.status_combo)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        bar.addWidget(self.refresh_button)
        self.count_label = QLabel()
        self.count_label.setObjectName("runs_count")
        bar.addWidget(self.count_label)
        self.body.addLayout(bar)
        self.body.addLayout(self._build_buttons())  # above the list, so they stay in view on a short window
        self.body.addWidget(self._build_split(), 1)
        self.filter_edit.textChanged.connect(self._on_filter)
        self.status_combo.currentIndexChanged.connect(lambda _i: self._on_filter())
        self._update_buttons([])
        self._live = QTimer(self)  # while a run is recording, the list and its curves follow it
        self._live.setInterval(LIVE_REFRESH_MS)
        self._live.timeout.connect(self._refresh_live)

    def _build_table(self) -> QTableView:
        self.model = RunsTableModel(self)
        self.proxy = RunsFilter(self)
        self.proxy.setSourceModel(self.model)
        self.table = QTableView()
        self.table.setObjectName("runs_table")
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(1, Qt.SortOrder.DescendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(22)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        for col, width in enumerate((170, 120, 140, 70, 80, 80, 80)):
            self.table.setColumnWidth(col, width)
        self.table.selectionModel().selectionChanged.connect(self._on_selection)
        self.table.doubleClicked.connect(lambda _i: self.load_settings())
        self.table.setMinimumHeight(110)
        return self.table

    def _build_tabs(self) -> QTabWidget:
        self.tabs = QTabWidget()
        self.tabs.setObjectName("runs_tabs")
        self.chart_holder = QWidget()
        QVBoxLayout(self.chart_holder).setContentsMargins(0, 0, 0, 0)
        self.chart_placeholder = QLabel("Select a run to see its curves; select several to overlay them.")
        self.chart_placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.chart_holder.layout().addWidget(self.chart_placeholder)
        self.tabs.addTab(self.chart_holder, "Curves")
        self.diff_table = QTableWidget(0, 3)
        self.diff_table.setObjectName("runs_diff")
        self.diff_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.diff_table.verticalHeader().hide()
        diff_header = self.diff_table.horizontalHeader()
        diff_header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        for col in (1, 2):  # the two runs side by side, equally wide
            diff_header.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch)
        self.diff_note = QLabel("Select two runs to see which settings differ.")
        diff_box = QWidget()
        dl = QVBoxLayout(diff_box)
        dl.setContentsMargins(0, 0, 0, 0)
        dl.addWidget(self.diff_note)
        dl.addWidget(self.diff_table, 1)
        self.tabs.addTab(diff_box, "Settings diff")
        self.before_after = BeforeAfterView()
        self.before_after.empty.setText("Select one run to see each sample prompt's first and last picture side by side.")
        samples_scroll = QScrollArea()
        samples_scroll.setObjectName("runs_samples")
        samples_scroll.setWidgetResizable(True)
        samples_scroll.setWidget(self.before_after)
        self.tabs.addTab(samples_scroll, "Samples")
        self.details = QPlainTextEdit()
        self.details.setObjectName("runs_details")
        self.details.setReadOnly(True)
        self.tabs.addTab(self.details, "Details")
        self.tabs.setMinimumHeight(260)
        return self.tabs

    def _build_split(self) -> QSplitter:
        split = QSplitter(Qt.Orientation.Vertical)
        split.setObjectName("runs_split")
        split.addWidget(self._build_table())
        split.addWidget(self._build_tabs())
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        split.setMinimumHeight(380)
        return split

    def _build_buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.load_button = self._button("Load settings", "runs_load", "Make this run's settings the current ones.", self.load_settings)
        self.resume_button = self._button("Resume", "runs_resume", "", self.resume_selected)
        self.open_button = self._button("Open output folder", "runs_open", "", self.open_output_folder)
        self.delete_button = self._button("Delete…", "runs_delete", "Remove the selected runs from the history (files only when you ask).", self.delete_selected)
        for b in (self.load_button, self.resume_button, self.open_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.delete_button)
        return row

    def _button(self, text: str, name: str, tip: str, slot: Any) -> QPushButton:
        b = QPushButton(text)
        b.setObjectName(name)
        b.setToolTip(tip)
        b.clicked.connect(slot)
        return b

    # ------------------------------------------------------------------ store
    @property
    def store(self) -> RunStore | None:
        """The store, opened on first use (None, with :attr:`store_error` and a notice, when it cannot be).

        A store that cannot be used *now* (a full disk, locked: :class:`StoreUnavailable`) is tried again at the
        next refresh (the Refresh button, showing the page, the live timer); one that cannot be used at all is not.
        """
        if self._store is None and not self.store_error:
            try:
                self._store = RunStore(self.store_path)
            except StoreUnavailable as e:
                self._show_notice(str(e))
                return None
            except RunStoreError as e:
                self.store_error = str(e)
                self._show_notice(self.store_error)
                return None
            self._clear_notice()
            if self._store.notice:
                self._show_notice(self._store.notice)
            self._offer_bring_back()
        return self._store

    def _show_notice(self, text: str) -> None:
        if text != self.notice.text() or self.notice.isHidden():
            self.status_changed.emit(text)
        self.notice.setText(text)
        self.notice.show()

    def _clear_notice(self) -> None:
        self.notice.clear()
        self.notice.hide()

    def _store_failed(self, e: sqlite3.Error, doing: str) -> None:
        """A read or write of the open store failed: a full disk says so (and is tried again), damage too."""
        store = self.store
        if store is not None and is_not_damage(e):
            self._show_notice(str(unavailable(store.path, e, doing)))
        else:
            self._show_notice(f"The run history could not be {doing}: {e}")

    # ------------------------------------------------------------------ a history moved aside
    def moved_aside(self) -> list[Path]:
        """Histories moved aside beside the store (damaged, or by older versions) whose runs can be brought back."""
        store = self.store
        return recovery.moved_aside(store.path) if store is not None else []

    def _offer_bring_back(self) -> None:
        moved = self.moved_aside()
        self.bring_back_button.setVisible(bool(moved))
        if not moved:
            return
        files = ", ".join(str(p) for p in moved[:2]) + (f" and {len(moved) - 2} more" if len(moved) > 2 else "")
        if not self.notice.text():
            self._show_notice(
                f"A run history was moved aside earlier ({files}): it could not be used then. Its runs can be "
                "brought back into this one; the file is kept either way."
            )

    def bring_back(self) -> list[recovery.BroughtBack]:
        """Copy the runs of every moved-aside history into the store (the files are kept, renamed)."""
        store = self.store
        if store is None:
            return []
        done: list[recovery.BroughtBack] = []
        try:
            for moved in self.moved_aside():
                done.append(recovery.bring_back(store, moved))
        except sqlite3.Error as e:
            self._store_failed(e, "written")
            return done
        self.bring_back_button.setVisible(bool(self.moved_aside()))
        self.refresh()
        text = " ".join(d.describe() for d in done)
        if any(d.error for d in done):
            self._show_notice(text)
        else:
            self._clear_notice()
        self._say(text)
        return done

    def close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # ------------------------------------------------------------------ list
    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        super().showEvent(event)
        if not self._loaded or self._store is None:  # a history that could not be opened is tried again
            self.refresh()
        self._live.start()
        if self.chart is None:  # built after the list is painted (importing pyqtgraph takes a moment)
            self.table.viewport().installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Paint and obj is self.table.viewport():
            obj.removeEventFilter(self)
            QTimer.singleShot(0, self.ensure_chart)
        return super().eventFilter(obj, event)

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802
        super().hideEvent(event)
        self._live.stop()

    def _refresh_live(self) -> None:
        if any(r.status == "running" for r in self.model.rows) or (self._store is None and not self.store_error):
            self.refresh()  # a run going on, or a history that could not be opened now (a full disk): again

    def refresh(self) -> None:
        """Read the list again, keeping the selection."""
        store = self.store
        keep = self.selected_ids()
        rows: list[RunRow] = []
        if store is not None:
            try:
                rows = store.list_runs()
            except sqlite3.DatabaseError as e:  # a damaged file or a failing disk: say which, keep going
                self._store_failed(e, "read")
        self._loaded = True
        self.model.set_rows(rows)
        self._update_count()
        if keep:
            self.select_ids(keep)
        else:
            self._on_selection()

    def _on_filter(self) -> None:
        self.proxy.set_text(self.filter_edit.text())
        self.proxy.set_status(str(self.status_combo.currentData() or ""))
        self._update_count()

    def _update_count(self) -> None:
        shown, total = self.proxy.rowCount(), self.model.rowCount()
        self.count_label.setText(plural(total, "run") if shown == total else f"{shown} of {plural(total, 'run')}")

    def selected_ids(self) -> list[int]:
        """The selected runs' ids, top to bottom as shown."""
        rows = sorted(i.row() for i in self.table.selectionModel().selectedRows())
        return [int(self.proxy.index(r, 0).data(ID_ROLE)) for r in rows]

    def select_ids(self, ids: list[int]) -> None:
        sel = QItemSelection()
        wanted = set(ids)
        for r in range(self.proxy.rowCount()):
            idx = self.proxy.index(r, 0)
            if idx.data(ID_ROLE) in wanted:
                sel.select(idx, self.proxy.index(r, self.proxy.columnCount() - 1))
        flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
        self.table.selectionModel().select(sel, flags)
        self._on_selection()

    def _rows(self, ids: list[int]) -> list[RunRow]:
        by_id = {r.id: r for r in self.model.rows}
        return [by_id[i] for i in ids if i in by_id]

    # ------------------------------------------------------------------ selection
    def _on_selection(self, *_: QItemSelection) -> None:
        ids = self.selected_ids()
        try:
            self._update_buttons(ids)
            self._update_chart(ids)
            self._update_diff(ids)
            self._update_details(ids)
            self._update_samples(ids)
        except sqlite3.DatabaseError as e:  # a file damaged past its first page: say so, keep the page usable
            self._store_failed(e, "read")

    def _update_buttons(self, ids: list[int]) -> None:
        one = len(ids) == 1
        self.load_button.setEnabled(one)
        self.open_button.setEnabled(one)
        self.delete_button.setEnabled(bool(ids))
        state, why = (None, "select one run")
        if one and self.store is not None:
            state, why = resumable(self.store, ids[0])
        self.resume_button.setEnabled(state is not None)
        self.resume_button.setToolTip(f"Continue from its last saved state: {state}" if state else f"Cannot resume: {why}.")
        rows = self._rows(ids)
        self.open_button.setToolTip(rows[0].output_folder if one and rows else "")

    def ensure_chart(self) -> Any:
        """Build the chart (imports pyqtgraph) once the list is on screen."""
        if self.chart is None:
            from guitrainer.ui.runs.chart import RunsChart

            self.chart = RunsChart(self.chart_holder)
            # its size hint must not grow the page (the list would jump when the chart appears)
            self.chart.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
            self.chart_holder.layout().addWidget(self.chart)
            self._update_chart(self.selected_ids())
            self.chart_ready.emit()
        return self.chart

    def _update_chart(self, ids: list[int]) -> None:
        self.chart_placeholder.setVisible(not ids or self.chart is None)
        if self.chart is None:
            return
        self.chart.setVisible(bool(ids))
        runs = []
        store = self.store
        for r in self._rows(ids)[:MAX_OVERLAY] if store is not None else []:
            runs.append((r.id, f"{r.name} · {r.date_text}", store.series(r.id)))
        self.chart.set_runs(runs)
        if len(ids) > MAX_OVERLAY:
            self.chart.note.setText(f"The first {MAX_OVERLAY} of {len(ids)} selected runs are drawn.")

    def _update_diff(self, ids: list[int]) -> None:
        self.diff_table.setRowCount(0)
        store = self.store
        if len(ids) != 2 or store is None:
            self.diff_note.setText("Select two runs to see which settings differ.")
            return
        a, b = self._rows(ids)
        changes = config_diff(store.config(a.id), store.config(b.id))
        self.diff_table.setHorizontalHeaderLabels(["Setting", f"{a.name} · {a.date_text}", f"{b.name} · {b.date_text}"])
        differ = f"{plural(len(changes), 'setting differs', 'settings differ')}."
        self.diff_note.setText(differ if changes else "The two runs have the same settings.")
        self.diff_table.setRowCount(len(changes))
        for i, c in enumerate(changes):
            label = _label(c.path)
            for col, text in enumerate((label, format_value(c.a), format_value(c.b))):
                item = QTableWidgetItem(text)
                item.setToolTip(c.path if col == 0 else text)
                self.diff_table.setItem(i, col, item)

    def diff_rows(self) -> list[tuple[str, str, str]]:
        """The diff table as shown: (setting path, value in the first run, value in the second)."""
        out = []
        for i in range(self.diff_table.rowCount()):
            cells = [self.diff_table.item(i, c) for c in range(3)]
            out.append((cells[0].toolTip(), cells[1].text(), cells[2].text()))
        return out

    def _update_details(self, ids: list[int]) -> None:
        store = self.store
        if len(ids) != 1 or store is None:
            self.details.setPlainText("" if not ids else f"{plural(len(ids), 'run')} selected.")
            return
        d = store.run(ids[0])
        if d is None:
            return
        r = d.row
        lines = [f"{r.name} — {r.status}" + (f": {r.message}" if r.message else "")]
        lines.append(f"started {r.date_text}" + (f", ended {datetime.fromtimestamp(r.ended_at):%Y-%m-%d %H:%M}" if r.ended_at else ""))
        lines.append(f"from: {'the command line' if r.source == 'cli' else 'the app'}; device: {d.device or '?'}")
        lines.append(f"model: {r.model}; training precision {r.precision}, saved as {d.save_precision}")
        lines.append(f"steps: {r.steps} of {r.total_steps}; final loss: {r.final_loss if r.final_loss is not None else '—'}")
        time_line = run_timings.describe(d.timings)
        if time_line:
            lines.append(time_line)
        lines += dataset_lines(d.dataset)
        lines.append(f"output folder: {r.output_folder}")
        for a in d.artifacts:
            extra = f" (step {a['step']})" if a.get("step") else ""
            prompt = f" — {a['prompt']}" if a.get("prompt") else ""
            lines.append(f"  {a['kind']}: {a['path']}{extra}{prompt}")
        if is_demo(d.config):
            pairs = [p for p in first_and_last(from_artifacts(d.artifacts)) if p.last.step > p.first.step]
            lines += [f"Demo measure: {p.describe()}" for p in demo_progress(pairs)]
        self.details.setPlainText("\n".join(lines))

    def _update_samples(self, ids: list[int]) -> None:
        """The Samples tab: the one selected run's first and last picture of each prompt."""
        store = self.store
        if len(ids) != 1 or store is None:
            self.before_after.clear()
            return
        self.before_after.set_samples(from_artifacts(store.artifacts(ids[0])), demo=is_demo(store.config(ids[0])))

    # ------------------------------------------------------------------ actions
    def _config_of(self, run_id: int) -> TrainingConfig | None:
        store = self.store
        data = store.config(run_id) if store is not None else {}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                cfg = config_from_dict(data)
        except ConfigError as e:
            self._say(f"This run's settings cannot be loaded: {e}")
            return None
        for w in caught:
            log.warning("run %d settings: %s", run_id, w.message)
        cfg.schedule.resume_from = ""
        return cfg

    def load_settings(self) -> bool:
        """Make the selected run's settings the current ones (a fresh start: no resume)."""
        ids = self.selected_ids()
        if len(ids) != 1:
            return False
        cfg = self._config_of(ids[0])
        if cfg is None:
            return False
        self.binding.replace(cfg)
        (row,) = self._rows(ids)
        self._say(f"Loaded the settings of “{row.name}” ({row.date_text}).")
        return True

    def resume_selected(self) -> bool:
        ids = self.selected_ids()
        if len(ids) != 1 or self.store is None:
            return False
        return self.resume_run(ids[0])

    def resume_run(self, run_id: int) -> bool:
        """Ask the window to continue this run from its last saved state (emits :attr:`resume_requested`)."""
        if self.store is None:
            return False
        state, why = resumable(self.store, run_id)
        if state is None:
            self._say(f"This run cannot be resumed: {why}.")
            return False
        cfg = self._config_of(run_id)
        if cfg is None:
            return False
        self.resume_requested.emit(cfg, state)
        return True

    def open_output_folder(self) -> bool:
        rows = self._rows(self.selected_ids())
        if len(rows) != 1:
            return False
        folder = Path(rows[0].output_folder)
        if not folder.is_dir():
            self._say(f"The output folder {folder} is gone.")
            return False
        ok = open_with_desktop(self, folder, "the run's output folder")  # a failure is said, with its path to copy
        if not ok:
            self._say(f"Could not open a file manager; the files are in {folder}")
        return bool(ok)

    def delete_selected(self) -> Any:
        """Open the delete dialog for the selected runs (files listed; deleted only when ticked)."""
        from guitrainer.ui.runs.dialogs import DeleteRunsDialog

        store, ids = self.store, self.selected_ids()
        if store is None or not ids:
            return None
        rows = self._rows(ids)
        running = [r.name for r in rows if r.status == "running"]
        if running:
            self._say(f"“{running[0]}” is still running; stop it first.")
            return None
        files: list[Path] = []
        for r in rows:
            files += [f for f in store.files_of(r.id) if f not in files]
        dlg = DeleteRunsDialog([r.name for r in rows], files, self)
        dlg.accepted.connect(lambda: self._delete(ids, dlg.files if dlg.delete_files else []))
        self.delete_dialog = dlg
        dlg.open()
        return dlg

    def _delete(self, ids: list[int], files: list[Path]) -> None:
        store = self.store
        if store is None:
            return
        problems = remove_paths(files) if files else []
        try:
            for i in ids:
                store.delete_run(i)
        except sqlite3.Error as e:
            self._store_failed(e, "written")
            self.refresh()
            return
        self.refresh()
        if problems:
            self._say("Some files could not be deleted: " + "; ".join(problems[:3]))
        else:
            kept = "; its files were kept." if len(ids) == 1 else "; their files were kept."
            removed = f" and {plural(len(files), 'file or folder', 'files and folders')}." if files else kept
            self._say(f"Deleted {plural(len(ids), 'run')}{removed}")

    def _say(self, text: str) -> None:
        log.info(text)
        self.status_changed.emit(text)

    # ------------------------------------------------------------------ crash safety
    def check_interrupted(self) -> list[RunRow]:
        """At start: runs left ``running`` by a process that died are marked interrupted; offer to resume
        the newest that has a saved state. Returns the runs marked."""
        store = self.store
        if store is None:
            return []
        try:
            dead = store.mark_dead_runs()
        except sqlite3.DatabaseError as e:  # a damaged file or a full disk: the notice says which
            self._store_failed(e, "checked")
            return []
        if not dead:
            return []
        if self._loaded:
            self.refresh()
        offer = next((r for r in dead if resumable(store, r.id)[0]), None)
        names = ", ".join(f"“{r.name}” (step {r.steps})" for r in dead)
        if offer is None:
            self._say(f"Interrupted runs found: {names}. None of them saved a state to resume from.")
            return dead
        self.interrupted_box = messages.ask(
            self,
            "Resume interrupted training?",
            f"The training “{offer.name}” (started {offer.date_text}) was interrupted at step {offer.steps}: "
            "the app or the computer stopped while it ran.",
            (Button("accept", "Resume", "resume", name="interrupted_resume"), Button("reject", "Not now", "later")),
            lambda answer: self.resume_run(offer.id) if answer == "resume" else None,
            info=f"Its last saved state is at step {offer.state_step}. Resume it from there?",
            name="interrupted_box",
        )
        return dead


def _label(path: str) -> str:
    """A setting's label as the other pages show it, with its section ("Network: Rank (dim)")."""
    try:
        label = field_info(path).metadata.get("label") or path
    except (ConfigError, KeyError):
        return path
    return f"{path.split('.')[0].capitalize()}: {label}"


def dataset_lines(dataset: dict[str, Any]) -> list[str]:
    """A run's recorded dataset in words: its folders (with repeats), class folders and batch settings."""
    lines = []
    for key, title in (("folders", "images"), ("regularization_folders", "class images")):
        for f in dataset.get(key) or []:
            lines.append(f"{title}: {f.get('path', '?')} (repeats {f.get('repeats', 1)})")
    settings = [(dataset.get("resolution"), "{} px"), (dataset.get("batch_size"), "batch {}"),
                (dataset.get("gradient_accumulation"), "accumulating {} batches per step")]
    words = [fmt.format(v) for v, fmt in settings if v not in (None, "")]
    if "bucketing" in dataset:
        words.append("aspect buckets" if dataset["bucketing"] else "square crops")
    if words:
        lines.append("dataset: " + ", ".join(words))
    return lines

