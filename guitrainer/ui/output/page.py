"""Output page: where the LoRA goes, its format, save precision, metadata, and a check that others can load it.

No torch at import: the file-name preview uses :mod:`guitrainer.engine.export`'s pure helpers, and the
Verify button imports the engine in its worker thread.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
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

from guitrainer.core.events import SavedFile
from guitrainer.core.precision.advisor import save_overflow_advice
from guitrainer.core.precision.numerics import SaveReport
from guitrainer.engine import export as X
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding, label_for, make_editor
from guitrainer.ui.output.save_report import SaveReportView
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
        self._verifying_path = ""
        self._verified_path = ""  # the file the result shown is about
        self.save_report_view = SaveReportView(self)  # the fp16 check of the last LoRA saved, with numbers
        # the report's table takes the right column's rest (below it, the page scrolled at 1366 x 768)
        columns = [self._where_box(), self._saving_box(), self._verify_box()], [self._metadata_box(), self.save_report_view]
        self.body.addLayout(two_columns(*columns, grow=self.save_report_view, equal=True), 1)
        binding.changed.connect(self._on_changed)
        binding.replaced.connect(self._refresh_preview)
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
        self.name_edit = self._row(form, "output.name")
        self.format_combo = self._row(form, "output.format")
        self._row(form, "output.overwrite")
        self.preview = QLabel(box)
        self.preview.setObjectName("file_preview")
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(self.preview.textInteractionFlags() | self.preview.textInteractionFlags().TextSelectableByMouse)
        form.addRow(QLabel("Files written", box), self.preview)
        self.last_run_label = QLabel("No run yet in this session.", box)
        self.last_run_label.setObjectName("last_run_file")
        self.last_run_label.setWordWrap(True)
        self.last_run_label.setTextInteractionFlags(self.last_run_label.textInteractionFlags() | self.last_run_label.textInteractionFlags().TextSelectableByMouse)
        form.addRow(QLabel("Last run wrote", box), self.last_run_label)
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
        every = self._row(form, "output.save_every_n_epochs")
        keep = self._row(form, "output.keep_last")
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
    def _on_changed(self, path: str) -> None:
        if path.startswith("output."):
            self._refresh_preview()
        if path == "precision.save" and self.binding.get("precision.save") != "fp16":
            self._advice_row.setVisible(False)

    def show_last_run(self, summary: Any) -> None:
        """A run ended: name the file it actually wrote (``name_3.safetensors`` when others were there)."""
        path = getattr(summary, "lora_path", "") or ""
        if not path:
            self.last_run_label.setText("The last run wrote no LoRA file.")
            return
        self.last_run_label.setText(f"<b>{html.escape(path)}</b>")
        if not self.verify_path.text().strip() or self.verify_path.text() == self._last_run_path:
            self.verify_path.setText(path)  # "Verify" checks that file
        self._last_run_path = path
        self._refresh_preview()

    def _refresh_preview(self) -> None:
        rows = X.planned_files(self.binding.config.output)
        rows = [("Next run's LoRA" if what == "Final LoRA" else what, p) for what, p in rows]
        self.preview.setText(
            "<br>".join(f"<b>{html.escape(what)}</b>: {html.escape(path)}" for what, path in rows)
        )
        self.preview.setToolTip("A file that exists is never overwritten unless “Overwrite” is on: the next run "
                                "then writes name_2, name_3, …")

    def preview_paths(self) -> list[str]:
        """The previewed paths, in order (final, intermediate when enabled, state folder)."""
        return [p for _w, p in X.planned_files(self.binding.config.output)]

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
    def begin_run(self, *_args: object) -> None:
        """A run starts: what the last one's save warned about no longer applies to the file to come."""
        self._advice = None
        self._advice_row.setVisible(False)

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
