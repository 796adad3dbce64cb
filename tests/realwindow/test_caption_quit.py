"""A caption typed a moment before quitting is on disk (issue 27 #1); one changed by another program meanwhile is
asked about (#4); one that cannot be written stays in the editor across image changes (#5).

Real input on a real X server: xdotool clicks the thumbnail and the caption box, and types the caption and the
key that ends the app in one ``xdotool key`` command, 25 ms apart: Ctrl+Q, or Alt+F4 (openbox's Close, the
window manager's WM_DELETE_WINDOW, as the title bar's close button sends), 25 ms after the last character —
long before the editor's 500 ms autosave.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from conftest import ARTIFACTS
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QListView, QMessageBox, QPlainTextEdit, QTabWidget
from xinput import click_args, pump, wait_for

from guitrainer.base.fileio import WriteError
from guitrainer.ui.dataset import caption_editor

#: xdotool's key names for the characters typed here
KEYSYMS = {",": "comma", " ": "space", "-": "minus"}


def keys(text: str) -> list[str]:
    return [KEYSYMS.get(ch, ch) for ch in text]


def make_folder(root: Path) -> Path:
    folder = root / "1_quit"
    folder.mkdir(parents=True)
    for i, name in enumerate(("a.png", "b.png")):
        Image.new("RGB", (96, 96), (80 * i, 160, 90)).save(folder / name)
        (folder / name).with_suffix(".txt").write_text(f"caption {name[0]}", encoding="utf-8")
    return folder


def open_caption(window, xin, folder: Path, name: str = "a.png") -> QPlainTextEdit:  # noqa: ANN001
    """Add the folder, click the image's thumbnail and the end of its caption box, as a person does."""
    page = window.dataset_page
    window.add_paths([str(folder)])
    grid = page.findChild(QListView, "dataset_grid")
    wait_for(lambda: grid.model().rowCount() == 2 and not page.is_loading(), 15, "the folder's images in the grid")
    page.findChild(QTabWidget, "dataset_tabs").setCurrentIndex(0)  # the Caption tab
    click_thumbnail(xin, grid, name)
    box = page.findChild(QPlainTextEdit, "caption_text")
    wait_for(lambda: box.isEnabled() and box.toPlainText() == f"caption {name[0]}", 10, "the chosen caption")
    xin.click(box)
    xin.key("ctrl+End")
    return box


def click_thumbnail(xin, grid: QListView, name: str) -> None:  # noqa: ANN001
    model = grid.model()
    row = next(r for r in range(model.rowCount()) if model.index(r, 0).data(Qt.ItemDataRole.DisplayRole) == name)
    xin.click(grid.viewport(), grid.visualRect(model.index(row, 0)).center())
    page = grid.parent()
    while page is not None and not hasattr(page, "editor"):
        page = page.parent()
    wait_for(lambda: page.editor.item is not None and page.editor.item.name == name, 10, f"{name} in the editor")


def end_with(window, xin, *combo: str) -> None:  # noqa: ANN001
    """Type ", shiny" and press ``combo`` 25 ms later, in one xdotool command; wait for the window to go."""
    xin.run("key", "--delay", "25", *keys(", shiny"), *combo)
    wait_for(lambda: not window.isVisible(), 10, f"the window to close after {' '.join(combo)}")


@pytest.mark.parametrize("combo", ["ctrl+q", "alt+F4"])
def test_a_caption_typed_just_before_quitting_is_saved(main_window, xin, tmp_path, combo):
    folder = make_folder(tmp_path)
    open_caption(main_window, xin, folder)
    end_with(main_window, xin, combo)
    try:  # read before anything else runs: the page's shutdown (the app does not call it) would save too
        assert (folder / "a.txt").read_text(encoding="utf-8") == "caption a, shiny"
        assert (folder / "b.txt").read_text(encoding="utf-8") == "caption b"
    finally:
        main_window.dataset_page.shutdown()


def test_a_caption_changed_by_another_program_is_asked_about(main_window, xin, x_server, tmp_path):
    folder = make_folder(tmp_path)
    open_caption(main_window, xin, folder)
    xin.run("key", "--delay", "25", *keys(", shiny"))
    (folder / "a.txt").write_text("caption a, by another program", encoding="utf-8")  # before the autosave fires
    page = main_window.dataset_page
    wait_for(lambda: any(b.isVisible() for b in page.findChildren(QMessageBox, "caption_conflict_box")), 10,
             "the question about the outside change")
    box = next(b for b in page.findChildren(QMessageBox, "caption_conflict_box") if b.isVisible())
    pump(300)  # drawn
    x_server.screenshot(ARTIFACTS / "screenshots" / "caption_conflict.png")
    assert (folder / "a.txt").read_text(encoding="utf-8") == "caption a, by another program"  # not replaced unasked
    keep = next(b for b in box.buttons() if b.text() == "Keep mine")
    xin.run(*click_args(keep))
    wait_for(lambda: (folder / "a.txt").read_text(encoding="utf-8") == "caption a, shiny", 10, "mine written")


def test_a_caption_that_cannot_be_written_stays_across_image_changes(main_window, xin, x_server, tmp_path, monkeypatch):
    folder = make_folder(tmp_path)
    real = caption_editor.atomic_write_bytes

    def refuse(target, data):  # noqa: ANN001, ANN202 - a read-only a.txt (the tests run as root: chmod stops nobody)
        if Path(target) == folder / "a.txt":
            raise WriteError(errno.EACCES, f"No permission to write {target}. Choose a folder you can write to, then save again.")
        return real(target, data)

    monkeypatch.setattr(caption_editor, "atomic_write_bytes", refuse)
    box = open_caption(main_window, xin, folder)
    xin.run("key", "--delay", "25", *keys(", shiny"))
    page = main_window.dataset_page
    state = page.findChild(QLabel, "caption_state")
    wait_for(lambda: state.property("state") == "error", 10, "the failed autosave")
    grid = page.findChild(QListView, "dataset_grid")
    click_thumbnail(xin, grid, "b.png")
    assert box.toPlainText() == "caption b"
    click_thumbnail(xin, grid, "a.png")
    wait_for(lambda: box.toPlainText() == "caption a, shiny", 10, "the typed text back in the box")
    pump(300)
    x_server.screenshot(ARTIFACTS / "screenshots" / "caption_not_saved.png")
    assert "Not saved" in state.text() and page.findChild(QLabel, "caption_warning").isVisible()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "caption a"
    monkeypatch.undo()  # writable again: moving on saves it
    click_thumbnail(xin, grid, "b.png")
    assert (folder / "a.txt").read_text(encoding="utf-8") == "caption a, shiny"
