"""The window's own readers of user-given paths go through ``base.safe_open`` (issue 27, found after #10): File ▸
Open and a file dropped on the window, the workspace kept between starts, the thumbnails and the caption editor.
A named pipe never blocks the GUI thread or a worker, ``/dev/zero`` is never read, and a hand-over message from
another launch is not read without end. Names made from user text are ones every system can write.

A pipe here gets a writer after :data:`UNBLOCK_S` (a thread opens it and writes a valid file): a reader that
blocked on it would then read that and succeed, so the test fails instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QSettings

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import PresetStore
from guitrainer.ui.binding import ConfigBinding

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(),
                                reason="named pipes and /dev as on Linux and macOS")
UNBLOCK_S = 5.0


class LatePipe:
    """A named pipe; ``blocked`` turns True when someone had it open for reading when the late writer came."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.blocked = False

    def __fspath__(self) -> str:
        return str(self.path)


@contextlib.contextmanager
def pipe_with_a_late_writer(path: Path, payload: bytes) -> Iterator[LatePipe]:
    """A named pipe at ``path`` that gets ``payload`` written into it after :data:`UNBLOCK_S`, if anyone reads it
    then (a reader blocked on it); the test checks ``blocked`` is still False at the end."""
    os.mkfifo(path)
    pipe = LatePipe(path)
    done = threading.Event()

    def write_late() -> None:
        while not done.wait(UNBLOCK_S):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when nobody reads: nobody is blocked
            except OSError:
                continue
            pipe.blocked = True
            with os.fdopen(fd, "wb") as f:
                f.write(payload)

    t = threading.Thread(target=write_late, daemon=True)
    t.start()
    try:
        yield pipe
    finally:
        done.set()
        t.join(UNBLOCK_S + 1)
    assert not pipe.blocked, f"something opened {path.name} (a named pipe) and blocked until a writer came"


@pytest.fixture
def actions(qtbot, tmp_path):  # noqa: ANN001, ANN201
    from PySide6.QtWidgets import QMainWindow, QMenu

    from guitrainer.ui.window.preset_files import PresetFileActions

    win = QMainWindow()
    qtbot.addWidget(win)
    errors: list[tuple[str, str]] = []
    files = PresetFileActions(
        win, PresetStore(user_dir=tmp_path / "presets"), ConfigBinding(TrainingConfig()),
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat), QMenu(win),
        current_preset=lambda: "", show_preset=lambda _n, _s: None, load_preset=lambda _n: True,
        error=lambda title, text: errors.append((title, text)),
    )
    return files, errors


def test_opening_a_pipe_as_a_preset_is_an_error_not_a_hang(actions, tmp_path):
    files, errors = actions
    with pipe_with_a_late_writer(tmp_path / "stuck.toml", b"[network]\nrank = 3\n") as pipe:
        assert files.open_file(os.fspath(pipe)) is False
    ((title, text),) = errors
    assert title == "This file cannot be opened" and "is a named pipe (FIFO), not a file" in text
    assert files.binding.get("network.rank") != 3


def test_opening_dev_zero_as_a_preset_is_an_error_at_once(actions, tmp_path):
    files, errors = actions
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")  # what a file dialog or a drop hands over: a .toml that is a device
    assert files.open_file(str(link)) is False
    assert "is a device, not a file" in errors[0][1]


def test_a_pipe_where_the_workspace_is_kept_is_no_hang(tmp_path, caplog):
    from guitrainer.ui.window.workspace import FILE_NAME, load_workspace

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    with pipe_with_a_late_writer(tmp_path / FILE_NAME, b"[network]\nrank = 3\n"):
        assert load_workspace(settings) is None
    assert "named pipe" in caplog.text


def test_a_thumbnail_of_a_pipe_named_like_an_image_fails_without_blocking_its_worker(qtbot, tmp_path):
    from guitrainer.base.safe_open import PathError
    from guitrainer.ui.dataset.thumbnails import ThumbnailLoader, render_thumbnail

    good = tmp_path / "good.png"
    Image.new("RGB", (64, 64), (10, 200, 30)).save(good)
    payload = good.read_bytes()
    with pipe_with_a_late_writer(tmp_path / "pipe.png", payload) as pipe:
        with pytest.raises(PathError, match="named pipe"):
            render_thumbnail(os.fspath(pipe), 64)
        loader = ThumbnailLoader(disk_dir=False, threads=1)
        with qtbot.waitSignal(loader.ready, timeout=int(UNBLOCK_S * 1000) - 500):
            assert loader.get(os.fspath(pipe), 64) is None
        assert loader.failed(os.fspath(pipe), 64)
        loader.shutdown()


def test_the_caption_editor_shows_an_image_whose_caption_is_a_pipe(qtbot, dataset_page, tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    Image.new("RGB", (64, 64)).save(folder / "a.png")
    with pipe_with_a_late_writer(folder / "a.txt", b"from the pipe"):
        dataset_page.add_paths([folder])
        qtbot.waitUntil(lambda: len(dataset_page.items) == 1 and not dataset_page.is_loading(), timeout=int(UNBLOCK_S * 1000) - 500)
        dataset_page.select_rows([0])
        editor = dataset_page.editor
        assert editor.item is not None and editor.text.toPlainText() == ""
        editor.text.setPlainText("typed")
        assert editor.flush() is False  # refused with the reason, and kept
        assert "named pipe" in editor.warning.text() and editor.text.toPlainText() == "typed"
        editor.discard(folder / "a.txt")


def test_a_class_prompt_that_is_a_windows_device_name_makes_a_folder_windows_can_have(qtbot, tmp_path):
    from guitrainer.base.names import name_problem
    from guitrainer.ui.dataset.class_images_dialog import GenerateClassImagesDialog

    binding = ConfigBinding(TrainingConfig())
    binding.set("output.folder", str(tmp_path))
    dialog = GenerateClassImagesDialog(binding)
    qtbot.addWidget(dialog)
    for prompt in ("con", "AUX", "com1", "nul", "a photo of a dog", ""):
        dialog.prompt.setText(prompt)
        name = Path(dialog.folder.text()).name
        assert not name_problem(name), (prompt, name, name_problem(name))
    dialog.prompt.setText("con")
    assert Path(dialog.folder.text()).name == "_con"


def test_a_hand_over_message_without_end_is_dropped(qtbot, tmp_path):
    from PySide6.QtNetwork import QLocalSocket

    from guitrainer.ui.window.single_instance import MAX_MESSAGE_BYTES, InstanceServer

    name = f"guitrainer-test-big-{tmp_path.name}"
    server = InstanceServer(name)
    received: list[list[str]] = []
    server.files_received.connect(received.append)
    sock = QLocalSocket()
    sock.connectToServer(name)
    assert sock.waitForConnected(2000)
    chunk = b"x" * (256 << 10)
    for _ in range(MAX_MESSAGE_BYTES // len(chunk) + 2):  # never a newline: a reader waiting for one reads forever
        sock.write(chunk)
        sock.waitForBytesWritten(2000)
        qtbot.wait(20)
    qtbot.waitUntil(lambda: sock.state() == QLocalSocket.LocalSocketState.UnconnectedState, timeout=5000)
    assert received == []
