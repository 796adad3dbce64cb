"""Issue 27 #8 (the Dataset page's parts): a tag filter follows a rename of its tag (and back on undo) or clears,
saying so; the counts under the grid follow the filter ("2 of 30 images"), an empty filter says so; every undo
and redo of a bulk edit says what it did. Driven as a user does: clicks in the tag table and on the buttons,
typing into the tag tools' fields and the search box, Ctrl+Z."""

from __future__ import annotations

import pytest
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit, QPushButton

from guitrainer.core.dataset import scan as ds
from guitrainer.ui.dataset.page import DatasetPage

CAPTIONS = {"a.png": "sunset, cat", "b.png": "night, cat", "c.png": "dog, sunset", "d.png": None}  # 64 px: all flagged


@pytest.fixture
def page(qtbot, shown_dataset_page, tmp_path) -> DatasetPage:
    folder = tmp_path / "1_pets"
    folder.mkdir()
    for i, (name, caption) in enumerate(CAPTIONS.items()):
        Image.new("RGB", (64, 64), (50 * i, 90, 160)).save(folder / name)
        if caption is not None:
            (folder / name).with_suffix(".txt").write_text(caption, encoding="utf-8")
    p = shown_dataset_page
    p.add_paths([folder])
    qtbot.waitUntil(lambda: len(p.items) == len(CAPTIONS) and not p.is_loading(), timeout=10000)
    qtbot.waitUntil(lambda: p.tag_tools.table.rowCount() == 4, timeout=5000)
    p.tabs.setCurrentWidget(p.tag_tools)
    return p


def names(page: DatasetPage) -> list[str]:
    return sorted(page.proxy.index(r, 0).data() for r in range(page.proxy.rowCount()))


def click_tag(qtbot, page: DatasetPage, tag: str) -> None:
    table = page.tag_tools.table
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == tag)
    table.scrollToItem(table.item(row, 0))
    QTest.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                     table.visualItemRect(table.item(row, 0)).center())


def type_into(edit: QLineEdit, text: str) -> None:
    QTest.mouseClick(edit, Qt.MouseButton.LeftButton)
    edit.selectAll()
    QTest.keyClicks(edit, text)


def press(page: DatasetPage, text: str) -> None:
    button = next(b for b in page.tag_tools.findChildren(QPushButton) if b.text() == text)
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


def use_all_images(page: DatasetPage) -> None:
    page.tag_tools.scope.setCurrentIndex(page.tag_tools.scope.findData("all"))


def undo(page: DatasetPage) -> None:
    QTest.keyClick(page.grid, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # Ctrl+Z, as in the grid


def test_a_tag_filter_follows_the_rename_of_its_tag_and_back_on_undo(qtbot, page):
    click_tag(qtbot, page, "cat")
    assert names(page) == ["a.png", "b.png"] and page.tag_chip.text().startswith("tag: cat")
    use_all_images(page)
    type_into(page.tag_tools.rename_old, "cat")
    type_into(page.tag_tools.rename_new, "kitten")
    press(page, "Rename")
    assert page.proxy.tag == "kitten" and page.tag_chip.text().startswith("tag: kitten")
    assert names(page) == ["a.png", "b.png"]  # the same images, under their tag's new name
    assert "follows the rename" in page.last_status and "“kitten”" in page.last_status
    undo(page)
    qtbot.waitUntil(lambda: page.proxy.tag == "cat", timeout=3000)
    assert names(page) == ["a.png", "b.png"] and page.tag_chip.text().startswith("tag: cat")
    assert page.last_status.startswith("Undone: Rename tag “cat” to “kitten” (2 captions).")
    assert "it shows “cat” now" in page.last_status


def test_a_tag_filter_whose_tag_is_gone_clears_saying_so(qtbot, page):
    click_tag(qtbot, page, "dog")
    use_all_images(page)
    type_into(page.tag_tools.remove, "dog")
    press(page, "Remove")
    assert page.proxy.tag == "" and not page.tag_chip.isVisibleTo(page)
    assert names(page) == sorted(CAPTIONS)
    assert "No image has the tag “dog” any more" in page.last_status


def test_the_counts_under_the_grid_follow_the_filter(qtbot, page):
    qtbot.waitUntil(lambda: page.strip.text().startswith("4 images"), timeout=3000)
    type_into(page.search, "sunset")
    qtbot.waitUntil(lambda: page.strip.text().startswith("2 of 4 images (search “sunset”)"), timeout=3000)
    assert " · 2 captioned · 2 flagged · " in page.strip.text()  # of the two shown
    type_into(page.search, "zebra")
    qtbot.waitUntil(lambda: page.strip.text().startswith("No image matches the filter (search “zebra”) of 4 images"),
                    timeout=3000)
    page.search.clear()
    page.filter_combo.setCurrentIndex(page.filter_combo.findData("uncaptioned"))
    qtbot.waitUntil(lambda: page.strip.text().startswith("1 of 4 images (Uncaptioned)"), timeout=3000)
    page.filter_combo.setCurrentIndex(0)
    click_tag(qtbot, page, "cat")
    qtbot.waitUntil(lambda: page.strip.text().startswith("2 of 4 images (tag “cat”)"), timeout=3000)


def test_every_undo_and_redo_of_a_bulk_edit_says_what_it_did(qtbot, page):
    use_all_images(page)
    press(page, "Sort A–Z")
    assert page.last_status.startswith("Sort tags: changed 2 captions")  # a and b; "dog, sunset" is sorted
    undo(page)
    assert page.last_status == "Undone: Sort tags (2 captions)."
    QTest.keyClick(page.grid, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert page.last_status == "Redone: Sort tags (2 captions)."


def test_tag_filter_after_rules():
    captions = ["cat, sunset", "dog"]
    assert ds.tag_filter_after("", captions) == ("", "")
    assert ds.tag_filter_after("cat", captions) == ("cat", "")
    assert ds.tag_filter_after("cat", captions, ("cat", "kitten"))[0] == "kitten"
    assert ds.tag_filter_after("cat", captions, ("cat", ""))[0] == ""  # renamed to nothing: removed
    assert ds.tag_filter_after("cat", captions, ("dog", "puppy")) == ("cat", "")  # another tag's rename
    tag, note = ds.tag_filter_after("bird", captions)
    assert tag == "" and "bird" in note
