"""The mouse wheel over a setting scrolls the page unless that setting has focus (a tester's Save precision
changed from fp16 to bf16 while they scrolled the Output page) — also over the settings made after the window
was built: a folder's Repeats box (it went from 1 to 2, and the config with it), a class folder's, a dialog's,
a generated editor added later."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QLineEdit,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from guitrainer.ui.widgets import wheel_guard


def wheel(widget: QWidget, clicks: int = -1) -> None:
    """A wheel turn over the middle of ``widget`` (one click = 120; negative = towards the user)."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, 120 * clicks),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def tall_area(qtbot) -> tuple[QScrollArea, QVBoxLayout]:  # noqa: ANN001
    """A shown scroll area whose page is taller than its window, a text box in it focused; widgets go into
    the returned layout (at index 1 and on: below the text box)."""
    wheel_guard.install()
    area = QScrollArea()
    qtbot.addWidget(area)
    inner = QWidget()
    lay = QVBoxLayout(inner)
    typing = QLineEdit()  # has the focus, as some widget of a window in use has (else the first one shown takes it)
    lay.addWidget(typing)
    lay.addSpacing(3000)
    area.setWidget(inner)
    area.setWidgetResizable(True)
    area.resize(300, 200)
    area.show()
    qtbot.waitExposed(area)
    typing.setFocus()
    qtbot.waitUntil(typing.hasFocus)
    assert area.verticalScrollBar().maximum() > 0 and area.verticalScrollBar().value() == 0
    return area, lay


def test_an_unfocused_setting_passes_the_wheel_to_its_page_a_focused_one_takes_it(qtbot):
    area, lay = tall_area(qtbot)
    combo, spin = QComboBox(), QSpinBox()
    combo.addItems(["fp16", "bf16", "fp32"])
    lay.insertWidget(1, combo)  # made after the area was shown: guarded when Qt shows them
    lay.insertWidget(2, spin)
    qtbot.waitUntil(lambda: combo.isVisible() and spin.isVisible())
    bar = area.verticalScrollBar()
    wheel(combo)
    wheel(spin)
    assert combo.currentText() == "fp16" and spin.value() == 0  # unchanged...
    assert bar.value() > 0  # ...and the page scrolled instead
    assert spin.focusPolicy() == Qt.FocusPolicy.StrongFocus  # no focus by wheel
    assert not wheel_guard.guard_widget(area.verticalScrollBar(), wheel_guard.install().keeper)  # a slider, not guarded
    bar.setValue(0)
    combo.setFocus()
    qtbot.waitUntil(combo.hasFocus)
    wheel(combo)
    assert combo.currentText() == "bf16"  # focused (clicked or tabbed to): the wheel is the user's to use


def test_a_table_that_cannot_scroll_hands_the_wheel_on_to_its_page(qtbot):
    """A spin box in a table's cell (the folder tables' Repeats): the table has nothing to scroll, the page does."""
    area, lay = tall_area(qtbot)
    table = QTableWidget(1, 1)
    table.setFixedHeight(80)
    spin = QSpinBox()
    spin.setValue(1)
    table.setCellWidget(0, 0, spin)
    lay.insertWidget(1, table)
    qtbot.waitUntil(spin.isVisible)
    wheel(spin)
    assert spin.value() == 1 and area.verticalScrollBar().value() > 0


def test_install_keeps_one_style(qtbot):
    style = wheel_guard.install()
    assert isinstance(style, wheel_guard.GuardingStyle) and wheel_guard.install() is style
    assert QApplication.style() is style


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


def image_folder(folder: Path, n: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64, 64), (40 * i, 120, 200)).save(folder / f"{i}.png")
    return folder


def scrollable(window, qtbot) -> None:  # noqa: ANN001
    """The window small enough that the Dataset page scrolls (the page is at its top)."""
    window.resize(1000, 430)
    page = window.dataset_page
    qtbot.waitUntil(lambda: page.verticalScrollBar().maximum() > 0)
    page.verticalScrollBar().setValue(0)


def test_a_folder_added_after_start_keeps_its_repeats_under_the_wheel(qtbot, window, tmp_path):
    page = window.dataset_page
    scrollable(window, qtbot)
    with qtbot.waitSignal(page.import_finished, timeout=10000):
        page.add_paths([str(image_folder(tmp_path / "set"))])
    spin = page.folders_table.cellWidget(0, 2)
    assert isinstance(spin, QSpinBox)
    qtbot.waitUntil(spin.isVisible)
    assert spin.value() == 1 and not spin.hasFocus()
    wheel(spin, clicks=1)  # up: unguarded, Repeats went 1 -> 2 (the page is at its top: nothing to scroll)
    assert spin.value() == 1 and [f.repeats for f in window.binding.get("dataset.folders")] == [1]
    wheel(spin)
    wheel(spin)
    assert spin.value() == 1 and [f.repeats for f in window.binding.get("dataset.folders")] == [1]
    assert page.verticalScrollBar().value() > 0  # down: the page scrolled instead


def test_a_class_folder_added_after_start_keeps_its_repeats_under_the_wheel(qtbot, window, tmp_path):
    page = window.dataset_page
    panel = page.regularization
    page.tabs.setCurrentWidget(panel)
    scrollable(window, qtbot)
    assert panel.add_folders([str(image_folder(tmp_path / "dogs"))])
    spin = panel.table.cellWidget(0, 2)
    assert isinstance(spin, QSpinBox)
    qtbot.waitUntil(spin.isVisible)
    assert not spin.hasFocus()
    wheel(spin, clicks=1)
    assert spin.value() == 1 and [f.repeats for f in window.binding.get("dataset.regularization_folders")] == [1]
    wheel(spin)
    wheel(spin)
    assert spin.value() == 1 and [f.repeats for f in window.binding.get("dataset.regularization_folders")] == [1]
    assert page.verticalScrollBar().value() > 0  # the page scrolled instead


def test_settings_made_later_elsewhere_are_guarded_too(qtbot, window):
    """A generated editor added to a page after start, and the "Generate class images" dialog's boxes."""
    from guitrainer.ui.binding import make_editor

    page = window.training_page
    window.nav.setCurrentRow(window.pages.index(page))
    window.resize(1000, 430)
    editor = make_editor(window.binding, "schedule.epochs")
    page.body.insertWidget(1, editor)
    qtbot.waitUntil(lambda: editor.isVisible() and page.verticalScrollBar().maximum() > 0)
    page.verticalScrollBar().setValue(0)
    before = window.binding.get("schedule.epochs")
    wheel(editor)
    assert window.binding.get("schedule.epochs") == before and page.verticalScrollBar().value() > 0

    dialog = window.dataset_page.regularization.open_generate_dialog()
    qtbot.waitExposed(dialog)
    counts = [dialog.count.value(), dialog.steps.value()]
    wheel(dialog.count)
    wheel(dialog.steps, clicks=1)
    assert [dialog.count.value(), dialog.steps.value()] == counts
    dialog.close()
