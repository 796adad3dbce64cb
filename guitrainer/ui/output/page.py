"""Output page: where the LoRA goes, its format, save precision, metadata, and a check that others can load it.

No torch at import: the file-name preview is :mod:`guitrainer.core.runs.names`' (one label on every file of
a run: the next run's before it starts, the running run's while it runs), and the Verify button imports
the engine in its worker thread.
"""

from __future__ import annotations

import copy
import html
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.paths import expand
from guitrainer.core.dataset.report import plural
from guitrainer.core.demo.progress import is_demo
from guitrainer.core.events import SampleImage, SavedFile
from guitrainer.core.model.variant_readers import save_precision_note
from guitrainer.core.precision.advisor import save_overflow_advice
from guitrainer.core.precision.numerics import SaveReport
from guitrainer.core.runs import names as run_names
from guitrainer.core.runs.names import RunFiles
from guitrainer.engine import export as X
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding, label_for, make_editor
from guitrainer.ui.output.save_report import SaveReportView
from guitrainer.ui.widgets.before_after import BeforeAfterView
from guitrainer.ui.widgets.pages import Page, scrolled, two_columns
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)

METADATA_FIELDS = ("title", "author", "description", "trigger_words", "license")
#: ``verifier(path, model_config) -> VerifyResult``; the default is the real engine
Verifier = Callable[[str, Any], Any]


def _default_verifier(path: str, model_cfg: Any) -> Any:
    from guitrainer.engine.verify import verify_lora

    return verify_lora(path, model_cfg)


class VerifyWorker(BaseWorker):
    """Runs :func:`guitrainer.engine.verify.verify_lora` on a file against the base model, off the GUI thread."""

    def __init__(self, path: str, model_cfg: Any, verifier: Verifier | None = None):
        super().__init__()
        self.path, self.model_cfg = path, model_cfg
        self._verifier = verifier or _default_verifier

    def work(self) -> Any:
        return self._verifier(self.path, self.model_cfg)


class OutputPage(Page):
    """Output folder and name with a preview of the files, format, save precision (with the fp16 advice),
    save schedule, metadata, and a Verify button.

    Signals:
        verified(object): a verification finished (the :class:`~guitrainer.engine.verify.VerifyResult`).
    """

    title = "Output"
    subtitle = "Where the trained LoRA is written, in which format and precision, and what it says about itself."

    verified = Signal(object)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None, *, verifier: Verifier | None = None):
        super().__init__(binding, parent)
        self._verifier = verifier
        self.verify_running = False
        self._last_run_path = ""
        self._run_files: RunFiles | None = None  # the names of the run going on (None: no run)
        self._run_config: Any = None  # that run's settings (its own copy)
        self._written: dict[str, list[str]] = {}  # what the run going on wrote so far, by kind
        self._samples: list[SampleImage] = []  # the run going on's sample images, in the order made
        self._moved: dict[Path, RunFiles] = {}  # the running run's names per output folder it was given
        self._verifying_path = ""
        self._verified_path = ""  # the file the result shown is about
        self.save_report_view = SaveReportView(self)  # the fp16 check of the last LoRA saved, with numbers
        # the report's table takes the right column's rest (below it, the page scrolled at 1366 x 768)
        columns = [self._where_box(), self._saving_box(), self._verify_box()], [
            self._metadata_box(), self._before_after_box(), self.save_report_view]
        self.body.addLayout(two_columns(*columns, grow=self.save_report_view, equal=True), 1)
        binding.changed.connect(self._on_changed)
        binding.replaced.connect(self._refresh_preview)
        binding.replaced.connect(self._refresh_readers_note)
        self._refresh_preview()

    # ------------------------------------------------------------------ layout
    def _row(self, form: QFormLayout, path: str, editor: QWidget | None = None) -> QWidget:
        editor = editor or make_editor(self.binding, path, self)
        lab = QLabel(label_for(path), self)
        lab.setToolTip(editor.toolTip())
        lab.setBuddy(editor)
        form.addRow(lab, editor)
        return editor

    def _where_box(self) -> QGroupBox:
        box = QGroupBox("Where and how", self)
        form = QFormLayout(box)
        self.folder_edit = make_editor(self.binding, "output.folder", box)
        browse = QPushButton("Browse…", box)
        browse.setObjectName("browse_output_folder")
        browse.clicked.connect(self._browse_folder)
        row = QWidget(box)
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(self.folder_edit, 1)
        h.addWidget(browse)
        self._row(form, "output.folder", row).setToolTip(self.folder_edit.toolTip())
        # Overwrite beside the name it is about (a row of its own would push the page past 1366 x 768)
        self.name_edit = make_editor(self.binding, "output.name", box)
        self.overwrite_check = make_editor(self.binding, "output.overwrite", box)
        if isinstance(self.overwrite_check, QCheckBox):
            self.overwrite_check.setText(label_for("output.overwrite"))
        name_row = QWidget(box)
        h = QHBoxLayout(name_row)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(self.name_edit, 1)
        h.addWidget(self.overwrite_check)
        self._row(form, "output.name", name_row).setToolTip(self.name_edit.toolTip())
        self.format_combo = self._row(form, "output.format")
        self.preview = QLabel(box)
        self.preview.setObjectName("file_preview")
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(self.preview.textInteractionFlags() | self.preview.textInteractionFlags().TextSelectableByMouse)
        self.preview_title = QLabel("Next run writes", box)
        self.preview_title.setObjectName("file_preview_title")
        form.addRow(self.preview_title, scrolled(self.preview, lines=2))  # all of them in its tooltip
        self.last_run_label = QLabel("No run yet in this session.", box)
        self.last_run_label.setObjectName("last_run_file")
        self.last_run_label.setWordWrap(True)
        self.last_run_label.setTextInteractionFlags(self.last_run_label.textInteractionFlags() | self.last_run_label.textInteractionFlags().TextSelectableByMouse)
        form.addRow(QLabel("Last run wrote", box), scrolled(self.last_run_label, lines=2))  # more lines scroll
        return box

    def _before_after_box(self) -> QGroupBox:
        """The last run's first and last sample of each prompt (hidden until a run with samples ends); in the
        right column, where the save report's table gives it room."""
        box = QGroupBox("Before / after", self)
        box.setObjectName("before_after_box")
        self.before_after_title = box
        self.before_after = BeforeAfterView(box, picture_size=64)
        QVBoxLayout(box).addWidget(self.before_after)
        box.setVisible(False)
        return box

    def _saving_box(self) -> QGroupBox:
        box = QGroupBox("Saving", self)
        form = QFormLayout(box)
        self._row(form, "precision.save")
        self.advice_label = QLabel(box)
        self.advice_label.setObjectName("save_advice")
        self.advice_label.setWordWrap(True)
        self.advice_label.setStyleSheet("color: #b3261e;")
        self.advice_button = QPushButton("Save as bf16", box)
        self.advice_button.setObjectName("apply_save_advice")
        self.advice_button.setToolTip("Sets Save precision for the next saves; the file already written stays as it is")
        self.advice_button.clicked.connect(self._apply_advice)
        adv = QWidget(box)  # the button beside the words, which scroll inside two lines: the page never grows
        v = QHBoxLayout(adv)
        v.setContentsMargins(0, 0, 0, 0)
        v.addWidget(scrolled(self.advice_label, lines=2), 1)
        v.addWidget(self.advice_button, 0, Qt.AlignmentFlag.AlignTop)
        form.addRow(adv)
        self._advice_row = adv
        adv.setVisible(False)
        self._advice: Any = None
        self.readers_note = QLabel(box)  # what this save precision costs the file in a reader (A1111's LoHa / LoKr)
        self.readers_note.setObjectName("readers_note")
        self.readers_note.setWordWrap(True)
        self.readers_note.setStyleSheet("color: #8a5300;")
        self._readers_area = scrolled(self.readers_note, lines=2)
        form.addRow(self._readers_area)
        self._refresh_readers_note()
        # Keep last beside Save every (it prunes those saves): the Where box's preview of every file needs the room
        every = make_editor(self.binding, "output.save_every_n_epochs", box)
        keep = make_editor(self.binding, "output.keep_last", box)
        keep_label = QLabel(label_for("output.keep_last"), box)
        keep_label.setToolTip(keep.toolTip())
        keep_label.setBuddy(keep)
        saves = QWidget(box)
        h = QHBoxLayout(saves)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(every, 1)
        h.addWidget(keep_label)
        h.addWidget(keep, 1)
        self._row(form, "output.save_every_n_epochs", saves).setToolTip(every.toolTip())
        self.tensorboard_switch = self._row(form, "output.tensorboard")
        # 0 means "off" / "no limit": say it in words instead of "0 epochs"
        for editor, zero in ((every, "never (only the final LoRA)"), (keep, "all of them")):
            if isinstance(editor, QSpinBox) and editor.minimum() == 0:
                editor.setSpecialValueText(zero)
        return box

    def _metadata_box(self) -> QGroupBox:
        box = QGroupBox("About this LoRA (saved in the file)", self)
        form = QFormLayout(box)
        for name in METADATA_FIELDS:
            editor = self._row(form, f"output.{name}")
            if name == "description":  # three lines (it scrolls past them): the report below gets the room
                editor.setMaximumHeight(editor.fontMetrics().lineSpacing() * 3 + 12)
        return box

    def _verify_box(self) -> QGroupBox:
        box = QGroupBox("Check a LoRA file", self)
        v = QVBoxLayout(box)
        hint = QLabel("Reads the file as the programs that use it do, and compares with the network as trained.", box)
        hint.setToolTip("LoRA / LoCon through diffusers, LoHa / LoKr / DoRA by ComfyUI's and A1111's rules, into the "
                        "base model chosen on the Model & Precision page; the verdict also says which programs read the file.")
        hint.setWordWrap(True)
        hint.setStyleSheet("color: palette(placeholder-text);")
        v.addWidget(hint)
        row = QHBoxLayout()
        self.verify_path = QLineEdit(box)
        self.verify_path.setObjectName("verify_path")
        self.verify_path.setPlaceholderText("a .safetensors LoRA, or a diffusers LoRA folder")
        self.verify_path.textChanged.connect(self._on_verify_path_edited)
        browse = QPushButton("Browse…", box)
        browse.clicked.connect(self._browse_verify)
        self.verify_button = QPushButton("Verify", box)
        self.verify_button.setObjectName("verify_button")
        self.verify_button.clicked.connect(self.start_verify)
        row.addWidget(self.verify_path, 1)
        row.addWidget(browse)
        row.addWidget(self.verify_button)
        v.addLayout(row)
        self.verify_result = QLabel(box)
        self.verify_result.setObjectName("verify_result")
        self.verify_result.setWordWrap(True)
        v.addWidget(scrolled(self.verify_result, lines=2))  # a LoKr / DoRA verdict (4-6 lines) scrolls inside
        return box

    # ------------------------------------------------------------------ file names
    def _refresh_readers_note(self) -> None:
        """Say what the chosen save precision costs this network type in a reader; hidden when nothing."""
        cfg = self.binding.config
        note = save_precision_note(cfg.network.type, cfg.precision.save)
        self.readers_note.setText(note)
        self._readers_area.setVisible(bool(note))

    def _on_changed(self, path: str) -> None:
        if path in ("network.type", "precision.save"):
            self._refresh_readers_note()
        if path.startswith("output."):
            self._refresh_preview()
        if path == "precision.save" and self.binding.get("precision.save") != "fp16":
            self._advice_row.setVisible(False)

    def show_run_files(self, files: RunFiles) -> None:
        """A run started and chose its names: the preview shows them ("This run writes") until it ends."""
        self._run_files = files
        self._moved = {files.folder: files}
        self._refresh_preview()

    def _running_files(self) -> RunFiles | None:
        """The running run's names in the output folder set now: a folder chosen mid-run gets the run's label
        where it is free there, as the engine decides it (:func:`~guitrainer.core.runs.names.choose`), once."""
        files = self._run_files
        if files is None:
            return None
        output = copy.copy(self._run_config.output if self._run_config is not None else self.binding.config.output)
        output.folder = self.binding.config.output.folder
        folder = expand(output.folder)
        if folder not in self._moved:
            self._moved[folder] = run_names.choose(output, keep=files.label)
        return self._moved[folder]

    def _note_written(self, item: Any) -> None:
        """A file the run going on wrote (a SavedFile or a SampleImage), for "Last run wrote"."""
        kind = getattr(item, "kind", "sample")
        self._written.setdefault(kind, []).append(str(item.path))
        if isinstance(item, SampleImage):
            self._samples.append(item)

    def _run_failed(self, *_args: object) -> None:
        """The run ended with an error (no summary): the preview goes back to the next run's names."""
        self._run_files = self._run_config = None
        self._refresh_preview()

    def show_last_run(self, summary: Any) -> None:
        """A run ended: name the files it actually wrote (``name_3.safetensors``, ``name_3_state``, its samples)."""
        demo = self._run_config is not None and is_demo(self._run_config)
        self._run_files = self._run_config = None
        written, self._written = self._written, {}
        self.before_after.set_samples(self._samples, demo=demo)  # the run's first and last picture of each prompt
        self.before_after_title.setVisible(bool(self.before_after.rows))
        path = getattr(summary, "lora_path", "") or ""
        state = getattr(summary, "state_path", "") or ""
        folder = Path(path or state).parent if path or state else None
        parts = [f"<b>{html.escape(path)}</b>" if path else "no LoRA file"]
        if state:
            parts.append(f"<b>state</b> {html.escape(_inside(state, folder) if folder else state)}")
        samples = written.get("sample", [])
        if samples:
            parts.append(f"<b>{plural(len(samples), 'sample image')}</b> in {html.escape(str(Path(samples[-1]).parent))}")
        saves = [p for p in written.get("lora", []) if p != path]
        if saves:
            parts.append(f"<b>{plural(len(saves), 'other save')}</b>, the last {html.escape(saves[-1])}")
        self.last_run_label.setText(" · ".join(parts) if path or state or samples else "The last run wrote no LoRA file.")
        self.last_run_label.setToolTip("\n".join([p for p in (path, state) if p] + samples[-1:] + saves))
        self._refresh_preview()
        if not path:
            return
        if not self.verify_path.text().strip() or self.verify_path.text() == self._last_run_path:
            self.verify_path.setText(path)  # "Verify" checks that file
        self._last_run_path = path

    def _preview_rows(self) -> list[tuple[str, str]]:
        files = self._running_files()
        config = self._run_config if files is not None and self._run_config is not None else self.binding.config
        return run_names.planned(config, files)

    def _refresh_preview(self) -> None:
        running = self._run_files is not None
        rows = self._preview_rows()
        files = self._running_files()
        folder = files.folder if files is not None else expand(self.binding.config.output.folder)
        self.preview_title.setText("This run writes" if running else "Next run writes")
        # in the output folder (named just above), one after the other; the whole paths in the tooltip
        self.preview.setText(
            " · ".join(f"<b>{html.escape(what)}</b> {html.escape(_inside(path, folder))}" for what, path in rows)
        )
        self.preview.setToolTip(
            "In " + str(folder) + ":\n" + "\n".join(path for _w, path in rows) + "\n\nEvery file of a run carries one "
            "name: the output name, or name_2, name_3, … when an earlier run's files are there. A file that exists is "
            "never overwritten unless “Overwrite” is on."
        )

    def preview_paths(self) -> list[str]:
        """The previewed paths, in order (final, intermediate when enabled, state folder, samples, logs)."""
        return [p for _w, p in self._preview_rows()]

    def _browse_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Output folder", start_dirs.start_near(str(self.binding.get("output.folder")), "output")
        )
        if folder:
            self.binding.set("output.folder", folder)

    def _browse_verify(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "LoRA file", start_dirs.start_near(str(self.binding.get("output.folder")), "output"), "LoRA (*.safetensors)"
        )
        if path:
            self.verify_path.setText(path)

    # ------------------------------------------------------------------ fp16 advice
    def begin_run(self, worker: object = None, *_args: object) -> None:
        """A run starts (``worker``: its :class:`~guitrainer.ui.workers.TrainingWorker`): what the last one's save
        warned about no longer applies to the file to come, and the preview follows the run's own names."""
        self._advice = None
        self._advice_row.setVisible(False)
        self._written = {}
        self._samples = []
        self._run_config = getattr(worker, "config", None)
        for name, slot in (("files_chosen", self.show_run_files), ("checkpoint_saved", self._note_written),
                           ("sample_ready", self._note_written), ("failed", self._run_failed)):  # fmt: skip
            signal = getattr(worker, name, None)
            if signal is not None:
                signal.connect(slot)

    def set_fp16_overflow(self, report: Mapping[str, float] | list[str] | None) -> None:
        """Show (or clear) the advice for tensors the last run could not save in fp16 (name -> max |value|)."""
        self._advice = save_overflow_advice(report) if report else None
        if self._advice is None:
            self._advice_row.setVisible(False)
            return
        self.advice_label.setText(self._advice.message)
        self.advice_button.setText(self._advice.suggestion_text.capitalize() or "Save as bf16")
        self._advice_row.setVisible(True)

    def show_save_report(self, report: SaveReport | SavedFile | None) -> None:
        """Show the save-precision report of a LoRA just written (a SavedFile carrying one, or the report)."""
        if isinstance(report, SavedFile):
            report = report.save_report
        if report is not None:
            self.save_report_view.show_report(report)

    def ensure_report_visible(self) -> None:
        """Scroll the page to the save report (screenshots, and after a save the user asked about)."""
        self.ensureWidgetVisible(self.save_report_view)  # a Page is a scroll area

    def note_warning(self, text: str) -> None:
        """Feed the run's warnings here: the fp16 save warning (tagged by the engine) is shown on this page."""
        if not text.startswith(X.FP16_WARNING_TAG):
            return
        self._advice = None
        self.advice_label.setText(text.removeprefix(X.FP16_WARNING_TAG).strip())
        self.advice_button.setText("Save as bf16")
        self._advice_row.setVisible(True)

    def _apply_advice(self) -> None:
        suggestion = self._advice.suggestion if self._advice is not None else {"precision.save": "bf16"}
        for path, value in suggestion.items():
            self.binding.set(path, value)
        self._advice_row.setVisible(False)

    # ------------------------------------------------------------------ verify
    def start_verify(self, path: str | None = None) -> None:
        """Verify ``path`` (default: the path field) in the background; the result appears below the button."""
        path = (path if isinstance(path, str) else None) or self.verify_path.text().strip()
        if not path:
            self.verify_result.setText("Choose a LoRA file to check first.")
            return
        self.verify_running = True
        self._verifying_path = path
        self.verify_path.setText(path)
        if self.verify_button.hasFocus():  # a disabled button hands focus on (to the table): the page jumped
            self.verify_path.setFocus()
        self.verify_button.setEnabled(False)
        self.verify_result.setText(f"Checking {html.escape(Path(path).name)}… (loading the base model and the file)")
        worker = VerifyWorker(path, self.binding.config.copy().model, self._verifier)
        worker.finished.connect(self._on_verified)
        worker.failed.connect(self._on_verify_failed)
        self._worker = worker
        run_in_thread(worker, name="VerifyLoRA")

    def _on_verify_path_edited(self, text: str) -> None:
        """Another file named: the result shown was about the last one, so it goes (unless a check is running)."""
        if not self.verify_running and text.strip() != self._verified_path:
            self.verify_result.setText("")

    def _show_result(self, path: str, ok: bool, text: str) -> None:
        """A result, headed by the file it is about (the field may name another one by the time it arrives)."""
        self._verified_path = path
        mark, color = ("✔", "#1b6e20") if ok else ("✘", "#b3261e")
        name = html.escape(Path(path).name or path)
        self.verify_result.setText(f"<span style='color:{color}'>{mark} <b>{name}</b>: {html.escape(text)}</span>")

    def _on_verified(self, result: Any) -> None:
        self.verify_running = False
        self.verify_button.setEnabled(True)
        self._show_result(self._verifying_path, result.ok, result.message)  # the engine logs the verdict
        self.verified.emit(result)

    def _on_verify_failed(self, message: str, _tb: str) -> None:
        self.verify_running = False
        self.verify_button.setEnabled(True)
        log.warning("verify %s: could not check the file: %s", self._verifying_path, message)
        self._show_result(self._verifying_path, False, f"Could not check the file: {message}")


def _inside(path: str, folder: Path) -> str:
    """``path`` as seen from the output ``folder`` (``samples/x.png``); a path elsewhere stays whole."""
    try:
        return str(Path(path).relative_to(folder))
    except ValueError:
        return path
