"""InitLoraRow: Continue from LoRA (``model.init_lora``) on the Model page: the path, a File… button, and what is
wrong with the file for this run's Network type, said before Train (:func:`guitrainer.core.model.init_lora.init_lora_problem`
reads the file's header only, so it runs on the GUI thread)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from guitrainer.core.model.init_lora import init_lora_problem
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding, make_editor

PATH = "model.init_lora"
#: settings whose change can change the verdict
WATCHED = (PATH, "network.type", "network.dora_layout", "schedule.resume_from")


class InitLoraRow(QWidget):
    """The ``model.init_lora`` editor with a File… button and a red line naming any problem.

    Signals:
        problem_changed(): the problem came, went or changed its words.
    """

    problem_changed = Signal()

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(parent)
        self.binding = binding
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.edit = make_editor(binding, PATH, self)
        self.edit.setPlaceholderText("none: a new LoRA")  # type: ignore[attr-defined]
        row.addWidget(self.edit, 1)
        self.file_button = QPushButton("File…", self)
        self.file_button.setObjectName("init_lora_file")
        self.file_button.setToolTip("Choose a LoRA file (.safetensors) to continue training from")
        self.file_button.clicked.connect(self.browse)
        row.addWidget(self.file_button)
        outer.addLayout(row)
        self.status = QLabel(self)
        self.status.setObjectName("init_lora_status")
        self.status.setWordWrap(True)
        self.status.setStyleSheet("color: #c0392b;")
        self.status.setVisible(False)
        outer.addWidget(self.status)
        self.problem = ""
        binding.changed.connect(lambda p: self.refresh() if p in WATCHED else None)
        binding.replaced.connect(self.refresh)
        self.refresh()

    def browse(self) -> None:
        # the folder last chosen from, else (the first time) where this app writes its LoRAs
        start = start_dirs.remembered("lora_files") or start_dirs.start_near(str(self.binding.get("output.folder")), "")
        path, _ = QFileDialog.getOpenFileName(self, "LoRA to continue from", start, "LoRA (*.safetensors)")
        start_dirs.remember("lora_files", path)
        if path:
            self.binding.set(PATH, path)

    def refresh(self) -> None:
        cfg = self.binding.config
        problem = "" if cfg.schedule.resume_from else init_lora_problem(cfg.model.init_lora, cfg.network.type, cfg.network.dora_layout)
        problem = problem + "." if problem else ""
        self.status.setText(problem)
        self.status.setVisible(bool(problem))
        if problem != self.problem:
            self.problem = problem
            self.problem_changed.emit()
