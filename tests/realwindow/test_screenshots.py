"""Screenshots of every page at 1366 x 768 and 1920 x 1080, the app started as a new user starts it.

Each size gets its own X server of that size and a fresh app process (shoot_pages.py, started by the
conftest at the beginning of the session), so the window meets the screen the way it does on such a
computer. The PNGs land in ``artifacts/screenshots/<W>x<H>/`` (CI keeps them as artefacts); the test
prints the folder and what layout.json says about scrolling and cut-off tabs.
"""

from __future__ import annotations

import json

import pytest
from PIL import Image

PAGES = ["dataset", "model_precision", "training", "output"]
DATASET_TABS = ["caption", "tags", "auto_caption", "summary", "options", "class_images"]


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_screenshots_of_every_page(size, screenshot_runs):
    run = screenshot_runs[f"{size[0]}x{size[1]}"]
    rc, output = run.wait()
    print(f"\nscreenshots at {size[0]}x{size[1]}: {run.out}")
    assert rc == 0, output[-8000:]
    layout = json.loads((run.out / "layout.json").read_text(encoding="utf-8"))
    shots = " ".join(layout["shots"])
    for name in ["first_start_welcome", "as_opened_dataset"] + [f"page_{p}" for p in PAGES] + [
        f"dataset_tab_{t}" for t in DATASET_TABS
    ]:
        assert name in shots, (name, layout["shots"])
    for name in layout["shots"]:
        with Image.open(run.out / name) as png:
            assert png.size == size
            # a picture of the app, not a blank screen: many colours
            assert len(png.convert("RGB").getcolors(1 << 20) or ()) > 50, name
    print(json.dumps({k: layout[k] for k in ("as_opened", "maximized_by", "welcome_dialog")}))
    for page, info in layout["pages"].items():
        print(page, json.dumps(info))
