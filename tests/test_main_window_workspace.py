"""Issue 15 #3: a preset change with unsaved edits asks; quitting with unsaved edits asks; the last
workspace (settings, dataset folders) comes back on the next start. Driven by key events and clicks."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QSettings, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox

from guitrainer.config import DatasetFolder
from guitrainer.config.presets import PresetStore
from guitrainer.ui.binding import bound_editors
from guitrainer.ui.window.main_window import MainWindow


def make_window(qtbot, tmp_path: Path) -> MainWindow:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w


def images(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i in range(2):
        Image.new("RGB", (512, 512), (60 * i, 90, 160)).save(folder / f"{i}.png")
    return folder


def type_rank(window: MainWindow, value: int) -> None:
    spin = bound_editors(window)["network.rank"]
    spin.setFocus()
    QTest.keyClick(spin, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClicks(spin, str(value))
    QTest.keyClick(spin, Qt.Key.Key_Return)
    assert window.binding.get("network.rank") == value


def button(box: QMessageBox, text: str):
    return next(b for b in box.buttons() if b.text().replace("&", "") == text)


def pick_next_preset(window: MainWindow) -> str:
    """Down arrow on the preset box: what a user does to pick the next preset from the keyboard."""
    combo = window.preset_combo
    wanted = combo.itemData(combo.currentIndex() + 1)
    combo.setFocus()
    QTest.keyClick(combo, Qt.Key.Key_Down)
    return wanted


@pytest.fixture
def dataset(tmp_path):
    return images(tmp_path / "10_cats")


def test_changing_preset_with_unsaved_edits_asks(qtbot, tmp_path, dataset):
    w = make_window(qtbot, tmp_path)
    start = w.current_preset
    w.binding.set("dataset.folders", [DatasetFolder(path=str(dataset), repeats=10)])
    assert "•" not in w.windowTitle()  # a dataset is not a preset edit
    type_rank(w, 77)
    wanted = pick_next_preset(w)
    box = w.preset_box
    assert box is not None and box.isVisible() and wanted in box.informativeText()
    assert w.current_preset == start and w.preset_combo.currentData() == start  # nothing changed yet
    button(box, "Cancel").click()
    assert w.current_preset == start and w.binding.get("network.rank") == 77

    pick_next_preset(w)
    button(w.preset_box, "Discard changes").click()
    assert w.current_preset == wanted and w.binding.get("network.rank") != 77
    assert [f.path for f in w.binding.get("dataset.folders")] == [str(dataset)]  # the images stay
    assert "•" not in w.windowTitle()

    # no edits: the next preset loads at once, without a question
    after = pick_next_preset(w)
    assert w.preset_box is None and w.current_preset == after


def test_save_as_preset_from_the_question(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path)
    type_rank(w, 55)
    monkeypatch.setattr("guitrainer.ui.window.preset_files.QInputDialog.getText", lambda *a, **k: ("My rank 55", True))
    wanted = pick_next_preset(w)
    button(w.preset_box, "Save as preset…").click()
    assert "My rank 55" in w.store.presets and w.store.get("My rank 55").config().network.rank == 55
    assert w.current_preset == wanted


def test_quit_with_unsaved_edits_asks_and_the_workspace_comes_back(qtbot, tmp_path, dataset):
    w = make_window(qtbot, tmp_path)
    w.dataset_page.add_paths([dataset])
    qtbot.waitUntil(lambda: len(w.dataset_page.items) == 2 and not w.dataset_page.is_loading(), timeout=10000)
    type_rank(w, 33)
    preset = w.current_preset
    w.close()
    assert w.isVisible() and w.quit_box is not None and w.quit_box.isVisible()
    button(w.quit_box, "Cancel").click()
    assert w.isVisible()
    w.close()
    button(w.quit_box, "Quit without saving").click()
    assert not w.isVisible()
    w.dataset_page.shutdown()

    again = make_window(qtbot, tmp_path)
    assert again.binding.get("network.rank") == 33 and again.current_preset == preset
    assert [Path(f.path) for f in again.binding.get("dataset.folders")] == [dataset]
    qtbot.waitUntil(lambda: len(again.dataset_page.items) == 2, timeout=10000)
    assert "•" in again.windowTitle()  # still not saved in a preset
    again.dataset_page.shutdown()


def test_question_boxes_are_as_wide_as_their_titles(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    type_rank(w, 21)
    w.close()
    box = w.quit_box
    assert box is not None and box.isVisible()
    assert box.width() >= box.fontMetrics().horizontalAdvance(box.windowTitle()) + 60  # the title is not cut off
    button(box, "Cancel").click()


def test_a_setting_typed_just_before_ctrl_q_is_kept_and_asked_about(qtbot, tmp_path):
    """Issue 27 #1, the same class for settings: a rank typed into its field and not yet left (no Enter, no Tab)
    was dropped by Ctrl+Q without a question; the field is now left first."""
    w = make_window(qtbot, tmp_path)
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=3000)
    spin = bound_editors(w)["network.rank"]
    w.nav.setCurrentRow(w.pages.index(w.training_page))
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=3000)
    QTest.keyClick(spin, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClicks(spin, "44")
    assert w.binding.get("network.rank") != 44  # typed, not committed yet
    QTest.keyClick(spin, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    assert w.binding.get("network.rank") == 44
    assert w.isVisible() and w.quit_box is not None and w.quit_box.isVisible()  # unsaved settings: asked
    button(w.quit_box, "Quit without saving").click()
    assert not w.isVisible()
    w.dataset_page.shutdown()
    again = make_window(qtbot, tmp_path)
    assert again.binding.get("network.rank") == 44  # and kept in the workspace
    again.dataset_page.shutdown()
