"""Dataset page: image folders, captions and how the images are fed to training."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.pages import Page


class DatasetPage(Page):
    title = "Dataset"
    subtitle = "Your images and their captions. Drop folders anywhere on the window to add them."

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(binding, parent)
        self.body.addWidget(build_form(binding, "dataset", title="Images and captions"))
        self.finish()
