"""Model & Precision page: the base model, training and save precision."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.pages import Page


class ModelPage(Page):
    title = "Model & Precision"
    subtitle = "The model your LoRA is trained on, and the number formats used while training and saving."

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(binding, parent)
        self.body.addWidget(build_form(binding, "model", title="Base model"))
        self.body.addWidget(build_form(binding, "precision", title="Precision"))
        self.finish()
