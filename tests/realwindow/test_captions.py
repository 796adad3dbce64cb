"""Typing a caption in each filtered view changes that image's caption file and no other (issue 15 #1).

A person picks a view (Show ▸ …, or the search box), clicks a thumbnail, types into the caption box
with the keyboard, pauses long enough for the autosave, and types on. Afterwards every caption file
of the folder is read back from disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLineEdit, QListView, QPlainTextEdit, QTabWidget
from xinput import choose_in_combo, pump, wait_for

PAUSE_MS = 600  # a person's pause between words, after the autosave

# name -> (side in px, caption or None); 32 px images are "small" for every preset (flagged)
IMAGES = {
    "cap_a.png": (96, "red, circle"),
    "cap_b.png": (96, "blue, square"),
    "unc_a.png": (96, None),
    "unc_b.png": (96, None),
    "unc_c.png": (96, None),
    "small_a.png": (32, "green, dot"),
    "small_b.png": (32, None),
}


def make_folder(root: Path) -> Path:
    folder = root / "1_shapes"
    folder.mkdir(parents=True)
    for i, (name, (side, caption)) in enumerate(IMAGES.items()):
        Image.new("RGB", (side, side), (30 * i, 200 - 20 * i, 90)).save(folder / name)
        if caption is not None:
            (folder / name).with_suffix(".txt").write_text(caption, encoding="utf-8")
    return folder


def captions_on_disk(folder: Path) -> dict[str, str | None]:
    """Every image's caption file as text (None: no file)."""
    out = {}
    for name in IMAGES:
        txt = (folder / name).with_suffix(".txt")
        out[name] = txt.read_text(encoding="utf-8") if txt.exists() else None
    return out


@dataclass(frozen=True)
class Case:
    show: str  # the "Show" entry, or "" for All images
    search: str  # typed into the search box
    target: str  # the image clicked
    clear_first: bool  # select all and delete before typing (empties the caption first)
    first: str  # typed, then the autosave pause
    second: str  # typed after the pause
    expected: str  # the target's caption afterwards


CASES = {
    "all": Case("All images", "", "cap_b.png", False, ", striped", ", large", "blue, square, striped, large"),
    "captioned": Case("Captioned", "", "cap_a.png", True, "", "crimson, disc", "crimson, disc"),
    "uncaptioned": Case("Uncaptioned", "", "unc_b.png", False, "yellow, star", ", bright", "yellow, star, bright"),
    "flagged": Case("Flagged", "", "small_b.png", False, "tiny, dot", ", pale", "tiny, dot, pale"),
    "search": Case("All images", "circle", "cap_a.png", True, "crimson, disc", ", shiny", "crimson, disc, shiny"),
}


def grid_rect_of(grid: QListView, name: str):  # noqa: ANN201
    model = grid.model()
    for row in range(model.rowCount()):
        index = model.index(row, 0)
        if index.data(Qt.ItemDataRole.DisplayRole) == name:
            grid.scrollTo(index)
            pump(30)
            return grid.visualRect(index)
    raise AssertionError(f"{name} is not in the view: {[model.index(r, 0).data() for r in range(model.rowCount())]}")


@pytest.mark.parametrize(
    "mode",
    [
        "all",
        "captioned",
        "uncaptioned",
        "flagged",
        "search",
    ],
)
def test_typing_a_caption_changes_only_the_chosen_image(main_window, xin, tmp_path, mode):
    case = CASES[mode]
    folder = make_folder(tmp_path)
    page = main_window.dataset_page
    main_window.add_paths([str(folder)])
    grid = page.findChild(QListView, "dataset_grid")
    wait_for(lambda: grid.model().rowCount() == len(IMAGES), 15, "the folder's images in the grid")
    before = captions_on_disk(folder)

    page.findChild(QTabWidget, "dataset_tabs").setCurrentIndex(0)  # the Caption tab, as on a first start
    choose_in_combo(xin, page.findChild(QComboBox, "dataset_filter"), case.show)
    if case.search:
        xin.click(page.findChild(QLineEdit, "dataset_search"))
        xin.type(case.search)
    rect = grid_rect_of(grid, case.target)
    xin.click(grid.viewport(), rect.center())
    box = page.findChild(QPlainTextEdit, "caption_text")
    wait_for(lambda: box.isEnabled() and box.toPlainText() == (before[case.target] or ""), 10, "the chosen caption")
    xin.click(box)
    xin.key("ctrl+End")
    if case.clear_first:
        xin.key("ctrl+a", "BackSpace")
    if case.first:
        xin.type(case.first)
    # the pause a person makes: long enough for the autosave, which the file on disk shows
    original = before[case.target] or ""
    saved = case.first if case.clear_first else original + case.first
    wait_for(lambda: (captions_on_disk(folder)[case.target] or "") == saved, 10, f"the autosave of {saved!r}")
    pump(PAUSE_MS)
    xin.type(case.second)
    pump(PAUSE_MS)
    xin.key("Tab")  # focus leaves the box: anything typed is saved now
    pump(300)

    after = captions_on_disk(folder)
    changed = {name for name in IMAGES if after[name] != before[name]}
    assert changed == {case.target}, {name: (before[name], after[name]) for name in changed}
    assert after[case.target] == case.expected
