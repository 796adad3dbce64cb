"""Screenshots of every page at a given window size, for the README (``docs/screens/``).

    QT_QPA_PLATFORM=offscreen .venv/bin/python docs/make_screenshots.py [WIDTHxHEIGHT] [OUT_DIR]

A fresh home folder, the Demo preset and a small drawn dataset; each page is grabbed with
``QWidget.grab()``. Prints, for each page, whether it had to scroll (it should not, from 1366×768 up).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

PAGES = ("dataset", "model", "training", "output")


def draw_dataset(folder: Path, n: int = 8) -> Path:
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        w, h = (640, 640) if i % 3 else (512, 768)
        im = Image.new("RGB", (w, h), (40 + 25 * i, 110, 190 - 12 * i))
        d = ImageDraw.Draw(im)
        d.ellipse([w * 0.3, h * 0.2, w * 0.7, h * 0.2 + w * 0.4], fill=(250, 235, 200))
        d.polygon([(0, h), (w * 0.4, h * 0.6), (w, h)], fill=(60, 120 + 10 * i, 80))
        im.save(folder / f"sunset_{i:02d}.png")
        if i % 4:
            (folder / f"sunset_{i:02d}.txt").write_text("mystyle, sunset, hills, warm light", encoding="utf-8")
    return folder


def main(argv: list[str]) -> int:
    size = argv[1] if len(argv) > 1 else "1366x768"
    out = Path(argv[2] if len(argv) > 2 else Path(__file__).resolve().parent / "screens")
    width, height = (int(v) for v in size.lower().split("x"))
    home = Path(tempfile.mkdtemp(prefix="guitrainer-shots-"))
    os.environ["GUITRAINER_HOME"] = str(home / "data")
    os.environ["HOME"] = str(home)  # the output folder shown is ~/guitrainer/output under this fresh home
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from guitrainer.app import create_app
    from guitrainer.presets import PresetStore
    from guitrainer.ui.main_window import MainWindow

    app = create_app([])
    settings = QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("first_run_done", True)
    window = MainWindow(store=PresetStore(user_dir=home / "presets"), settings=settings)
    window.resize(width, height)
    window.show()
    window.dataset_page.add_paths([draw_dataset(home / "10_sunsets")])
    deadline = 200
    while (window.dataset_page.is_loading() or not window.dataset_page.items) and deadline:
        app.processEvents()
        QApplication.instance().thread().msleep(20)
        deadline -= 1
    window.dataset_page.select_rows([0])
    out.mkdir(parents=True, exist_ok=True)
    problems = 0
    for row, name in enumerate(PAGES):
        window.nav.setCurrentRow(row)
        for _ in range(30):
            app.processEvents()
            QApplication.instance().thread().msleep(10)
        page = window.pages[row]
        scrolls = page.verticalScrollBar().maximum()
        path = out / f"{name}_{width}x{height}.png"
        window.grab().save(str(path))
        print(f"{name:9s} {path}  page scrolls by {scrolls} px")
        problems += scrolls > 0
    window.dataset_page.shutdown()
    window._quit_answered = True  # noqa: SLF001 - a script: no question on close
    window.close()
    window.devices.wait(120_000)  # the device probe (torch import) ends before the app does
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
