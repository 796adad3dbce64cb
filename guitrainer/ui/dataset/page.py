"""Dataset page: drop images and folders, see them as a thumbnail grid, edit captions and tags.

The page owns the list of imported images (a :class:`DatasetModel`) and keeps ``dataset.folders``
in the config in step with it: every folder that directly holds imported images is listed, with its
repeats (editable in the folders table). Loading a config (preset, file) that names other folders
re-reads them, non-recursively, as training does.

Nothing slow runs on the GUI thread: finding files, reading headers and captions happens in a
:class:`~guitrainer.ui.dataset.scan.ScanWorker` thread that hands rows over in batches; thumbnails come
from a thread pool; the summary (buckets, steps, tag counts) is computed in slices of a few ms
(:class:`~guitrainer.ui.dataset.summary.SummaryRunner`). Removing images from the dataset never deletes
files; "Delete files…" asks first and moves them to the trash.

Split by concern: the tool bar (``toolbar``), scanning (``scan``), the summary (``summary``), caption writes
(``captions``: :class:`~guitrainer.ui.dataset.captions.CaptionOperations`, which the page owns); the numbers
and reports themselves live in ``core.dataset.report``, the folder list's sync with the config in
``core.dataset.folder_sync`` (no Qt).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from PySide6.QtCore import (
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QAction, QDragEnterEvent, QDragMoveEvent, QDropEvent, QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QLabel,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.errors import first_line
from guitrainer.config import DatasetFolder
from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.folder_sync import (
    folders_of,
    images_per_folder,
    left_out_on_removal,
    reconcile,
    with_left_out,
)
from guitrainer.core.dataset.report import (
    CollectRequest,
    ImportReport,
    ShownCount,
    SummaryParams,
    describe_filter,
    plural,
    strip_text,
    without_included,
)
from guitrainer.core.dataset.scan import DatasetItem, Flag
from guitrainer.core.demo.dataset import demo_dataset_dir, ensure_demo_dataset
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.dataset.caption_editor import CaptionEditor, CaptionJobRunner
from guitrainer.ui.dataset.captioning import CaptioningPanel
from guitrainer.ui.dataset.captions import CaptionOperations
from guitrainer.ui.dataset.folder_table import FolderTable
from guitrainer.ui.dataset.grid import (
    confirm_delete,
    make_empty_hint,
    make_grid,
    move_to_trash,
    options_form,
    stacked,
)
from guitrainer.ui.dataset.model import DatasetFilterProxy, DatasetModel, ItemRole
from guitrainer.ui.dataset.regularization_panel import RegularizationPanel
from guitrainer.ui.dataset.scan import ScanJob, start_scan
from guitrainer.ui.dataset.summary import SummaryPanel, SummaryRunner
from guitrainer.ui.dataset.tag_tools import TagToolsPanel
from guitrainer.ui.dataset.thumbnails import ThumbnailLoader
from guitrainer.ui.dataset.toolbar import DatasetToolbar
from guitrainer.ui.widgets.drops import local_paths
from guitrainer.ui.widgets.pages import Page

log = logging.getLogger(__name__)

IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.bmp *.PNG *.JPG *.JPEG *.WEBP *.BMP)"
_SUMMARY_KEYS = {
    "dataset.resolution",
    "dataset.bucketing",
    "dataset.min_bucket_resolution",
    "dataset.max_bucket_resolution",
    "dataset.bucket_step",
    "schedule.batch_size",
}


class DatasetPage(Page):
    """The dataset workspace. The main window forwards drops to :meth:`add_paths`."""

    title = "Dataset"
    subtitle = "Your images and their captions. Drop folders or images anywhere on the window to add them."

    import_finished = Signal(object)  # ImportReport, when its images are all in the grid
    items_changed = Signal()  # images added or removed
    status_changed = Signal(str)
    #: once per ``captions.apply_tag_operation``, when it is done: its CaptionEdit, or None (no images, failed)
    tag_operation_finished = Signal(object)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(binding, parent)
        self.undo_stack = QUndoStack(self)
        # bulk caption writes (tag operations, their undo / redo) run here, off the GUI thread
        self.caption_jobs = CaptionJobRunner(self.undo_stack, self)
        self.loader = ThumbnailLoader(self)
        self.model = DatasetModel(self.loader, self)
        self.proxy = DatasetFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        self._known: set = set()  # ds.file_key of every image in the dataset or being imported
        self._known_lock = threading.Lock()  # scan workers add to _known under it
        self._scans: list[ScanJob] = []
        self._syncing = False
        self.last_report: ImportReport | None = None
        self.last_status = ""

        self._build_toolbar()
        self._build_folders()
        self._build_workspace()
        self.status = QLabel(self)
        self.status.setObjectName("dataset_status")
        self.status.setWordWrap(True)
        self.body.addWidget(self.status)
        # no self.finish(): the grid, not a spacer, takes the spare height

        self.summary_runner = SummaryRunner(lambda: self.items, self._summary_params, self)
        self.summary_runner.ready.connect(self._show_summary)
        self.summary_runner.failed.connect(lambda why: self.strip.setText(f"Buckets: {why}"))
        self._shown_frequencies: list[tuple[str, int]] | None = None
        self._summary: ds.DatasetSummary | None = None  # the last one computed: the strip under the grid says it
        # the strip's counts follow the grid's filter: recounted (coalesced) whenever the rows in view change
        self._strip_timer = QTimer(self)
        self._strip_timer.setSingleShot(True)
        self._strip_timer.setInterval(0)
        self._strip_timer.timeout.connect(self._show_strip)
        for signal in (self.proxy.rowsInserted, self.proxy.rowsRemoved, self.proxy.modelReset, self.proxy.layoutChanged):
            signal.connect(self._strip_timer.start)
        self.search.textChanged.connect(self._strip_timer.start)
        self.filter_combo.currentIndexChanged.connect(self._strip_timer.start)
        self._build_actions()
        self.captions = CaptionOperations(
            model=self.model,
            proxy=self.proxy,
            editor=self.editor,
            tag_tools=self.tag_tools,
            captioning=self.captioning,
            jobs=self.caption_jobs,
            undo_stack=self.undo_stack,
            undo_actions=(self.undo_action, self.redo_action),
            binding=binding,
            selected_items=self.selected_items,
            show_status=self.show_status,
            schedule_summary=self._schedule_summary,
            tag_operation_finished=self.tag_operation_finished.emit,
            filter_by_tag=self.filter_by_tag,
        )
        self.editor.runner = self.caption_jobs
        self.caption_jobs.progress.connect(self._show_progress)

        self.setAcceptDrops(True)
        self.viewport().setAcceptDrops(True)
        binding.changed.connect(self._on_config_changed)
        binding.replaced.connect(self._reconcile_from_config)
        self.summary_runner.update_now()
        if binding.get("dataset.folders"):
            self._reconcile_from_config()

    # ------------------------------------------------------------------ layout
    def _build_toolbar(self) -> None:
        self.toolbar = bar = DatasetToolbar(self)
        self.add_folder_button, self.add_images_button = bar.add_folder_button, bar.add_images_button
        self.remove_button, self.delete_button = bar.remove_button, bar.delete_button
        self.filter_combo, self.search, self.tag_chip = bar.filter_combo, bar.search, bar.tag_chip
        self.add_folder_button.clicked.connect(self.add_folder_dialog)
        self.add_images_button.clicked.connect(self.add_images_dialog)
        self.demo_images_button = bar.demo_images_button
        self.demo_images_button.clicked.connect(lambda: self.add_demo_images())
        self.remove_button.clicked.connect(self.remove_selected)
        self.delete_button.clicked.connect(lambda: self.delete_selected_files())
        self.filter_combo.currentIndexChanged.connect(lambda _i: self.proxy.set_mode(self.filter_combo.currentData()))
        self.search.textChanged.connect(self.proxy.set_text)
        self.tag_chip.clicked.connect(lambda: self.filter_by_tag(""))
        self.body.addWidget(bar)

    def _build_folders(self) -> None:
        self.folders_table = FolderTable("Remove this folder from the dataset (files stay on disk)", parent=self)
        self.folders_table.setObjectName("folders_table")
        self.folders_table.repeats_changed.connect(self.set_folder_repeats)
        self.folders_table.remove_requested.connect(self.remove_folder)
        self.empty_hint = make_empty_hint(self)
        self.body.addWidget(self.empty_hint)
        self.body.addWidget(self.folders_table)

    def _build_workspace(self) -> None:
        self.grid = make_grid(self)
        self.delegate = self.grid.itemDelegate()
        self.grid.setModel(self.proxy)
        self.grid.selectionModel().currentChanged.connect(self._on_current_changed)
        self.grid.selectionModel().selectionChanged.connect(lambda *_: self._update_selection_label())
        left = QWidget(self)
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.grid, 1)
        self.strip = QLabel(left)
        self.strip.setObjectName("summary_strip")
        ll.addWidget(self.strip)

        # its autosaves' undo steps report through the caption operations (made once the actions exist)
        self.editor = CaptionEditor(
            self.undo_stack, self.loader, lambda paths, written: self.captions.captions_changed(paths, written), self
        )
        self.editor.status_message.connect(self.show_status)
        self.editor.next_requested.connect(lambda: self.step_current(1))
        self.editor.previous_requested.connect(lambda: self.step_current(-1))
        self.tag_tools = TagToolsPanel(self)
        self.tag_tools.tag_clicked.connect(self.filter_by_tag)
        self.captioning = CaptioningPanel(self)
        self.summary = SummaryPanel(self)
        self.tabs = QTabWidget(self)
        self.tabs.setObjectName("dataset_tabs")
        self.tabs.addTab(self.editor, "Caption")
        self.tabs.addTab(self.tag_tools, "Tags")
        self.tabs.addTab(self.captioning, "Auto-caption")
        self.tabs.addTab(stacked(self, self.summary), "Summary")
        self.tabs.addTab(stacked(self, options_form(self.binding, self)), "Options")
        self.regularization = RegularizationPanel(self.binding, self.loader, self)  # class images (issue 11)
        self.tabs.addTab(self.regularization, "Class images")
        self.tabs.setTabToolTip(self.tabs.count() - 1, "Regularization (class) images: prior preservation")
        self.tabs.setUsesScrollButtons(True)  # a narrow window scrolls the tabs instead of eliding "Regula…"
        self.tabs.setElideMode(Qt.TextElideMode.ElideNone)

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setMinimumHeight(300)  # fits 1366×768 without scrolling the page
        # its (tall) size hint is ignored: it fills the page, which scrolls only below the minimum
        self.splitter.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.body.addWidget(self.splitter, 1)

    def _build_actions(self) -> None:
        def action(text: str, keys: list[QKeySequence], slot: Callable[[], object]) -> QAction:
            a = QAction(text, self)
            a.setShortcuts(keys)
            a.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            a.triggered.connect(slot)
            self.addAction(a)
            return a

        self.next_action = action(
            "Next image", [QKeySequence("Alt+Right"), QKeySequence("Ctrl+PgDown")], lambda: self.step_current(1)
        )
        self.previous_action = action(
            "Previous image", [QKeySequence("Alt+Left"), QKeySequence("Ctrl+PgUp")], lambda: self.step_current(-1)
        )
        self.focus_caption_action = action("Edit caption", [QKeySequence("Ctrl+E")], self._focus_caption)
        # every key the platform has for them (Redo: Ctrl+Y and Ctrl+Shift+Z), as the caption box takes them
        undo_keys = QKeySequence.keyBindings(QKeySequence.StandardKey.Undo)
        redo_keys = QKeySequence.keyBindings(QKeySequence.StandardKey.Redo)
        self.undo_action = action("Undo caption change", undo_keys, self.editor.undo)
        self.redo_action = action("Redo caption change", redo_keys, self.editor.redo)

    # ------------------------------------------------------------------ public API
    @property
    def items(self) -> list[DatasetItem]:
        return self.model.items

    def is_loading(self) -> bool:
        """True while images are still being read in the background."""
        return bool(self._scans)

    def add_paths(self, paths: Sequence[str | Path]) -> ImportReport:
        """Import folders (searched fully) and image files; a worker thread finds and reads them.

        Returns at once. The report is filled in when the files are found (the status line then says
        what was found); ``import_finished(report)`` follows when every row is in the grid.
        """
        report = ImportReport()
        self.last_report = report
        self.show_status("Looking for images…")
        self._include(paths)
        self._start_scan([CollectRequest(tuple(Path(p) for p in paths))], report)
        return report

    # ------------------------------------------------------------------ left-out images (dataset.exclude)
    def _excluded(self) -> list[str]:
        return list(self.binding.get("dataset.exclude"))

    def _set_excluded(self, paths: list[str]) -> None:
        if paths != self._excluded():
            self._syncing = True
            try:
                self.binding.set("dataset.exclude", paths)
            finally:
                self._syncing = False

    def _exclude(self, paths: Iterable[str]) -> None:
        self._set_excluded(with_left_out(self._excluded(), paths))

    def _include(self, paths: Sequence[str | Path]) -> None:
        """Images (or folders of images) the user adds are no longer left out of training."""
        self._set_excluded(without_included(self._excluded(), paths))

    @Slot(object, object)
    def _on_partial_folders(self, report: ImportReport, found: list[tuple[str, list[str]]]) -> None:
        report.partial_folders = [(folder, len(others)) for folder, others in found]
        self._exclude(p for _, others in found for p in others)

    def add_folder_dialog(self) -> ImportReport | None:
        """File > Add folder: choose a folder and import it."""
        folder = start_dirs.choose_folder(self, "Add a folder of training images", "images")
        return self.add_paths([folder]) if folder else None

    def add_demo_images(self) -> ImportReport | None:
        """Dataset > Use the demo images: draw the Demo dataset (the first time) and add its folder."""
        try:
            folder = ensure_demo_dataset()
        except OSError as e:
            self.show_status(f"Could not write the demo images: {first_line(e)}. Free some disk space, or check that "
                             f"{demo_dataset_dir().parent} can be written, and try again.")
            return None
        return self.add_paths([folder])

    def add_images_dialog(self) -> ImportReport | None:
        files = start_dirs.choose_files(self, "Add training images", "images", IMAGE_FILTER)
        return self.add_paths(files) if files else None

    def selected_items(self) -> list[DatasetItem]:
        rows = sorted(self.proxy.mapToSource(i).row() for i in self.grid.selectionModel().selectedIndexes())
        return [self.model.item(r) for r in rows]

    def visible_items(self) -> list[DatasetItem]:
        return [self.model.item(self.proxy.mapToSource(self.proxy.index(r, 0)).row()) for r in range(self.proxy.rowCount())]

    def select_rows(self, rows: Sequence[int]) -> None:
        """Select grid rows (in the filtered order); the first becomes the current one."""
        sm = self.grid.selectionModel()
        sm.clearSelection()
        for n, r in enumerate(rows):
            idx = self.proxy.index(r, 0)
            flags = QItemSelectionModel.SelectionFlag.Select
            if n == 0:
                sm.setCurrentIndex(idx, flags)
            else:
                sm.select(idx, flags)

    def step_current(self, delta: int) -> None:
        """Next / previous image in the grid (saves the caption first)."""
        n = self.proxy.rowCount()
        if not n:
            return
        cur = self.grid.currentIndex()
        row = 0 if not cur.isValid() else max(0, min(n - 1, cur.row() + delta))
        idx = self.proxy.index(row, 0)
        self.grid.selectionModel().setCurrentIndex(idx, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        self.grid.scrollTo(idx)

    def filter_by_tag(self, tag: str) -> None:
        self.proxy.set_tag(tag)
        self.toolbar.show_tag(tag)
        self._strip_timer.start()

    def remove_selected(self) -> int:
        """Take the selected images out of the dataset (files stay on disk)."""
        items = self.selected_items()
        if not items:
            return 0
        self.editor.flush()
        if self.editor.item in items:
            self.editor.set_item(None)
        for it in items:
            self._known.discard(ds.file_key(it.image_path))
        n = self.model.remove_items(items)
        self._exclude(left_out_on_removal(items, self.items))
        self._after_items_changed()
        self.show_status(f"Removed {n} image{'s' if n != 1 else ''} from training; no files were deleted.")
        return n

    def delete_selected_files(self, confirm: bool = True) -> int:
        """Move the selected images and their captions to the trash, after a confirmation."""
        items = self.selected_items()
        if not items:
            return 0
        if confirm and not confirm_delete(self, len(items)):
            return 0
        self.editor.flush()
        if self.editor.item in items:
            self.editor.set_item(None)
        gone, failed = move_to_trash(items)
        self.editor.forget(gone)  # their captions went to the trash with them: typed text must not bring one back
        for it in gone:
            self._known.discard(ds.file_key(it.image_path))
        self.model.remove_items(gone)
        self._after_items_changed()
        msg = f"Moved {len(gone)} image{'s' if len(gone) != 1 else ''} to the trash."
        if failed:
            msg += f" Could not move {len(failed)} (e.g. {failed[0]})."
        self.show_status(msg)
        return len(gone)

    def _show_progress(self, text: str) -> None:
        """Progress of a caption job: the status line (and window) show it; not logged, unlike show_status."""
        self.status.setText(text)
        self.status.setToolTip("")
        self.status_changed.emit(text)

    def show_status(self, text: str, details: str = "") -> None:
        self.last_status = text
        self.status.setText(text)
        self.status.setToolTip(details)
        self.status_changed.emit(text)
        log.info("%s", text)

    def shutdown(self) -> None:
        """Stop background work (window closing); captions being written are written to the end."""
        self.caption_jobs.wait()
        self.editor.flush()
        for job in list(self._scans):
            job.cancel()
        for job in list(self._scans):
            job.wait(5000)
        self.captioning.shutdown()
        self.regularization.shutdown()
        self.loader.shutdown()

    # ------------------------------------------------------------------ drag and drop
    def event(self, e: QEvent) -> bool:
        # QAbstractScrollArea only handles drags that arrive at its viewport; take them at the page too.
        if isinstance(e, QDragEnterEvent):
            self.dragEnterEvent(e)
            return True
        if isinstance(e, QDragMoveEvent):
            self.dragMoveEvent(e)
            return True
        if isinstance(e, QDropEvent) and e.type() == QEvent.Type.Drop:
            self.dropEvent(e)
            return True
        return super().event(e)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if local_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if local_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = local_paths(event)
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.add_paths(paths)

    # ------------------------------------------------------------------ scanning
    def _start_scan(self, requests: list[CollectRequest], report: ImportReport) -> None:
        def connect(job: ScanJob) -> None:
            job.partial_folders.connect(self._on_partial_folders)
            job.collected.connect(self._on_collected)
            job.batch_loaded.connect(self._on_batch)
            job.done.connect(self._on_scan_done)
            self._scans.append(job)

        self.empty_hint.setVisible(False)
        g = self.binding.get
        start_scan(
            requests, report, g("dataset.caption_extension"), g("dataset.resolution"), self._known, self._known_lock,
            self, connect,
        )  # fmt: skip

    @Slot(object)
    def _on_collected(self, report: ImportReport) -> None:
        if report is self.last_report:
            reading = " Reading images…" if report.added else ""
            self.show_status(report.message() + reading, report.details())

    @Slot(object)
    def _on_batch(self, items: list[DatasetItem]) -> None:
        had = self.model.rowCount()
        self.model.add_items(items)
        if not had and self.proxy.rowCount() and not self.grid.currentIndex().isValid():
            self.grid.selectionModel().setCurrentIndex(self.proxy.index(0, 0), QItemSelectionModel.SelectionFlag.NoUpdate)
        self._schedule_summary()

    @Slot(object, str)
    def _on_scan_done(self, job: ScanJob, error: str) -> None:
        if job in self._scans:
            self._scans.remove(job)
        job.deleteLater()
        self._after_items_changed()
        report = job.report
        if error:
            self.show_status(f"Reading the images failed: {error}. The images read so far are in the grid.")
        elif not self._scans:
            self.show_status(report.message(), report.details())
        self.import_finished.emit(report)

    # ------------------------------------------------------------------ config sync
    def folder_list(self) -> list[DatasetFolder]:
        """The folders of the imported images, in import order, with their repeats."""
        return [DatasetFolder(path=path, repeats=repeats) for path, repeats in folders_of(self.items)]

    def _after_items_changed(self) -> None:
        self._sync_config()
        self._rebuild_folders_table()
        self.empty_hint.setVisible(not self.items and not self._scans)
        self._schedule_summary()
        self.items_changed.emit()

    def _sync_config(self) -> None:
        folders = self.folder_list()
        current = self.binding.get("dataset.folders")
        if [(f.path, f.repeats) for f in current] == [(f.path, f.repeats) for f in folders]:
            return
        self._syncing = True
        try:
            self.binding.set("dataset.folders", folders)
        finally:
            self._syncing = False

    def _rebuild_folders_table(self) -> None:
        folders = self.folder_list()
        self.folders_table.set_folders(folders, images_per_folder(self.items))
        self.folders_table.setVisible(bool(folders))

    def set_folder_repeats(self, folder: str, repeats: int) -> None:
        for it in self.items:
            if str(it.folder) == folder:
                it.repeats = repeats
        self._sync_config()
        self._schedule_summary()

    def remove_folder(self, folder: str) -> int:
        items = [it for it in self.items if str(it.folder) == folder]
        if self.editor.item in items:
            self.editor.set_item(None)
        for it in items:
            self._known.discard(ds.file_key(it.image_path))
        n = self.model.remove_items(items)
        self._include([folder])  # the folder is gone: its left-out images need no entry any more
        self._after_items_changed()
        self.show_status(f"Removed the folder {Path(folder).name} ({plural(n, 'image')}) from the dataset; no files were deleted.")
        return n

    def _on_config_changed(self, path: str) -> None:
        if path == "dataset.folders" and not self._syncing:
            self._reconcile_from_config()
        elif path == "dataset.exclude" and not self._syncing:
            self._reconcile_from_config(rescan=True)  # edited by hand: drop and bring back images to match
        elif path == "dataset.caption_extension":
            self.captions.reload()
        elif path == "dataset.resolution":
            res = self.binding.get(path)
            for it in self.items:
                if it.width:
                    it.flags -= {Flag.SMALL, Flag.LARGE}
                    it.flags |= ds.size_flags(it.width, it.height, res)
            self.model.refresh_all()
            self._schedule_summary()
        elif path in _SUMMARY_KEYS:
            self._schedule_summary()

    def _reconcile_from_config(self, rescan: bool = False) -> None:
        """Make the grid match ``dataset.folders`` less ``dataset.exclude`` (a preset or file was loaded, or
        another editor changed them). ``rescan`` lists folders already shown again, for re-included images."""
        plan = reconcile(self.items, self.binding.get("dataset.folders"), self._excluded(), rescan=rescan)
        if plan.gone:
            if self.editor.item in plan.gone:
                self.editor.set_item(None)
            for it in plan.gone:
                self._known.discard(ds.file_key(it.image_path))
            self.model.remove_items(plan.gone)
        for it in self.items:
            it.repeats = plan.repeats_of(it)
        if plan.to_read:
            self._start_scan(plan.to_read, ImportReport())
        self._rebuild_folders_table()
        self._schedule_summary()
        self.empty_hint.setVisible(not self.items and not self._scans)

    # ------------------------------------------------------------------ captions
    def _on_current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        item = current.data(ItemRole) if current.isValid() else None
        self.editor.set_item(item)
        if item is not None or not self.proxy.rowCount():
            self.proxy.pin(item)

    def _focus_caption(self) -> None:
        self.tabs.setCurrentWidget(self.editor)
        if self.editor.item is None:
            self.step_current(0)
        self.editor.focus_caption()

    # ------------------------------------------------------------------ summary
    def _schedule_summary(self) -> None:
        self.summary_runner.schedule()

    def _summary_params(self) -> SummaryParams:
        g = self.binding.get
        return SummaryParams(
            resolution=int(g("dataset.resolution")),
            bucketing=bool(g("dataset.bucketing")),
            min_side=int(g("dataset.min_bucket_resolution")),
            max_side=int(g("dataset.max_bucket_resolution")),
            step=int(g("dataset.bucket_step")),
            batch_size=int(g("schedule.batch_size")),
        )

    def _show_summary(self, s: ds.DatasetSummary, freq: list[tuple[str, int]], params: SummaryParams) -> None:
        self.summary.show_summary(s, params.batch_size, params.bucketing)
        self._summary = s
        self._show_strip()
        if freq != self._shown_frequencies:  # refilling the tag table costs 5-40 ms for 500 tags
            self._shown_frequencies = freq
            self.tag_tools.set_frequencies(freq)
        self._update_selection_label()

    def _show_strip(self) -> None:
        """The line under the grid: its counts follow the filter ("2 of 30 images (search “circle”)")."""
        if self._summary is None:
            return
        mode = self.filter_combo.currentData()
        label = self.filter_combo.currentText() if mode != "all" else ""
        words = describe_filter(label, self.search.text(), self.proxy.tag)
        # the images the filter matches (the one being edited stays in view even when it no longer does)
        view = ShownCount.of([it for it in self.items if self.proxy.matches(it)], len(self.items), words) if words else None
        self.strip.setText(strip_text(self._summary, bool(self._scans), view))

    def _update_selection_label(self) -> None:
        n = len(self.grid.selectionModel().selectedIndexes())
        self.remove_button.setEnabled(n > 0)
        self.delete_button.setEnabled(n > 0)
