"""Issue 15 #1: a caption typed in a filtered view lands only in the image the user chose.

Typed with real key events into the caption box, in each filter mode, across an autosave that makes
the image stop matching the filter; then every caption file on disk is checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from guitrainer.ui.dataset.caption_editor import AUTOSAVE_MS
from guitrainer.ui.dataset.page import DatasetPage

CAPTIONS = {"a": "red hair, smile", "b": None, "c": None, "d": "blue sky", "e": None}


def make_set(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i, name in enumerate(CAPTIONS):
        size = (96, 96) if name == "e" else (640, 640)  # e is too small: flagged
        Image.new("RGB", size, (40 * i, 120, 200)).save(folder / f"{name}.png")
        if CAPTIONS[name] is not None:
            (folder / f"{name}.txt").write_text(CAPTIONS[name], encoding="utf-8")
    return folder


def on_disk(folder: Path) -> dict[str, str | None]:
    return {n: (folder / f"{n}.txt").read_text(encoding="utf-8") if (folder / f"{n}.txt").exists() else None for n in CAPTIONS}


def visible(page: DatasetPage) -> list[str]:
    return [page.proxy.index(r, 0).data() for r in range(page.proxy.rowCount())]


@pytest.fixture
def page(shown_dataset_page):
    return shown_dataset_page


def click_image(qtbot, page: DatasetPage, name: str) -> None:
    row = visible(page).index(f"{name}.png")
    rect = page.grid.visualRect(page.proxy.index(row, 0))
    QTest.mouseClick(page.grid.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, rect.center())
    assert page.editor.item is not None and page.editor.item.name == f"{name}.png"


def type_into_caption(qtbot, page: DatasetPage, text: str, replace: bool = False) -> None:
    box = page.editor.text
    QTest.mouseClick(box.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, box.viewport().rect().center())
    assert box.hasFocus()
    if replace:
        QTest.keyClick(box, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        QTest.keyClick(box, Qt.Key.Key_Delete)
    else:
        QTest.keyClick(box, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClicks(box, text)


@pytest.mark.parametrize(
    "mode, name, first, more, replace",
    [
        ("uncaptioned", "b", "first words", ", more words", False),  # the autosave makes b captioned
        ("captioned", "a", "", "new words", True),  # emptied: a stops being captioned, then typed again
        ("flagged", "e", "tiny", " picture", False),
        ("search", "a", "green hair", ", grin", True),  # the new text no longer matches the search
        ("tag", "d", "grey sky", ", rain", True),  # the tag filtered by is typed away
    ],
)
def test_typing_in_a_filtered_view_writes_only_the_chosen_image(qtbot, page, tmp_path, mode, name, first, more, replace):
    folder = make_set(tmp_path / "set")
    page.add_paths([folder])
    qtbot.waitUntil(lambda: len(page.items) == len(CAPTIONS) and not page.is_loading(), timeout=10000)
    if mode == "search":
        QTest.keyClicks(page.search, "red")
    elif mode == "tag":
        page.filter_by_tag("blue sky")
    else:
        page.filter_combo.setCurrentIndex(page.filter_combo.findData(mode))
    assert f"{name}.png" in visible(page)
    before = on_disk(folder)
    click_image(qtbot, page, name)

    type_into_caption(qtbot, page, first, replace=replace)
    qtbot.wait(AUTOSAVE_MS + 300)  # autosaved: the image no longer matches the filter
    assert page.editor.item.name == f"{name}.png"
    assert f"{name}.png" in visible(page)  # kept in view while it is being edited
    QTest.keyClicks(page.editor.text, more)  # the cursor is still in the box: the user keeps typing
    qtbot.wait(AUTOSAVE_MS + 300)
    page.editor.flush()

    after = on_disk(folder)
    expected = dict(before)
    expected[name] = first + more if replace else (before[name] or "") + first + more
    assert after == expected  # every other caption file is untouched
    assert page.editor.item.name == f"{name}.png"

    # moving on (Alt+Right) to another image lets the edited one leave the view when it no longer matches
    edited = page.editor.item
    others = [n for n in visible(page) if n != f"{name}.png"]
    QTest.keyClick(page.editor.text, Qt.Key.Key_Right, Qt.KeyboardModifier.AltModifier)
    if others:
        qtbot.waitUntil(lambda: page.editor.item is not edited, timeout=3000)
        if not page.proxy.matches(edited):
            qtbot.waitUntil(lambda: f"{name}.png" not in visible(page), timeout=3000)
    assert on_disk(folder) == expected
