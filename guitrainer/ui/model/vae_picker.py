"""VaePicker: choose ``model.vae`` (a VAE folder, a .safetensors file, a hub id, or empty for the base's own)
and see what it is.

What the line under it says is decided by :func:`guitrainer.core.model.vae_choice.vae_summary`, which reads a
config.json or a .safetensors header only, so it runs on the GUI thread; the weights load when training starts.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QStyle, QVBoxLayout, QWidget

from guitrainer.base.paths import expand
from guitrainer.core.model.vae_choice import vae_summary
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding, make_editor

PATH = "model.vae"
#: the line edit's least width: a path's last two or three folders at 1366 px (it was 70 px: "apshots/abc")
EDIT_MIN_WIDTH = 220
FILE_FILTER = "VAE (*.safetensors);;All files (*)"
#: settings whose change can change what the summary says
WATCHED = (PATH, "model.base", "model.family", "precision.training")


class VaePicker(QWidget):
    """``model.vae``: its line edit, Folder… / File… / Clear buttons, and a line saying what the VAE is.

    Signals:
        problem_changed(bool): the chosen VAE's blocking problem came, went or changed its message.
    """

    problem_changed = Signal(bool)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(parent)
        self.binding = binding
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.edit = make_editor(binding, PATH, self)
        self.edit.setPlaceholderText("the base model's own")  # type: ignore[attr-defined]
        # wide enough for a path's last folders (the buttons are icons); the whole path is in the tooltip
        self.edit.setMinimumWidth(EDIT_MIN_WIDTH)
        self._edit_tip = self.edit.toolTip()
        row.addWidget(self.edit, 1)
        self.folder_button = QPushButton("Folder…", self)
        self.folder_button.setObjectName("vae_folder")
        self.folder_button.setToolTip("Choose a diffusers VAE folder (config.json + diffusion_pytorch_model.safetensors)")
        self.folder_button.clicked.connect(self.browse_folder)
        self.file_button = QPushButton("File…", self)
        self.file_button.setObjectName("vae_file")
        self.file_button.setToolTip("Choose one .safetensors VAE file")
        self.file_button.clicked.connect(self.browse_file)
        self.clear_button = QPushButton("Clear", self)
        self.clear_button.setObjectName("vae_clear")
        self.clear_button.setToolTip("Use the base model's own VAE")
        self.clear_button.clicked.connect(lambda: self.binding.set(PATH, ""))
        style = self.style()
        for b, icon in (
            (self.folder_button, QStyle.StandardPixmap.SP_DirOpenIcon),
            (self.file_button, QStyle.StandardPixmap.SP_FileIcon),
            (self.clear_button, QStyle.StandardPixmap.SP_DialogResetButton),
        ):
            b.setIcon(style.standardIcon(icon))
            b.setAccessibleName(b.text())
            b.setText("")  # icons only, their words in the tooltip: the path gets the room
            row.addWidget(b)
        outer.addLayout(row)
        self.status = QLabel(self)
        self.status.setObjectName("vae_status")
        self.status.setWordWrap(True)
        outer.addWidget(self.status)
        self._problem = False
        self._problem_text = ""
        binding.changed.connect(lambda p: self.refresh() if p in WATCHED else None)
        binding.replaced.connect(self.refresh)
        self.refresh()

    def _start_dir(self) -> str:
        for value in (self.binding.get(PATH), self.binding.get("model.base")):
            p = expand(str(value)) if str(value).strip() and value != "demo" else None
            if p is not None and p.exists():
                return str(p if p.is_dir() else p.parent)
        return start_dirs.start_dir("models")

    def browse_folder(self) -> None:
        """Ask for a VAE folder and set it."""
        folder = QFileDialog.getExistingDirectory(self, "Choose a VAE folder", self._start_dir())
        if folder:
            self.binding.set(PATH, folder)

    def browse_file(self) -> None:
        """Ask for a .safetensors VAE file and set it."""
        path, _filter = QFileDialog.getOpenFileName(self, "Choose a VAE file", self._start_dir(), FILE_FILTER)
        if path:
            self.binding.set(PATH, path)

    def has_problem(self) -> bool:
        """The chosen VAE cannot be used (missing, not a VAE, the wrong latent channels)."""
        return self._problem

    def problem_text(self) -> str:
        return self.status.text() if self._problem else ""

    def refresh(self) -> None:
        """Say what the chosen VAE is (reads a config.json or a .safetensors header: quick)."""
        path = str(self.binding.get(PATH) or "")
        self.edit.setToolTip(f"<b>{html.escape(path)}</b><br>{self._edit_tip}" if path else self._edit_tip)
        if not self.edit.hasFocus():
            self.edit.setCursorPosition(len(self.edit.text()))  # the end of a long path shows: the file's name
        level, text = vae_summary(self.binding.config)
        self.status.setText(wrappable(text))
        self.status.setStyleSheet("color: #c0392b;" if level == "error" else "")
        problem = level == "error"
        if problem != self._problem or (problem and text != self._problem_text):
            self._problem = problem
            self.problem_changed.emit(problem)  # also when the message changes: the Training page shows it
        self._problem_text = text if problem else ""


def wrappable(text: str) -> str:
    """``text`` with a zero-width space after each path separator, so a long path can wrap in a narrow label."""
    return text.replace("/", "/\u200b").replace("\\", "\\\u200b")

