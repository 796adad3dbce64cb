"""The mouse wheel scrolls pages; it changes a combo box, spin box or slider only once that has focus.

Qt gives every combo and spin box the wheel as soon as the pointer passes over it, so scrolling a page of
settings changed whichever setting slid under the pointer (a tester's Save precision went fp16 -> bf16, "Save
every" never -> 1 epoch, without a click). The guard, an event filter on each such widget, hands such a wheel to the
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
    """Event filter on each guarded widget: an unfocused one's wheel event scrolls its page instead.

    Installed per widget, not on the application: an application-wide Python filter would run (and take the
    GIL) for every event of the GUI thread, slowing it while a training or caption thread runs (a 600-caption
    edit's longest GUI pause grew from under 0.25 s to 0.39 s).
    """

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Wheel and isinstance(obj, QWidget) and not obj.hasFocus():
            _scroll_around(obj, event)  # type: ignore[arg-type]
            return True
        return False


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


def guard(root: QWidget) -> int:
    """Guard every combo box, spin box and slider (not scroll bars) under ``root``; returns how many.

    Call it once the widgets are built; they take focus by click or Tab only, not by the wheel.
    """
    app = QApplication.instance()
    keeper = app.findChild(WheelGuard, "wheel_guard") if app is not None else None
    if keeper is None:
        keeper = WheelGuard(app)
        keeper.setObjectName("wheel_guard")
    count = 0
    for widget in root.findChildren(QWidget):
        if isinstance(widget, GUARDED) and not isinstance(widget, QScrollBar):
            widget.installEventFilter(keeper)  # installing twice is harmless: Qt keeps one
            if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            count += 1
    return count
