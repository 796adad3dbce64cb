"""Caption editor: the selected image large, its caption beside it, autosaved and undoable.

Every saved change is a :class:`~guitrainer.ui.dataset.caption_jobs.CaptionEditCommand` on the page's
QUndoStack (one per autosave, one per bulk tag operation), holding the old and new bytes of each
caption file, so undo restores the files byte for byte. A caption in a legacy encoding (Windows-1252,
Latin-1, UTF-16, a BOM) is shown as written and saved back in that encoding
(:mod:`guitrainer.core.dataset.captions`); a typed character that encoding cannot hold is asked about
before the file is converted to UTF-8. Nothing writes U+FFFD.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QImage, QKeyEvent, QKeySequence, QPainter, QPixmap, QUndoStack
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.fileio import atomic_write_bytes
from guitrainer.core.dataset.captions import (
    CaptionEncodingError,
    decode_caption,
    encode_caption,
    encoding_label,
)
from guitrainer.core.dataset.scan import CaptionChange, CaptionEdit, DatasetItem, Flag
from guitrainer.ui.dataset.caption_jobs import (  # noqa: F401 - the page imports them from here
    BULK_MIN_CAPTIONS,
    CaptionEditCommand,
    CaptionJobRunner,
    Notify,
    Report,
)
from guitrainer.ui.dataset.thumbnails import ThumbnailLoader
from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.messages import Button, MessageBox

log = logging.getLogger(__name__)

AUTOSAVE_MS = 500
PREVIEW_SIZE = 768
class CaptionTextEdit(QPlainTextEdit):
    """Plain-text caption box whose Ctrl+Z / Ctrl+Shift+Z go to the page's undo stack."""

    undo_requested = Signal()
    redo_requested = Signal()

    def event(self, e: QEvent) -> bool:
        if (
            e.type() == QEvent.Type.ShortcutOverride
            and isinstance(e, QKeyEvent)
            and (e.matches(QKeySequence.StandardKey.Undo) or e.matches(QKeySequence.StandardKey.Redo))
        ):
            e.accept()
            return True
        return super().event(e)

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.matches(QKeySequence.StandardKey.Undo):
            self.undo_requested.emit()
            return
        if e.matches(QKeySequence.StandardKey.Redo):
            self.redo_requested.emit()
            return
        super().keyPressEvent(e)


class _Preview(QLabel):
    """The image, scaled to fit, kept upright.

    The image is painted, not set as the label's pixmap: a pixmap sized to the label changes the label's
    size hints, which re-lays the page out, which resizes the label again: a loop that kept the GUI
    thread (and, through the GIL, every worker thread) busy for as long as an image was shown.
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._image = QImage()
        self._scaled = QPixmap()
        self._scaled_for = QSize()
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumSize(160, 110)  # small: the page fits 1366×768 without scrolling
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setStyleSheet("background: palette(base); border: 1px solid palette(mid); border-radius: 6px;")

    def set_image(self, img: QImage | None, placeholder: str = "") -> None:
        self._image = img if img is not None else QImage()
        self._scaled = QPixmap()
        self.setText(placeholder if self._image.isNull() else "")
        self.update()

    def has_image(self) -> bool:
        return not self._image.isNull()

    def scaled_pixmap(self) -> QPixmap:
        """The image scaled to fit the label as it is now (cached until the size or image changes)."""
        target = self.size() - QSize(12, 12)
        if self._image.isNull() or target.isEmpty():
            return QPixmap()
        if self._scaled.isNull() or self._scaled_for != target:
            self._scaled = QPixmap.fromImage(self._image).scaled(
                target, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
            )
            self._scaled_for = target
        return self._scaled

    def paintEvent(self, e) -> None:
        super().paintEvent(e)  # the frame, and the placeholder text when there is no image
        pm = self.scaled_pixmap()
        if pm.isNull():
            return
        painter = QPainter(self)
        painter.drawPixmap((self.width() - pm.width()) // 2, (self.height() - pm.height()) // 2, pm)
        painter.end()

    def sizeHint(self) -> QSize:
        return QSize(420, 360)


class CaptionEditor(QWidget):
    """Shows one item; saves its caption 500 ms after the last keystroke (atomic write)."""

    caption_saved = Signal(object)  # DatasetItem
    save_failed = Signal(str)
    status_message = Signal(str)
    next_requested = Signal()
    previous_requested = Signal()

    def __init__(
        self,
        undo_stack: QUndoStack,
        loader: ThumbnailLoader,
        notify: Notify,
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.undo_stack = undo_stack
        self.loader = loader
        self._notify = notify
        self._item: DatasetItem | None = None
        self._encoding: str = "utf-8"  # the codec of the current item's caption file (core.captions)
        self._declined: set[Path] = set()  # files whose owner said "keep the encoding" to a conversion
        #: the open "save as UTF-8?" question, if any (non-modal; tests answer it)
        self.convert_box: MessageBox | None = None
        self._loading = False
        self._dirty = False
        self._locked = False
        self._refocus = False
        #: set by the page: the autosave commands then undo / redo in line with the bulk edits
        self.runner: CaptionJobRunner | None = None

        self.preview = _Preview(self)
        self.info = QLabel(self)
        self.info.setWordWrap(True)
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.warning = QLabel(self)
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet("color: #b36b00;")
        self.warning.hide()
        self.text = CaptionTextEdit(self)
        self.text.setObjectName("caption_text")
        self.text.setPlaceholderText("No caption yet. Type tags separated by commas, or a sentence.")
        self.text.setUndoRedoEnabled(False)
        self.text.setTabChangesFocus(True)
        self.text.setMinimumHeight(60)
        self.text.setMaximumHeight(150)
        self.state = QLabel(self)
        self.state.setObjectName("caption_state")
        self.prev_button = QToolButton(self)
        self.prev_button.setText("◀ Previous")
        self.prev_button.setToolTip("Previous image (Alt+Left)")
        self.next_button = QToolButton(self)
        self.next_button.setText("Next ▶")
        self.next_button.setToolTip("Next image (Alt+Right)")

        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.preview, 1)
        lay.addWidget(self.info)
        lay.addWidget(self.warning)
        caption_label = QLabel("<b>Caption</b> <span style='color:gray'>(Ctrl+E)</span>", self)
        caption_label.setBuddy(self.text)
        lay.addWidget(caption_label)
        lay.addWidget(self.text)
        row = QHBoxLayout()
        row.addWidget(self.state)
        row.addStretch(1)
        row.addWidget(self.prev_button)
        row.addWidget(self.next_button)
        lay.addLayout(row)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(AUTOSAVE_MS)
        self._timer.timeout.connect(self.flush)
        self.text.textChanged.connect(self._on_text_changed)
        self.text.undo_requested.connect(self.undo)
        self.text.redo_requested.connect(self.redo)
        self.prev_button.clicked.connect(self.previous_requested)
        self.next_button.clicked.connect(self.next_requested)
        loader.ready.connect(self._on_thumb)
        self.set_item(None)

    # ------------------------------------------------------------------ state
    @property
    def item(self) -> DatasetItem | None:
        return self._item

    @property
    def dirty(self) -> bool:
        """True while typed text is not yet on disk."""
        return self._dirty

    @property
    def locked(self) -> bool:
        return self._locked

    def set_locked(self, locked: bool) -> None:
        """While captions are written in the background, the caption box and undo / redo are disabled."""
        if locked == self._locked:
            return
        if locked:
            self.flush()
            self._refocus = self.text.hasFocus()
        self._locked = locked
        self.text.setEnabled(self._item is not None and not locked)
        if not locked and self._refocus and self.text.isEnabled():
            self.text.setFocus(Qt.FocusReason.OtherFocusReason)

    def set_item(self, item: DatasetItem | None) -> None:
        """Show another image (saving the current caption first)."""
        if item is self._item and item is not None:
            return
        self.flush()
        self._item = item
        self.text.setEnabled(item is not None and not self._locked)
        self.prev_button.setEnabled(item is not None)
        self.next_button.setEnabled(item is not None)
        if item is None:
            self.preview.set_image(None, "Select an image to see it large and edit its caption.")
            self.info.setText("")
            self.warning.hide()
            self._set_text("")
            self._set_state("")
            return
        flags = ", ".join(f.description for f in sorted(item.flags, key=lambda f: f.value) if f != Flag.CAPTION_NOT_UTF8)
        size = f"{item.width} × {item.height} px" if item.width else "size unknown"
        self.info.setText(f"<b>{item.name}</b> · {size} · repeats {item.repeats}" + (f"<br>⚠ {flags}" if flags else ""))
        self._read_encoding(item)
        self._show_encoding_warning()
        self._set_text(item.caption)
        self._set_state("saved" if item.caption_exists else "new")
        img = self.loader.get(str(item.image_path), PREVIEW_SIZE, disk=False)
        self.preview.set_image(img, "Loading…" if img is None else "")

    def reload(self) -> None:
        """The current item's caption changed on disk (undo, bulk edit): show it, keeping the cursor."""
        if self._item is None or self._dirty:
            return
        cursor = self.text.textCursor().position()
        self._read_encoding(self._item)
        self._set_text(self._item.caption)
        c = self.text.textCursor()
        c.setPosition(min(cursor, len(self._item.caption)))
        self.text.setTextCursor(c)
        self._show_encoding_warning()
        self._set_state("saved" if self._item.caption_exists else "new")

    def _read_encoding(self, item: DatasetItem) -> None:
        """Tell the caption file's encoding from its bytes; show its text as written (no U+FFFD)."""
        try:
            raw = item.caption_path.read_bytes()
        except OSError:  # no file yet (or unreadable: the save reports it)
            self._encoding = "utf-8"
            return
        read = decode_caption(raw)
        self._encoding = read.encoding
        if not read.was_utf8 and read.text != item.caption:
            item.caption = read.text  # the grid, the search and the summary see the real characters

    def _show_encoding_warning(self) -> None:
        item = self._item
        if item is not None and not _is_utf8(self._encoding):
            label = encoding_label(self._encoding)
            self.warning.setText(
                f"⚠ {item.caption_path.name} is {label} text, not UTF-8. It is shown as written and your edits are "
                f"saved in {label}, as the file is; a character {label} cannot hold is asked about first."
            )
            self.warning.show()
        else:
            self.warning.hide()

    def _set_text(self, text: str) -> None:
        self._loading = True
        try:
            self.text.setPlainText(text)
        finally:
            self._loading = False
        self._dirty = False

    def _set_state(self, state: str) -> None:
        labels = {
            "": "",
            "new": "<span style='color:gray'>No caption file yet</span>",
            "saved": "<span style='color:#3a9a5b'>✓ Saved</span>",
            "unsaved": "<span style='color:#c07800'>● Unsaved</span>",
            "error": "<span style='color:#c03030'>✗ Not saved</span>",
        }
        self.state.setText(labels[state])
        self.state.setProperty("state", state)

    def _on_text_changed(self) -> None:
        if self._loading or self._item is None:
            return
        self._dirty = True
        self._set_state("unsaved")
        self._timer.start()

    def _on_thumb(self, path: str, size: int) -> None:
        if size == PREVIEW_SIZE and self._item is not None and path == str(self._item.image_path):
            img = self.loader.get(path, PREVIEW_SIZE, disk=False)
            self.preview.set_image(img, "This image cannot be shown.")

    # ------------------------------------------------------------------ saving
    def flush(self) -> bool:
        """Save now if there are unsaved changes. False when not saved (the old file is kept)."""
        self._timer.stop()
        item = self._item
        if item is None or not self._dirty:
            return True
        new_text = self.text.toPlainText()
        if "\ufffd" in new_text:
            return self._fail("the caption holds \ufffd (a character lost elsewhere); replace it first")
        encoding = self._encoding
        try:
            encode_caption(new_text, encoding)
            bad: list[str] = []
        except CaptionEncodingError as e:
            bad = list(e.characters)
        if bad:
            if item.caption_path in self._declined:
                return self._fail(f"{''.join(bad)} cannot be saved in {encoding_label(encoding)}; take it out or convert")
            self._ask_convert(item, new_text, bad)
            return False
        return self._write(item, new_text, encoding)

    def _write(self, item: DatasetItem, new_text: str, encoding: str) -> bool:
        """Write ``new_text`` in ``encoding`` (atomically, one undo step). False when it failed."""
        path = item.caption_path
        try:
            old = path.read_bytes()
        except FileNotFoundError:
            old = None
        except OSError as e:
            return self._fail(f"Could not read {path.name}: {e}")
        new = encode_caption(new_text, encoding, path=path)
        if item is self._item:
            self._dirty = False
        if old == new:
            self._set_state("saved")
            return True
        try:
            atomic_write_bytes(path, new)
        except OSError as e:
            if item is self._item:
                self._dirty = True
            return self._fail(str(e))
        edit = CaptionEdit(f"Edit caption of {item.name}", [CaptionChange(path, old, new)])
        self.undo_stack.push(CaptionEditCommand(edit, self._notify, self.status_message.emit, self.runner))
        item.caption, item.caption_exists, item.caption_utf8 = new_text, True, _is_utf8(encoding)
        item.caption_encoding = encoding
        if _is_utf8(encoding):
            item.flags.discard(Flag.CAPTION_NOT_UTF8)
        if item is self._item:
            self._encoding = encoding
            self._show_encoding_warning()
            self._set_state("saved")
        self.caption_saved.emit(item)
        return True

    def _ask_convert(self, item: DatasetItem, new_text: str, bad: list[str]) -> None:
        """A typed character does not fit the file's encoding: ask before converting it to UTF-8."""
        self._set_state("unsaved")
        if self.convert_box is not None and self.convert_box.isVisible():
            self._pending = (item, new_text)  # the question stands; it saves the latest text
            return
        self._pending = (item, new_text)
        label = encoding_label(self._encoding)

        def answered(answer: str) -> None:
            pending_item, pending_text = self._pending
            if answer == "convert":
                self._declined.discard(pending_item.caption_path)
                self._write(pending_item, pending_text, "utf-8")
            else:
                self._declined.add(pending_item.caption_path)
                if pending_item is self._item:
                    self._set_state("error")
            self.convert_box = None

        self.convert_box = messages.ask(
            self,
            "Save the caption as UTF-8?",
            f"“{''.join(bad[:10])}” cannot be saved in {label}, the encoding of {item.caption_path.name}.",
            (Button("accept", "Save as UTF-8", "convert"), Button("reject", f"Keep {label}", "keep")),
            answered,
            info="Save this caption as UTF-8 (training reads both)? Or keep the file in "
            f"{label} and take those characters out; nothing is written until you choose.",
            default="convert",
            name="caption_convert_box",
        )

    def _fail(self, message: str) -> bool:
        log.warning("caption not saved: %s", message)
        self._set_state("error")
        self.save_failed.emit(message)
        self.status_message.emit(f"Caption not saved: {message}")
        return False

    def undo(self) -> None:
        if self._locked:  # captions are being written: undo waits until that is done
            return
        self.flush()
        self.undo_stack.undo()

    def redo(self) -> None:
        if self._locked:
            return
        self.flush()
        self.undo_stack.redo()

    def focus_caption(self) -> None:
        self.text.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.text.moveCursor(self.text.textCursor().MoveOperation.End)


def notify_noop(_paths: list[Path], _written: Mapping[Path, bytes | None] | None = None) -> None:
    """A ``notify`` that does nothing (for editors used alone)."""


def _is_utf8(encoding: str) -> bool:
    """UTF-8, with or without a byte-order mark (training reads both as they are)."""
    return encoding in ("utf-8", "utf-8-sig")
