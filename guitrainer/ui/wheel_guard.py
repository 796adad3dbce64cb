"""The mouse wheel scrolls pages; it changes a combo box, spin box or slider only once that has focus.

Qt gives every combo and spin box the wheel as soon as the pointer passes over it, so scrolling a page of
settings changed whichever setting slid under the pointer (a tester's Save precision went fp16 -> bf16, "Save
every" never -> 1 epoch, without a click). The guard, an application-wide event filter, hands such a wheel to the
scroll area around the widget instead, and keeps wheel focus off those widgets (a click or Tab gives focus).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

GUARDED = (QComboBox, QAbstractSpinBox, QAbstractSlider)


class WheelGuard(QObject):
    """Event filter: an unfocused setting's wheel event scrolls its page instead."""

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Wheel and isinstance(obj, GUARDED) and not _inside_scrollbar(obj):
            widget: QWidget = obj  # type: ignore[assignment]
            if widget.focusPolicy() & Qt.FocusPolicy.WheelFocus == Qt.FocusPolicy.WheelFocus:
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            if not widget.hasFocus():
                _scroll_around(widget, event)  # type: ignore[arg-type]
                return True
        return False


def _inside_scrollbar(obj: QObject) -> bool:
    """A scroll bar is a slider too: it keeps its wheel."""
    return isinstance(obj, QScrollBar)


def _scroll_around(widget: QWidget, event: QWheelEvent) -> None:
    """Send the wheel to the nearest scroll area holding ``widget`` (nothing when there is none)."""
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QAbstractScrollArea):
        parent = parent.parentWidget()
    if parent is None:
        return
    viewport = parent.viewport()
    local = viewport.mapFromGlobal(event.globalPosition().toPoint())
    forwarded = QWheelEvent(
        local.toPointF(), event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
        event.modifiers(), event.phase(), event.inverted(),
    )
    QApplication.sendEvent(viewport, forwarded)


def install(app: QApplication | None = None) -> WheelGuard | None:
    """Install the guard on the application once (later calls return the same guard)."""
    app = app or QApplication.instance()  # type: ignore[assignment]
    if app is None:
        return None
    guard = app.findChild(WheelGuard, "wheel_guard")
    if guard is None:
        guard = WheelGuard(app)
        guard.setObjectName("wheel_guard")
        app.installEventFilter(guard)
    return guard
