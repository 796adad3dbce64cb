"""Issue 15 #2: captions that are not UTF-8 survive an edit typed with real keys: every character the
user did not change stays, in the file's own encoding; a character it cannot hold is asked about."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from guitrainer.ui.dataset.caption_editor import AUTOSAVE_MS
from guitrainer.ui.dataset.page import DatasetPage

ORIGINAL = "café, naïve smile, Ærø"


@pytest.fixture
def page(shown_dataset_page):
    return shown_dataset_page


def load_one(qtbot, page: DatasetPage, folder: Path, raw: bytes) -> Path:
    folder.mkdir(parents=True)
    Image.new("RGB", (640, 640), (90, 120, 200)).save(folder / "a.png")
    (folder / "a.txt").write_bytes(raw)
    page.add_paths([folder])
    qtbot.waitUntil(lambda: len(page.items) == 1 and not page.is_loading(), timeout=10000)
    page.select_rows([0])
    return folder / "a.txt"


def key_text(widget, text: str) -> None:
    """Key events carrying ``text`` (QTest.keyClicks only takes ASCII): as an input method delivers CJK."""
    for ch in text:
        for kind in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease):
            QApplication.sendEvent(widget, QKeyEvent(kind, 0, Qt.KeyboardModifier.NoModifier, ch))


def type_at_end(page: DatasetPage, text: str) -> None:
    box = page.editor.text
    QTest.mouseClick(box.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, box.viewport().rect().center())
    QTest.keyClick(box, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    key_text(box, text)


@pytest.mark.parametrize(
    "name, raw, codec, bom",
    [
        ("latin-1", ORIGINAL.encode("latin-1"), "cp1252", b""),
        ("cp1252", (ORIGINAL + " “quoted”").encode("cp1252"), "cp1252", b""),
        ("utf-16 BOM", codecs.BOM_UTF16_LE + ORIGINAL.encode("utf-16-le"), "utf-16-le", codecs.BOM_UTF16_LE),
        ("utf-8 BOM", codecs.BOM_UTF8 + ORIGINAL.encode("utf-8"), "utf-8", codecs.BOM_UTF8),
    ],
)
def test_an_edit_keeps_the_encoding_and_every_other_character(qtbot, page, tmp_path, name, raw, codec, bom):
    path = load_one(qtbot, page, tmp_path / "set", raw)
    shown = page.editor.text.toPlainText()
    assert shown == raw[len(bom) :].decode(codec) and "\ufffd" not in shown  # the accents, as written
    type_at_end(page, ", blue eyes")
    qtbot.wait(AUTOSAVE_MS + 300)
    page.editor.flush()
    assert path.read_bytes() == bom + (shown + ", blue eyes").encode(codec)
    assert page.items[0].caption == shown + ", blue eyes"
    page.editor.undo()  # the undo restores the original bytes
    assert path.read_bytes() == raw


def test_a_character_the_encoding_cannot_hold_is_asked_about(qtbot, page, tmp_path):
    raw = ORIGINAL.encode("cp1252")
    path = load_one(qtbot, page, tmp_path / "set", raw)
    type_at_end(page, ", 日本")
    qtbot.waitUntil(lambda: page.editor.convert_box is not None and page.editor.convert_box.isVisible(), timeout=3000)
    box = page.editor.convert_box
    assert "日本" in box.text() and "Windows-1252" in box.text()
    assert path.read_bytes() == raw  # nothing written before the answer
    keep = next(b for b in box.buttons() if b.text().startswith("Keep"))
    keep.click()
    qtbot.wait(AUTOSAVE_MS + 300)
    assert path.read_bytes() == raw and "Not saved" in page.editor.state.text()
    # the user asks again by typing; this time converts
    QTest.keyClicks(page.editor.text, "!")
    page.editor._declined.clear()  # noqa: SLF001 - as after reopening the image
    page.editor.flush()
    box = page.editor.convert_box
    assert box is not None
    next(b for b in box.buttons() if b.text() == "Save as UTF-8").click()
    assert path.read_bytes() == (ORIGINAL + ", 日本!").encode("utf-8")
