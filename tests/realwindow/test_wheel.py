"""The mouse wheel over a folder's Repeats box, with real input: it scrolls the Dataset page and leaves Repeats
(and the config) alone until the box is clicked. The box is made when the folder is added, after the window
was built: the guard it once missed (Repeats went from 1 to 2 under a wheel that meant to scroll)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from PIL import Image
from PySide6.QtWidgets import QSpinBox
from xinput import XInput, wait_for

WHEEL_UP, WHEEL_DOWN = "4", "5"  # X buttons


def test_the_wheel_over_a_repeats_box_scrolls_the_page_until_the_box_is_clicked(  # noqa: ANN001
    main_window, xin: XInput, tmp_path: Path, artifacts_dir: Path
):
    w = main_window
    w.showNormal()
    w.resize(1100, 560)  # a small window: the Dataset page scrolls
    page = w.dataset_page
    bar = page.verticalScrollBar()
    wait_for(lambda: w.height() <= 600 and bar.maximum() > 0, 10, lambda: f"a small window whose page scrolls, {w.size()}")
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (96, 96), (60 * i, 140, 200)).save(folder / f"{i}.png")
    page.add_paths([str(folder)])
    wait_for(lambda: page.folders_table.rowCount() == 1 and not page.is_loading(), 10, "the folder in the table")
    spin = page.folders_table.cellWidget(0, 2)
    assert isinstance(spin, QSpinBox)
    wait_for(spin.isVisible, 5, "the Repeats box")
    bar.setValue(0)

    def repeats() -> list[int]:
        return [f.repeats for f in w.binding.get("dataset.folders")]

    xin.move(spin)
    xin.run("click", WHEEL_UP)  # the page is at its top: nothing moves
    assert spin.value() == 1 and repeats() == [1] and not spin.hasFocus()
    xin.run("click", WHEEL_DOWN)
    wait_for(lambda: bar.value() > 0, 5, "the page to scroll")
    assert spin.value() == 1 and repeats() == [1]
    shot = artifacts_dir / "wheel_over_repeats.png"
    subprocess.run(["import", "-window", "root", str(shot)], timeout=30, check=False)

    bar.setValue(0)
    xin.click(spin)  # clicked: the box is the user's, and so is the wheel over it
    wait_for(spin.hasFocus, 5, "the Repeats box to have focus")
    xin.run("click", WHEEL_UP)
    wait_for(lambda: repeats() == [2], 5, lambda: f"Repeats 2 in the config, got {repeats()} (box {spin.value()})")
    assert spin.value() == 2
