"""The mouse wheel scrolls pages; it changes a combo box, spin box or slider only once that has focus.

Qt gives every combo and spin box the wheel as soon as the pointer passes over it, so scrolling a page of
settings changed whichever setting slid under the pointer (a tester's Save precision went fp16 -> bf16, "Save
every" never -> 1 epoch, without a click). The guard, an event filter on each such widget, hands such a wheel to the
scroll area around the widget instead, and keeps wheel focus off those widgets (a click or Tab gives focus).

Each widget is guarded as it is made, wherever that is: the application's style is a :class:`GuardingStyle`,
and Qt polishes every widget with the application's style before the widget is first shown (and again when its
style sheet changes). A sweep of the window when it was built missed every widget made later: the Repeats box
of a folder added to the Dataset page, the class-images table's, a generated editor added afterwards.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QPalette, QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QProxyStyle,
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
    """Send the wheel to the scroll areas holding ``widget``, innermost first, until one of them scrolls.

    A folder table that cannot scroll further hands the wheel on to its page, as Qt hands on a wheel that
    nobody takes (Qt does not do so for a sent event, so this does it).
    """
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            viewport = parent.viewport()
            local = viewport.mapFromGlobal(event.globalPosition().toPoint())
            forwarded = QWheelEvent(
                local.toPointF(), event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                event.modifiers(), event.phase(), event.inverted(),
            )  # fmt: skip
            forwarded.ignore()  # a scroll bar accepts it only when it moved
            QApplication.sendEvent(viewport, forwarded)
            if forwarded.isAccepted():
                return
        parent = parent.parentWidget()


def guard_widget(widget: QWidget, keeper: WheelGuard) -> bool:
    """Guard ``widget`` if it is a combo box, spin box or slider (not a scroll bar); True when it is one.

    It takes focus by click or Tab only, not by the wheel. Guarding twice is harmless: Qt keeps one filter.
    """
    if not isinstance(widget, GUARDED) or isinstance(widget, QScrollBar):
        return False
    widget.installEventFilter(keeper)
    if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    return True


class GuardingStyle(QProxyStyle):
    """The application's style as it was (``base``: its name), and each widget it polishes is guarded.

    Only ``polish`` is written in Python: Qt calls it once per widget (and on a style-sheet change), never
    per event or per paint. The style's other methods stay in C++ and take no GIL, so painting goes on
    while a worker thread holds the GIL.
    """

    def __init__(self, base: str) -> None:
        super().__init__(base)
        self.keeper = WheelGuard(self)
        self.keeper.setObjectName("wheel_guard")

    def polish(self, target: QWidget | QApplication | QPalette) -> None:  # type: ignore[override]  # all 3 overloads
        super().polish(target)
        if isinstance(target, QWidget):
            guard_widget(target, self.keeper)


def install(app: QApplication | None = None) -> GuardingStyle | None:
    """Make the application's style a :class:`GuardingStyle` of the style it has; the same one on later calls.

    Widgets already shown are polished again, so guarded too. Call it before the widgets are made (the main
    window does, first thing); a style set on the application later replaces the guard.
    """
    app = app or QApplication.instance()  # type: ignore[assignment]
    if not isinstance(app, QApplication):
        return None
    style = app.style()
    if isinstance(style, GuardingStyle):
        return style
    guarding = GuardingStyle(style.name())
    app.setStyle(guarding)
    return guarding
