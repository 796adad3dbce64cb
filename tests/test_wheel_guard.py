"""The mouse wheel over a setting scrolls the page unless that setting has focus (a tester's Save precision
changed from fp16 to bf16 while they scrolled the Output page)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QComboBox, QScrollArea, QSpinBox, QVBoxLayout, QWidget

from guitrainer.ui.widgets import wheel_guard


def wheel(widget: QWidget, clicks: int = -1) -> None:
    """A wheel turn over the middle of ``widget`` (one click = 120; negative = towards the user)."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, 120 * clicks),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_an_unfocused_setting_passes_the_wheel_to_its_page_a_focused_one_takes_it(qtbot):
    area = QScrollArea()
    qtbot.addWidget(area)
    inner = QWidget()
    lay = QVBoxLayout(inner)
    combo, spin = QComboBox(), QSpinBox()
    combo.addItems(["fp16", "bf16", "fp32"])
    lay.addWidget(combo)
    lay.addWidget(spin)
    lay.addSpacing(3000)  # a page taller than its window
    area.setWidget(inner)
    assert wheel_guard.guard(area) == 2  # the combo and the spin box; not the area's scroll bars
    area.resize(300, 200)
    area.show()
    qtbot.waitExposed(area)
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0
    wheel(combo)
    wheel(spin)
    assert combo.currentText() == "fp16" and spin.value() == 0  # unchanged...
    assert bar.value() > 0  # ...and the page scrolled instead
    bar.setValue(0)
    combo.setFocus()
    qtbot.waitUntil(combo.hasFocus)
    wheel(combo)
    assert combo.currentText() == "bf16"  # focused (clicked or tabbed to): the wheel is the user's to use


def test_the_main_windows_settings_are_guarded(qtbot, window):
    """The Output page's Save precision (what the tester's wheel changed) keeps its value under the wheel."""
    from guitrainer.ui.binding import bound_editors

    combo = bound_editors(window.output_page)["precision.save"]
    window.nav.setCurrentRow(window.pages.index(window.output_page))
    qtbot.wait(20)
    before = combo.currentText()
    wheel(combo)
    wheel(combo, clicks=1)
    assert combo.currentText() == before and not combo.hasFocus()
    assert combo.focusPolicy() == Qt.FocusPolicy.StrongFocus
