"""TextEncoderRow: ``model.text_encoders``, the text encoders' files of a split install (Flux.1, SD 3.5 kept as
ComfyUI keeps them: the transformer in models/diffusion_models, the text encoders in models/text_encoders, the
VAE in models/vae), and what the set of files chosen lacks.

The row shows only where it means something: the base model is one .safetensors file of a family that is kept in
split files, or files are chosen (so a user can see and clear them). What the line under it says is
:func:`guitrainer.core.checks.inputs.split_install_problems`, the same check the start runs; it reads the files'
safetensors headers only, so it runs on the GUI thread.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QStyle, QVBoxLayout, QWidget

from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.config import field_info
from guitrainer.core.checks.inputs import split_install_problems
from guitrainer.core.families.registry import facts
from guitrainer.core.memory.specs import config_family
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding

PATH = "model.text_encoders"
FILE_FILTER = "Text encoders (*.safetensors);;All files (*)"
#: settings whose change can change what the row says or whether it shows
WATCHED = (PATH, "model.base", "model.family", "model.vae")


def split_family_file(binding: ConfigBinding) -> bool:
    """The base model is one .safetensors file of a family kept in split files (its text encoders apart)."""
    base = str(binding.get("model.base") or "").strip()
    if not base.lower().endswith(".safetensors"):
        return False
    return facts(config_family(binding.config)).check_parts is not None


class TextEncoderRow(QWidget):
    """The chosen text-encoder files' names, Files… / Clear buttons, and a line saying what the set lacks.

    Signals:
        problem_changed(bool): the split install's blocking problem came, went or changed its message.
    """

    problem_changed = Signal(bool)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(parent)
        self.binding = binding
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.files_label = QLabel(self)
        self.files_label.setObjectName("text_encoder_files")
        self.files_label.setWordWrap(True)
        self.files_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._help = field_info(PATH).metadata.get("help", "")
        row.addWidget(self.files_label, 1)
        self.files_button = QPushButton("Files…", self)
        self.files_button.setObjectName("text_encoder_browse")
        self.files_button.setToolTip("Choose the text encoders' .safetensors files (several at once)")
        self.files_button.clicked.connect(self.browse)
        self.clear_button = QPushButton("Clear", self)
        self.clear_button.setObjectName("text_encoder_clear")
        self.clear_button.setToolTip("No text encoder files (the base model holds its own)")
        self.clear_button.clicked.connect(lambda: self.binding.set(PATH, []))
        style = self.style()
        for b, icon in ((self.files_button, QStyle.StandardPixmap.SP_FileIcon),
                        (self.clear_button, QStyle.StandardPixmap.SP_DialogResetButton)):
            b.setIcon(style.standardIcon(icon))
            b.setAccessibleName(b.text())
            b.setText("")  # icons only, as the VAE row: the names get the room
            row.addWidget(b)
        outer.addLayout(row)
        self.status = QLabel(self)
        self.status.setObjectName("text_encoder_status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.status)
        self._problem_text = ""
        binding.changed.connect(lambda p: self.refresh() if p in WATCHED else None)
        binding.replaced.connect(self.refresh)
        self.refresh()

    def files(self) -> list[str]:
        return [str(t) for t in (self.binding.get(PATH) or []) if str(t).strip()]

    def wanted(self) -> bool:
        """Whether the row means something now (the page shows it only then)."""
        return split_family_file(self.binding) or bool(self.files())

    def browse(self) -> None:
        """Ask for the text encoders' files and set them."""
        chosen, _filter = QFileDialog.getOpenFileNames(self, "Choose the text encoders' files", self._start_dir(),
                                                       FILE_FILTER)
        if chosen:
            self.binding.set(PATH, list(chosen))

    def has_problem(self) -> bool:
        return bool(self._problem_text)

    def problem_text(self) -> str:
        return self._problem_text

    def refresh(self) -> None:
        """Say which files are chosen and what the set lacks (reads safetensors headers only: quick)."""
        chosen = self.files()
        if chosen:
            self.files_label.setText(", ".join(printable(Path(t).name) for t in chosen))
            self.files_label.setToolTip("<br>".join(html.escape(t) for t in chosen) + f"<br><br>{html.escape(self._help)}")
        else:
            self.files_label.setText("none chosen")
            self.files_label.setToolTip(self._help)
        self.clear_button.setEnabled(bool(chosen))
        problems = split_install_problems(self.binding.config) if self.wanted() else []
        errors = [p.message for p in problems if p.level == "error"]
        notes = [p.message for p in problems if p.level != "error"]
        self.status.setText(" ".join(errors or notes))
        self.status.setStyleSheet("color: #c0392b;" if errors else "")
        self.status.setVisible(bool(errors or notes))
        text = " ".join(errors)
        if text != self._problem_text:
            self._problem_text = text
            self.problem_changed.emit(bool(text))  # also when the message changes: the Training page shows it

    def _start_dir(self) -> str:
        for value in (*self.files(), self.binding.get("model.base")):
            p = expand(str(value)) if str(value).strip() and value != "demo" else None
            if p is not None and p.exists():
                return str(p if p.is_dir() else p.parent)
        return start_dirs.start_dir("models")
