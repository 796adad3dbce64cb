"""Screenshots of every page at 1366 x 768 and 1920 x 1080, the app started as a new user starts it.

Each size gets its own X server of that size and a fresh app process (tests/realwindow/shoot_pages.py),
so the window meets the screen the way it does on such a computer. The PNGs land in
``artifacts/screenshots/<W>x<H>/`` (CI keeps them as artefacts); the test prints the folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from xserver import XServer

HERE = Path(__file__).resolve().parent
PAGES = ["dataset", "model_precision", "training", "output"]


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_screenshots_of_every_page(size, artifacts, tmp_path):
    out = artifacts / "screenshots" / f"{size[0]}x{size[1]}"
    for old in out.glob("*.png"):
        old.unlink()
    server = XServer(*size).start()
    try:
        home = tmp_path / "home"
        env = server.env()
        env.pop("GUITRAINER_HOME", None)  # a new user: the app's own default folders, under a fresh HOME
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
                   XDG_CACHE_HOME=str(home / ".cache"), QT_QPA_PLATFORM="xcb")
        done = subprocess.run([sys.executable, str(HERE / "shoot_pages.py"), str(out)], env=env, cwd=HERE.parent.parent,
                              capture_output=True, text=True, timeout=120)
    finally:
        server.stop()
    print(f"\nscreenshots at {size[0]}x{size[1]}: {out}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    layout = json.loads((out / "layout.json").read_text(encoding="utf-8"))
    for page in PAGES:
        assert f"page_{page}" in " ".join(layout["shots"]), layout["shots"]
    for name in layout["shots"]:
        with Image.open(out / name) as png:
            assert png.size == size
            # a real picture of the app, not a blank screen: many colours
            assert len(png.convert("RGB").getcolors(1 << 20) or ()) > 50, name
    print(json.dumps({k: layout[k] for k in ("as_opened", "maximized_by", "welcome_dialog")}, indent=1))
    print(json.dumps(layout["pages"], indent=1))
