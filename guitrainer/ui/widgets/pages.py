"""Shared page scaffolding: a scrollable page with a title and a short explanation."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

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
        # Never sideways: the body is as wide as the view, also when a vertical scroll bar takes a few pixels (a
        # body 3 px wider than the view gave every page that scrolled a horizontal bar as well)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget(self)
        inner.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
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


def two_columns(
    left: list[QWidget], right: list[QWidget], grow: QWidget | None = None, *, equal: bool = False
) -> QHBoxLayout:
    """Group boxes side by side (a wide window uses its width instead of scrolling), each column top-aligned;
    ``grow`` (one of them) takes the height its column has left instead of an empty stretch.

    ``equal``: the columns split the width in half whatever their contents would like (a longer text must not
    move the split).
    """
    row = QHBoxLayout()
    row.setSpacing(14)
    for widgets in (left, right):
        holder = QWidget()
        if equal:
            holder.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        col = QVBoxLayout(holder)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(10)
        for w in widgets:
            col.addWidget(w, 1 if w is grow else 0)
        if grow not in widgets:
            col.addStretch(1)
        row.addWidget(holder, 1)
    return row


def scrolled(label: QLabel, lines: int) -> QScrollArea:
    """``label`` (wrapped) in a frameless area ``lines`` lines high that scrolls by itself when the text is longer:
    a long message never changes the page's height."""
    label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
    area = QScrollArea()
    area.setObjectName(f"{label.objectName()}_area")
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    area.setWidget(label)
    area.setFixedHeight(label.fontMetrics().lineSpacing() * lines + 4)
    area.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
    return area
