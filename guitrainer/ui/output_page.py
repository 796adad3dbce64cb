"""Output page: where the LoRA goes, its format, save precision and metadata."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.pages import Page


class OutputPage(Page):
    title = "Output"
    subtitle = "Where the trained LoRA is written, in which format and precision, and what it says about itself."

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(binding, parent)
        self.body.addWidget(build_form(binding, "output", title="Output"))
        self.finish()
