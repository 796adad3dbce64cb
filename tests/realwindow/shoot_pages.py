"""Screenshots of every page as a new user sees them.

    python tests/realwindow/shoot_pages.py OUT_DIR                  # on the X display in $DISPLAY
    python tests/realwindow/shoot_pages.py --size 1366x768 OUT_DIR  # on its own Xvfb + openbox of that size

Starts the app the way ``python -m guitrainer`` does (``guitrainer.app.main``: its window size, device
probe and first-start welcome dialog) with a fresh HOME, then, with real input (xdotool): closes the
welcome dialog with Escape, maximizes the window by double-clicking its title bar, adds a folder of
images, and clicks through every page and every Dataset tab, saving ``import -window root`` PNGs in
OUT_DIR. ``OUT_DIR/layout.json`` records what a test can check: window and dialog geometry against
the screen, how far each page scrolls, and tabs whose titles do not fit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from PIL import Image  # noqa: E402
from PySide6.QtCore import QRect, QTimer  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QApplication,
    QDialog,
    QListView,
    QListWidget,
    QMainWindow,
    QScrollArea,
    QTabBar,
    QTabWidget,
)
from xinput import XInput, maximize_by_title_bar, pump, wait_for  # noqa: E402


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def rect(r: QRect) -> list[int]:
    return [r.x(), r.y(), r.width(), r.height()]


def make_images(folder: Path, count: int = 12) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        Image.new("RGB", (128 + 16 * (i % 3), 128), (20 * i % 255, 140, 255 - 15 * i)).save(folder / f"img_{i:02d}.png")
        if i % 3:
            (folder / f"img_{i:02d}.txt").write_text(f"mychar, colour {i}, simple background", encoding="utf-8")
    return folder


class Shooter:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.xin = XInput(dict(os.environ))
        self.layout: dict = {"shots": [], "pages": {}, "tabs_cut": {}}
        self.n = 0

    def shot(self, name: str) -> None:
        pump(400)  # let the last layout and paint land
        path = self.out / f"{self.n:02d}_{name}.png"
        subprocess.run(["import", "-window", "root", str(path)], check=True, timeout=30)
        self.layout["shots"].append(path.name)
        print(f"screenshot: {path}", flush=True)
        self.n += 1

    def cut_tabs(self, root) -> dict[str, list[str]]:  # noqa: ANN001
        """Tab titles shorter on screen than they want to be (elided, or behind scroll arrows)."""
        out = {}
        for bar in root.findChildren(QTabBar):
            if not bar.isVisible():
                continue
            cut = [
                bar.tabText(i)
                for i in range(bar.count())
                if bar.tabRect(i).width() < bar.tabSizeHint(i).width() or not bar.rect().contains(bar.tabRect(i))
            ]
            if cut:
                out[bar.parent().objectName() or type(bar.parent()).__name__] = cut
        return out

    def record_page(self, window: QMainWindow, name: str) -> None:
        page = window.stack.currentWidget() if hasattr(window, "stack") else None
        info: dict = {}
        if isinstance(page, QScrollArea):
            info["page_scroll"] = [page.horizontalScrollBar().maximum(), page.verticalScrollBar().maximum()]
            info["viewport"] = rect(page.viewport().rect())
            inner = [a for a in page.findChildren(QScrollArea) if a.isVisible() and a.verticalScrollBar().maximum() > 0]
            info["inner_scrolling"] = [a.objectName() or type(a).__name__ for a in inner]
        info["tabs_cut"] = self.cut_tabs(window)
        self.layout["pages"][name] = info

    def run(self) -> None:
        app = QApplication.instance()
        screen = app.primaryScreen().geometry()
        self.layout["screen"] = [screen.width(), screen.height()]
        wait_for(lambda: any(isinstance(w, QMainWindow) and w.isVisible() for w in app.topLevelWidgets()), 20, "the window")
        window = next(w for w in app.topLevelWidgets() if isinstance(w, QMainWindow) and w.isVisible())
        wait_for(lambda: window.windowHandle().isExposed(), 10, "the window on screen")

        # 1. The first start: the welcome (environment) dialog.
        wait_for(lambda: window.findChild(QDialog, "environment_dialog") is not None, 10, "the welcome dialog")
        dialog = window.findChild(QDialog, "environment_dialog")
        wait_for(lambda: dialog.isVisible() and dialog.windowHandle().isExposed(), 10, "the welcome dialog on screen")
        wait_for(lambda: dialog.table.rowCount() > 0, 90, "the welcome dialog's facts")
        pump(300)
        self.layout["welcome_dialog"] = {
            "frame": rect(dialog.frameGeometry()),
            "inside_screen": screen.contains(dialog.frameGeometry()),
            "table_headers": [dialog.table.horizontalHeaderItem(i).text() for i in range(dialog.table.columnCount())],
            "table_scroll": [dialog.table.horizontalScrollBar().maximum(), dialog.table.verticalScrollBar().maximum()],
        }
        self.shot("first_start_welcome")
        self.xin.activate(dialog)
        self.xin.key("Escape")
        wait_for(lambda: not dialog.isVisible(), 10, "the welcome dialog to close on Escape")

        # 2. The window as the app sizes it, then maximized by a double click on its title bar.
        self.layout["as_opened"] = {"frame": rect(window.frameGeometry()), "inside_screen": screen.contains(window.frameGeometry())}
        self.record_page(window, "as_opened_dataset")
        self.shot("as_opened_dataset")
        if maximize_by_title_bar(self.xin, window):
            self.layout["maximized_by"] = "double click on the title bar"
        else:
            window.showMaximized()
            wait_for(window.isMaximized, 10, "the window to maximize")
            self.layout["maximized_by"] = "showMaximized() (the title-bar double click did nothing)"
        pump(500)
        self.layout["maximized"] = {"frame": rect(window.frameGeometry()), "geometry": rect(window.geometry())}

        # 3. A dataset, one image chosen, then every page and every Dataset tab.
        window.add_paths([str(make_images(Path(tempfile.mkdtemp()) / "10_mychar"))])
        grid = window.findChild(QListView, "dataset_grid")
        wait_for(lambda: grid.model().rowCount() == 12, 20, "the images in the grid")
        self.xin.click(grid.viewport(), grid.visualRect(grid.model().index(1, 0)).center())
        nav = window.findChild(QListWidget, "page_nav")
        for row in range(nav.count()):
            item = nav.item(row)
            self.xin.click(nav.viewport(), nav.visualItemRect(item).center())
            wait_for(lambda item=item: nav.currentItem() is item, 10, f"the {item.text()} page")
            self.record_page(window, slug(item.text()))
            self.shot(f"page_{slug(item.text())}")
        self.xin.click(nav.viewport(), nav.visualItemRect(nav.item(0)).center())
        tabs = window.findChild(QTabWidget, "dataset_tabs")
        for i in range(tabs.count()):
            if tabs.currentIndex() != i:
                bar = tabs.tabBar()
                if bar.rect().contains(bar.tabRect(i)):
                    self.xin.click(bar, bar.tabRect(i).center())
                else:  # behind the tab bar's scroll arrows: what a person reaches with the arrows
                    tabs.setCurrentIndex(i)
                wait_for(lambda i=i: tabs.currentIndex() == i, 10, f"Dataset tab {tabs.tabText(i)}")
            self.shot(f"dataset_tab_{slug(tabs.tabText(i))}")
        (self.out / "layout.json").write_text(json.dumps(self.layout, indent=2), encoding="utf-8")


class ShotRun:
    """This script in its own process on its own X server of ``size``, started now, awaited by :meth:`wait`.

    The real-window conftest starts the runs at the beginning of the session, so they go on while the
    in-process tests run; test_screenshots.py waits for them and checks what they left.
    """

    def __init__(self, size: tuple[int, int], out: Path, home: Path) -> None:
        from xserver import XServer

        self.size, self.out, self.home = size, out, home
        self.server = XServer(*size)
        self.proc: subprocess.Popen | None = None

    def start(self) -> ShotRun:
        for old in self.out.glob("*.png"):
            old.unlink()
        self.server.start()
        env = self.server.env()
        env.pop("GUITRAINER_HOME", None)  # a new user: the app's own default folders, under a fresh HOME
        home = self.home
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
                   XDG_CACHE_HOME=str(home / ".cache"), QT_QPA_PLATFORM="xcb")  # fmt: skip
        self.home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(self.out)],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            stdout=open(self.home / "stdout.txt", "w"),  # noqa: SIM115 - the child holds it
            stderr=open(self.home / "stderr.txt", "w"),  # noqa: SIM115
        )
        return self

    def wait(self, timeout_s: float = 150.0) -> tuple[int, str]:
        """The run's exit status and its output (stdout, then stderr); the X server is stopped after."""
        try:
            rc = self.proc.wait(timeout_s) if self.proc else -1
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(10)
        self.stop()
        text = ""
        for name in ("stdout.txt", "stderr.txt"):
            path = self.home / name
            text += path.read_text(errors="replace") if path.exists() else ""
        return rc, text

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.server.stop()


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--size"]:  # its own X server: run this script again there, with a fresh HOME
        width, height = (int(v) for v in args[1].lower().split("x"))
        run = ShotRun((width, height), Path(args[2]).resolve(), Path(tempfile.mkdtemp(prefix="shoot_home_")))
        Path(args[2]).mkdir(parents=True, exist_ok=True)
        rc, output = run.start().wait()
        print(output)
        return rc
    out = Path(args[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    from guitrainer import app as guitrainer_app

    guitrainer_app.create_app()
    result = {"rc": 1}

    def drive() -> None:
        try:
            Shooter(out).run()
            result["rc"] = 0
        except Exception:  # the test reads the traceback from stderr
            traceback.print_exc()
        finally:  # leave without closing: a close guard's question would wait for an answer
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(result["rc"])

    QTimer.singleShot(0, drive)
    guitrainer_app.main(["--new-instance"])
    return result["rc"]


if __name__ == "__main__":
    sys.exit(main())
