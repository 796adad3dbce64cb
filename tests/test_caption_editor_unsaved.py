"""Issue 27 #1, #4, #5: a typed caption is never lost.

* #1: whatever way the app ends — Ctrl+Q, the window's close, a session logout, ``aboutToQuit``, a second
  launch handing over a preset — the caption typed a moment before is on disk (the autosave waits 500 ms).
* #4: a caption file another program changed while the user typed is never replaced unasked: keep mine, take
  theirs, or show both.
* #5: text whose save failed (a read-only caption file) stays, marked unsaved, across image changes, until it is
  saved or discarded; quitting with such text asks.

Input is sent as a user sends it: key presses into the caption box, clicks on the question's buttons, Ctrl+Q.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractButton, QApplication, QMessageBox

from guitrainer.base import paths
from guitrainer.base.fileio import WriteError
from guitrainer.ui.dataset import caption_editor
from guitrainer.ui.dataset.caption_editor import AUTOSAVE_MS


def make_set(folder: Path, captions: dict[str, str | None]) -> Path:
    folder.mkdir(parents=True)
    for i, (name, caption) in enumerate(captions.items()):
        Image.new("RGB", (96, 96), (40 * i, 120, 200)).save(folder / name)
        if caption is not None:
            (folder / name).with_suffix(".txt").write_text(caption, encoding="utf-8")
    return folder


def load(qtbot, page, folder: Path, count: int) -> None:
    page.add_paths([folder])
    qtbot.waitUntil(lambda: len(page.items) == count and not page.is_loading(), timeout=10000)


def pick(page, name: str) -> None:
    """Click the thumbnail called ``name`` in the grid."""
    grid = page.grid
    for row in range(page.proxy.rowCount()):
        index = page.proxy.index(row, 0)
        if index.data() == name:
            grid.scrollTo(index)
            QTest.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                             grid.visualRect(index).center())
            break
    assert page.editor.item is not None and page.editor.item.name == name


def type_at_end(page, text: str) -> None:
    box = page.editor.text
    QTest.mouseClick(box.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, box.viewport().rect().center())
    QTest.keyClick(box, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClicks(box, text)


def button(box: QMessageBox, text: str) -> QAbstractButton:
    found = [b for b in box.buttons() if b.text() == text]
    assert found, [b.text() for b in box.buttons()]
    return found[0]


def press_ctrl_q(window) -> None:
    """Ctrl+Q as typed in the caption box (the File menu's Quit shortcut)."""
    QTest.keyClick(window.dataset_page.editor.text, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)


def read_only(monkeypatch, path: Path) -> None:
    """Writing ``path`` fails as on a read-only caption file (the tests run as root, whom chmod does not stop)."""
    real = caption_editor.atomic_write_bytes

    def refuse(target, data):  # noqa: ANN001, ANN202
        if Path(target) == path:
            raise WriteError(errno.EACCES, f"No permission to write {path}. Choose a folder you can write to, then save again.")
        return real(target, data)

    monkeypatch.setattr(caption_editor, "atomic_write_bytes", refuse)


@pytest.fixture
def shown(window, qtbot, tmp_path):
    """The main window with a folder of three images (a and b captioned), a.png picked in the grid."""
    folder = make_set(tmp_path / "1_set", {"a.png": "red, circle", "b.png": "blue, square", "c.png": None})
    load(qtbot, window.dataset_page, folder, 3)
    pick(window.dataset_page, "a.png")
    return folder


# --------------------------------------------------------------------------- #1: every way out saves


def test_ctrl_q_right_after_typing_saves_the_caption(window, qtbot, shown):
    type_at_end(window.dataset_page, ", shiny")
    press_ctrl_q(window)  # well within the 500 ms autosave delay
    assert not window.isVisible()
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"


def test_the_window_managers_close_right_after_typing_saves_the_caption(window, qtbot, shown):
    type_at_end(window.dataset_page, ", shiny")
    event = QCloseEvent()
    QApplication.sendEvent(window, event)  # what the close button / Alt+F4 delivers
    assert event.isAccepted()
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"


class FakeSessionManager:
    """What ``commitDataRequest`` hands over (QSessionManager cannot be made outside a session)."""

    def __init__(self, interaction: bool) -> None:
        self.interaction = interaction
        self.cancelled = self.released = False

    def allowsInteraction(self) -> bool:  # noqa: N802 - Qt's name
        return self.interaction

    def cancel(self) -> None:
        self.cancelled = True

    def release(self) -> None:
        self.released = True


def test_a_logout_saves_the_caption_and_the_workspace(window, qtbot, shown, tmp_path):
    type_at_end(window.dataset_page, ", shiny")
    manager = FakeSessionManager(interaction=False)
    window.commit_data(manager)
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"
    assert (tmp_path / "workspace.toml").is_file() and not manager.cancelled


def test_about_to_quit_saves_the_caption(window, qtbot, shown):
    type_at_end(window.dataset_page, ", shiny")
    QApplication.instance().aboutToQuit.emit()  # as app.quit() (Ctrl+C in the terminal) does, closing no window
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"


def test_a_preset_handed_over_by_a_second_launch_saves_the_caption_first(window, qtbot, shown, tmp_path):
    from guitrainer.ui.window.single_instance import InstanceServer, send_to_running

    name = f"guitrainer-test-{tmp_path.name}"
    server = InstanceServer(name)
    server.files_received.connect(window.receive_files)
    preset = tmp_path / "other.toml"
    preset.write_text('[preset]\nname = "Handed over"\n[network]\nrank = 4\n', encoding="utf-8")
    type_at_end(window.dataset_page, ", shiny")
    with qtbot.waitSignal(server.files_received, timeout=3000):
        assert send_to_running(name, [str(preset)])
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"
    assert window.binding.config.network.rank == 4


# --------------------------------------------------------------------------- #4: a change from outside is asked about


def open_box(parent, name: str) -> QMessageBox | None:
    """The question called ``name`` open under ``parent``, if any."""
    return next((b for b in parent.findChildren(QMessageBox, name) if b.isVisible()), None)


def wait_conflict(qtbot, page) -> QMessageBox:
    qtbot.waitUntil(lambda: open_box(page, "caption_conflict_box") is not None, timeout=3000)
    return open_box(page, "caption_conflict_box")


def test_an_outside_change_is_asked_about_and_keep_mine_writes_mine(window, qtbot, shown):
    page = window.dataset_page
    type_at_end(page, ", shiny")
    (shown / "a.txt").write_text("red, circle, from another program", encoding="utf-8")
    box = wait_conflict(qtbot, page)  # the autosave found the file changed: it asks instead of writing
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, from another program"
    assert "another program" in box.text() and "from another program" in box.informativeText()
    assert "red, circle, shiny" in box.informativeText()
    button(box, "Keep mine").click()
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"
    assert page.editor.state.property("state") == "saved"
    page.editor.undo()  # their version comes back with Ctrl+Z
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, from another program"


def test_take_theirs_shows_the_file_and_writes_nothing(window, qtbot, shown):
    page = window.dataset_page
    type_at_end(page, ", shiny")
    (shown / "a.txt").write_text("theirs", encoding="utf-8")
    button(wait_conflict(qtbot, page), "Take theirs").click()
    assert page.editor.text.toPlainText() == "theirs" and not page.editor.dirty
    assert (shown / "a.txt").read_text(encoding="utf-8") == "theirs"
    assert page.items[0].caption == "theirs"


def test_show_both_puts_both_in_the_box_and_saves_once_edited(window, qtbot, shown):
    page = window.dataset_page
    type_at_end(page, ", shiny")
    (shown / "a.txt").write_text("theirs", encoding="utf-8")
    button(wait_conflict(qtbot, page), "Show both").click()
    assert page.editor.text.toPlainText() == "red, circle, shiny\ntheirs"
    assert page.editor.dirty and page.editor.state.property("state") == "unsaved"
    assert page.editor.warning.isVisible() and "Both versions" in page.editor.warning.text()
    assert (shown / "a.txt").read_text(encoding="utf-8") == "theirs"  # nothing written yet
    QTest.keyClick(page.editor.text, Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClick(page.editor.text, Qt.Key.Key_Down, Qt.KeyboardModifier.ShiftModifier)
    QTest.keyClick(page.editor.text, Qt.Key.Key_Backspace)  # the user keeps theirs only
    qtbot.waitUntil(lambda: not page.editor.dirty, timeout=AUTOSAVE_MS * 4)
    assert (shown / "a.txt").read_text(encoding="utf-8") == "theirs"
    assert not page.editor.warning.isVisible()


def test_closing_with_an_outside_change_asks_then_closes(window, qtbot, shown):
    page = window.dataset_page
    type_at_end(page, ", shiny")
    (shown / "a.txt").write_text("theirs", encoding="utf-8")
    press_ctrl_q(window)
    assert window.isVisible()  # the question stops the close
    box = wait_conflict(qtbot, page)
    assert (shown / "a.txt").read_text(encoding="utf-8") == "theirs"
    button(box, "Keep mine").click()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=3000)  # the close goes on once answered
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"


def test_an_unchanged_file_touched_by_another_program_is_no_conflict(window, qtbot, shown):
    import os

    page = window.dataset_page
    type_at_end(page, ", shiny")
    os.utime(shown / "a.txt", (1, 1))  # a new time, the same bytes
    qtbot.waitUntil(lambda: not page.editor.dirty, timeout=AUTOSAVE_MS * 4)
    assert open_box(page, "caption_conflict_box") is None
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"


# --------------------------------------------------------------------------- #5: a failed save keeps the text


def test_text_whose_save_failed_survives_switching_images(window, qtbot, shown, monkeypatch):
    page = window.dataset_page
    read_only(monkeypatch, shown / "a.txt")
    type_at_end(page, ", shiny")
    qtbot.waitUntil(lambda: page.editor.state.property("state") == "error", timeout=AUTOSAVE_MS * 4)
    pick(page, "b.png")  # switching tries again, fails, and keeps the text
    assert page.editor.text.toPlainText() == "blue, square"
    pick(page, "a.png")
    assert page.editor.text.toPlainText() == "red, circle, shiny"
    assert page.editor.dirty and "Not saved" in page.editor.state.text()
    assert "No permission" in page.editor.warning.text()
    assert "a.png" in page.last_status and "kept" in page.last_status
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle"

    monkeypatch.undo()  # the file can be written again: the next chance saves it
    pick(page, "b.png")
    assert (shown / "a.txt").read_text(encoding="utf-8") == "red, circle, shiny"
    assert not page.editor.unsaved()


def test_quitting_with_text_that_cannot_be_saved_asks(window, qtbot, shown, monkeypatch):
    page = window.dataset_page
    read_only(monkeypatch, shown / "a.txt")
    type_at_end(page, ", shiny")
    pick(page, "b.png")  # the failed text is held for a.png, not shown
    press_ctrl_q(window)
    assert window.isVisible()
    box = open_box(window, "captions_unsaved_box")
    assert box is not None and "a.png" in box.text()
    button(box, "Cancel").click()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
    assert window.isVisible() and page.editor.unsaved()  # still there, still unsaved

    press_ctrl_q(window)
    button(open_box(window, "captions_unsaved_box"), "Keep them in a file and quit").click()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=3000)
    rescued = sorted(paths.user_data_dir().glob("unsaved_captions_*.txt"), key=lambda p: p.stat().st_mtime)
    assert rescued and any("red, circle, shiny" in p.read_text(encoding="utf-8") for p in rescued)
    assert str(shown / "a.txt") in rescued[-1].read_text(encoding="utf-8")


def test_discarding_unsaved_text_asks_and_shows_the_file(window, qtbot, shown, monkeypatch):
    page = window.dataset_page
    read_only(monkeypatch, shown / "a.txt")
    type_at_end(page, ", shiny")
    qtbot.waitUntil(lambda: page.editor.discard_button.isVisible(), timeout=AUTOSAVE_MS * 4)
    QTest.mouseClick(page.editor.discard_button, Qt.MouseButton.LeftButton)
    box = open_box(page, "caption_discard_box")
    assert box is not None
    button(box, "Discard my text").click()
    assert page.editor.text.toPlainText() == "red, circle" and not page.editor.dirty
    assert not page.editor.unsaved()


def test_undo_never_replaces_a_change_another_program_made_since(window, qtbot, shown):
    """The same class as #4: Ctrl+Z restored the old bytes over whatever another program had written since."""
    page = window.dataset_page
    type_at_end(page, ", shiny")
    qtbot.waitUntil(lambda: not page.editor.dirty, timeout=AUTOSAVE_MS * 4)
    (shown / "a.txt").write_text("from another program", encoding="utf-8")
    index = page.undo_stack.index()
    QTest.keyClick(page.editor.text, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: page.undo_stack.index() == index, timeout=3000)  # stepped back: nothing undone
    assert (shown / "a.txt").read_text(encoding="utf-8") == "from another program"
    assert "changed by another program" in page.last_status and page.last_status.startswith("Undo failed")
    assert page.editor.text.toPlainText() == "from another program"  # the box shows the file as it is now
