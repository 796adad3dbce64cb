"""Shared page scaffolding: a scrollable page with a title and a short explanation."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from guitrainer.ui.binding import ConfigBinding


class Page(QScrollArea):
    """A page of the main window. Subclasses add their content to ``self.body``."""

    title = "Page"
    subtitle = ""

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(parent)
        self.binding = binding
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        inner = QWidget(self)
        self.body = QVBoxLayout(inner)
        self.body.setContentsMargins(18, 10, 18, 10)
        self.body.setSpacing(10)
        heading = QLabel(f"<h2 style='margin:0'>{self.title}</h2>")
        self.body.addWidget(heading)
        if self.subtitle:
            sub = QLabel(self.subtitle)
            sub.setWordWrap(True)
            sub.setStyleSheet("color: palette(placeholder-text);")
            self.body.addWidget(sub)
        self.setWidget(inner)

    def finish(self) -> None:
        self.body.addStretch(1)


def two_columns(left: list[QWidget], right: list[QWidget], grow: QWidget | None = None) -> QHBoxLayout:
    """Group boxes side by side (a wide window uses its width instead of scrolling), each column top-aligned;
    ``grow`` (one of them) takes the height its column has left instead of an empty stretch."""
    row = QHBoxLayout()
    row.setSpacing(14)
    for widgets in (left, right):
        col = QVBoxLayout()
        col.setSpacing(10)
        for w in widgets:
            col.addWidget(w, 1 if w is grow else 0)
        if grow not in widgets:
            col.addStretch(1)
        row.addLayout(col, 1)
    return row
