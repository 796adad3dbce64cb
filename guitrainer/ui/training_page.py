"""Training page: the LoRA network, optimizer, schedule and samples; start and watch training."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.pages import Page


class TrainingPage(Page):
    title = "Training"
    subtitle = "How the LoRA is trained. Press Train to start; loss, learning rate and loss scale appear live."

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(binding, parent)
        self.body.addWidget(build_form(binding, "network", title="LoRA network"))
        self.body.addWidget(build_form(binding, "optimizer", title="Optimizer"))
        self.body.addWidget(build_form(binding, "schedule", title="Schedule"))
        self.body.addWidget(build_form(binding, "sampling", title="Samples"))
        self.finish()
