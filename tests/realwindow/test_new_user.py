"""A new user's first session, with real input only: first start, a folder dragged in from another
application, captions typed, the Demo preset, Train, watch it finish, check the file on the Output page.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QEvent, QObject, QSettings
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDialog,
    QLabel,
    QLineEdit,
    QListView,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
)
from xinput import (
    choose_in_combo,
    close_discarding,
    maximize_by_title_bar,
    open_page,
    pump,
    train_and_wait,
    wait_for,
)

from guitrainer.config.presets import DEFAULT_PRESET

HERE = Path(__file__).resolve().parent


def make_photos(folder: Path) -> list[Path]:
    """Four 'photos' a person would have: different colours and sizes, one with a caption already."""
    folder.mkdir(parents=True)
    out = []
    for i, (w, h) in enumerate([(96, 96), (128, 96), (96, 128), (112, 112)]):
        img = Image.new("RGB", (w, h), (250 - 50 * i, 60 + 40 * i, 120))
        for x in range(w // 4, w // 2):  # a shape, so the images are not flat
            for y in range(h // 4, h // 2):
                img.putpixel((x, y), (20, 20, 20 + 50 * i))
        out.append(folder / f"photo_{i}.png")
        img.save(out[-1])
    (folder / "photo_0.txt").write_text("mychar, red background", encoding="utf-8")
    return out


class DragSeen(QObject):
    """Counts the drag events Qt delivers in this process (an event filter on the application)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = {QEvent.Type.DragEnter: 0, QEvent.Type.DragMove: 0, QEvent.Type.Drop: 0}

    def eventFilter(self, _obj: QObject, event: QEvent) -> bool:  # noqa: N802
        if event.type() in self.counts:
            self.counts[event.type()] += 1
        return False


def drag_from_another_app(xin, window, paths: list[Path]) -> str:  # noqa: ANN001
    """Start a second X client showing the files, and drag them with the real pointer onto ``window``.

    The button goes up only once the window has seen the drag move over it (its XDND status reply is
    then on its way), as it would under a person's slower hand.
    """
    source = subprocess.Popen(
        [sys.executable, str(HERE / "drag_source.py"), "1400", "150", *map(str, paths)],
        env=xin.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = DragSeen()
    QApplication.instance().installEventFilter(seen)
    try:
        line = source.stdout.readline()  # READY x y w h
        assert line.startswith("READY"), line + source.stderr.read()
        x, y, w, h = map(int, line.split()[1:])
        target = window.mapToGlobal(window.rect().center())
        tx, ty = target.x(), target.y()
        xin.run(
            "mousemove", str(x + w // 2), str(y + h // 2), "mousedown", "1", "sleep", "0.4",
            "mousemove", str(x + w // 2 - 40), str(y + h // 2 + 10), "sleep", "0.3",
            "mousemove", str((x + tx) // 2), str((y + ty) // 2), "sleep", "0.3",
            "mousemove", str(tx), str(ty),
        )  # fmt: skip
        moves = QEvent.Type.DragMove
        wait_for(lambda: seen.counts[moves] > 0, 15, lambda: f"the drag over the window ({seen.counts})")
        before = seen.counts[moves]
        xin.run("mousemove", str(tx + 6), str(ty + 6))
        wait_for(lambda: seen.counts[moves] > before, 15, lambda: f"the drag to move on the window ({seen.counts})")
        pump(300)
        xin.run("mouseup", "1")
        wait_for(lambda: seen.counts[QEvent.Type.Drop] > 0, 15, lambda: f"the drop ({seen.counts})")
        wait_for(lambda: source.poll() is not None, 15, "the drag source to finish")
        return source.stdout.read()
    finally:
        QApplication.instance().removeEventFilter(seen)
        if source.poll() is None:
            source.kill()
            source.wait(5)


def close_the_welcome(window, xin) -> None:  # noqa: ANN001
    """The first start's welcome dialog, closed with Escape, as app.main shows it (after the device probe starts)."""
    window.model_page.start_probe()
    window.maybe_first_run()
    welcome = window.findChild(QDialog, "environment_dialog")
    assert welcome is not None, "no welcome on the first start"
    wait_for(lambda: welcome.isVisible() and welcome.isActiveWindow(), 10, "the welcome dialog")
    xin.key("Escape")
    wait_for(lambda: not welcome.isVisible(), 10, "the welcome dialog to close")
    xin.activate(window)


def type_two_captions(window, xin, folder: Path) -> None:  # noqa: ANN001
    """Click the first thumbnail, type into its caption, Next ▶, type again; check both files on disk."""
    grid = window.findChild(QListView, "dataset_grid")
    xin.click(grid.viewport(), grid.visualRect(grid.model().index(0, 0)).center())
    box = window.findChild(QPlainTextEdit, "caption_text")
    next_button = next(b for b in window.dataset_page.findChildren(QToolButton) if b.text().startswith("Next"))
    typed = {}
    for _ in range(2):
        name = grid.currentIndex().data()
        wait_for(lambda: box.isEnabled(), 10, "the caption box")
        xin.click(box)
        xin.key("ctrl+End")
        text = box.toPlainText()
        words = ", smiling" if text else "mychar, smiling"
        xin.type(words)
        typed[name] = text + words
        xin.click(next_button)
        wait_for(lambda name=name: grid.currentIndex().data() != name, 10, "the next image")
    for name, text in typed.items():
        caption = (folder / name).with_suffix(".txt")
        wait_for(lambda caption=caption, text=text: caption.exists() and caption.read_text(encoding="utf-8") == text,
                 10, f"{caption.name} to read {text!r}")  # fmt: skip


def verify_on_the_output_page(window, xin, lora: Path) -> None:  # noqa: ANN001
    """The Output page names the file the run wrote ("Last run wrote: …"); the person checks the path in the
    Verify box (typing the one shown when it differs) and presses Verify."""
    open_page(window, xin, "Output")
    assert str(lora) in window.output_page.findChild(QLabel, "last_run_file").text()
    path_edit = window.output_page.findChild(QLineEdit, "verify_path")
    if Path(path_edit.text()).expanduser() != lora:
        xin.click(path_edit)
        xin.key("ctrl+a")
        xin.type(str(lora), delay_ms=5)
    result = window.output_page.findChild(QLabel, "verify_result")
    xin.click(window.output_page.findChild(QPushButton, "verify_button"))
    wait_for(lambda: "✔" in result.text() or "✘" in result.text(), 60, "the check of the file")
    assert "✔" in result.text(), result.text()


@pytest.mark.slow
def test_a_new_user_drags_a_folder_in_fixes_captions_and_trains_the_demo(qapp, xin, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # output goes to ~/guitrainer/output: here
    from guitrainer.config.presets import PresetStore
    from guitrainer.ui.window.main_window import MainWindow

    window = MainWindow(store=PresetStore(user_dir=home / "presets"),
                        settings=QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat))  # fmt: skip
    try:
        window.show()
        wait_for(lambda: window.windowHandle() is not None and window.windowHandle().isExposed(), 10, "the window")
        close_the_welcome(window, xin)
        # The preset first: the tool bar's combo box.
        choose_in_combo(xin, window.findChild(QComboBox, "preset_combo"), DEFAULT_PRESET)
        assert window.binding.config.model.base == "demo"

        # A folder dragged from a file manager (another X client) onto the window.
        photos = make_photos(tmp_path / "photos" / "5_mychar")
        dropped = drag_from_another_app(xin, window, [photos[0].parent])
        assert "DROPPED CopyAction" in dropped, dropped
        grid = window.findChild(QListView, "dataset_grid")
        wait_for(
            lambda: grid.model().rowCount() == 4,
            15,
            lambda: "the dragged folder's images (then: "
            f"{len(window.dataset_page.items)} items, folders {window.binding.config.dataset.folders}, "
            f"status {getattr(window.dataset_page, 'last_status', '?')!r}, bar {window.statusBar().currentMessage()!r})",
        )
        assert {it.name for it in window.dataset_page.items} == {p.name for p in photos}

        # At the window's first size the caption box is cut off and Next ▶ is scrolled away (findings):
        # a person maximizes the window first.
        assert maximize_by_title_bar(xin, window)
        type_two_captions(window, xin, photos[0].parent)
        status = train_and_wait(window, xin, timeout_s=400)  # the Demo preset's 240 steps and 7 rounds of samples
        lora = home / "guitrainer" / "output" / "demo_lora.safetensors"
        assert lora.is_file() and lora.stat().st_size > 1000
        assert str(lora) in status  # the Training page names the file it wrote
        verify_on_the_output_page(window, xin, lora)
    finally:
        close_discarding(window, xin)
