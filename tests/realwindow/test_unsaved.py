"""Unsaved work is never thrown away without asking (issue 15 #3): changing the preset and quitting.

A person edits a setting with the keyboard, then picks another preset in the tool bar (or presses
Ctrl+Q). The app must ask; the test answers the question with a real key press or click, first
"cancel" (everything stays as it was), then the discard button (the change happens).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from PIL import Image
from PySide6.QtWidgets import QComboBox, QSpinBox
from xinput import ModalAnswerer, choose_in_combo, click_discard, open_page, pump, wait_for

from guitrainer.base import paths

OTHER_PRESET_FILE = "20_sd15_style.toml"


def other_preset() -> tuple[str, int]:
    """Name and LoRA rank of a shipped preset other than the Demo, read from its file."""
    data = tomllib.loads((paths.shipped_presets_dir() / OTHER_PRESET_FILE).read_text(encoding="utf-8"))
    return data["preset"]["name"], data["network"]["rank"]


def edit_rank(window, xin, value: int) -> QSpinBox:  # noqa: ANN001
    """Type a new LoRA rank on the Training page, as a person would."""
    open_page(window, xin, "Training")
    spin = window.findChild(QSpinBox, "edit_network_rank")
    xin.click(spin.lineEdit())
    xin.key("ctrl+a")
    xin.type(str(value))
    xin.key("Tab")
    wait_for(lambda: spin.value() == value, 10, "the typed rank")
    assert "•" in window.windowTitle()  # the window says it has unsaved changes
    return spin


def add_a_folder(window, tmp_path: Path) -> None:  # noqa: ANN001
    folder = tmp_path / "3_things"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (96, 96), (60 * i, 90, 200)).save(folder / f"t{i}.png")
    window.add_paths([str(folder)])
    wait_for(lambda: len(window.dataset_page.items) == 3, 15, "the dropped folder's images")


def test_changing_the_preset_with_unsaved_edits_asks_first(main_window, xin):
    name, rank = other_preset()
    assert rank != 12
    combo = main_window.findChild(QComboBox, "preset_combo")
    demo = combo.currentText()
    spin = edit_rank(main_window, xin, 12)

    answerer = ModalAnswerer(xin, lambda _box: ["key", "Escape"])
    try:
        choose_in_combo(xin, combo, name)
        wait_for(lambda: answerer.seen, 4, "a question before the preset replaces the edited settings")
        pump(300)
    finally:
        answerer.stop()
    assert combo.currentText() == demo and spin.value() == 12  # cancelled: nothing changed

    answerer = ModalAnswerer(xin, click_discard)
    try:
        choose_in_combo(xin, combo, name)
        wait_for(lambda: answerer.seen, 4, "the question again")
        wait_for(lambda: combo.currentText() == name, 10, "the other preset")
    finally:
        answerer.stop()
    assert spin.value() == rank


def test_choosing_the_current_preset_again_keeps_the_dataset_unless_told(main_window, xin, tmp_path):
    """Dropped images stay when the preset already loaded is picked again (if the app asks: Escape)."""
    add_a_folder(main_window, tmp_path)
    combo = main_window.findChild(QComboBox, "preset_combo")
    answerer = ModalAnswerer(xin, lambda _box: ["key", "Escape"])
    try:
        choose_in_combo(xin, combo, combo.currentText())
        pump(500)
    finally:
        answerer.stop()
    assert len(main_window.dataset_page.items) == 3
    assert len(main_window.binding.config.dataset.folders) == 1


def test_quitting_with_unsaved_edits_asks_first(main_window, xin, tmp_path):
    add_a_folder(main_window, tmp_path)
    edit_rank(main_window, xin, 12)

    answerer = ModalAnswerer(xin, lambda _box: ["key", "Escape"])
    try:
        xin.key("ctrl+q")
        wait_for(lambda: answerer.seen, 4, "a question before quitting with unsaved changes")
        # the Escape goes out in its own xdotool process: wait until the app has had it
        wait_for(lambda: main_window.quit_box is None, 10, "the question to be cancelled")
        pump(300)
    finally:
        answerer.stop()
    assert main_window.isVisible() and len(main_window.dataset_page.items) == 3  # cancelled: still open

    answerer = ModalAnswerer(xin, click_discard)
    try:
        xin.key("ctrl+q")
        wait_for(lambda: not main_window.isVisible(), 10, "the window to close after Discard")
    finally:
        answerer.stop()
    # one question came, and Discard closed the window
    assert [d.title for d in answerer.seen] == ["Quit guitrainer?"]
