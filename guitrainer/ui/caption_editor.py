"""Caption editor: the selected image large, its caption beside it, autosaved and undoable.

Every saved change is a :class:`CaptionEditCommand` on the page's QUndoStack (one per autosave, one
per bulk tag operation), holding the old and new bytes of each caption file, so undo restores the
files byte for byte. A caption that is not UTF-8 is never written unless the user types in it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QImage, QKeyEvent, QKeySequence, QPixmap, QUndoCommand, QUndoStack
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.core.dataset import CaptionChange, CaptionEdit, DatasetItem, Flag, write_caption
from guitrainer.ui.thumbnails import ThumbnailLoader

log = logging.getLogger(__name__)

AUTOSAVE_MS = 500
PREVIEW_SIZE = 768


class CaptionEditCommand(QUndoCommand):
    """An already-applied CaptionEdit: undo restores the old bytes, redo writes the new ones."""

    def __init__(self, edit: CaptionEdit, notify: Callable[[list[Path]], None], on_error: Callable[[str], None]):
        super().__init__(edit.description)
        self.edit = edit
        self._notify = notify
        self._on_error = on_error
        self._skip_first_redo = True

    def _paths(self) -> list[Path]:
        return [ch.caption_path for ch in self.edit.changes]

    def redo(self) -> None:
        if self._skip_first_redo:
            self._skip_first_redo = False
            return
        try:
            self.edit.apply()
        except OSError as e:
            self._on_error(f"Redo failed: {e}")
        self._notify(self._paths())

    def undo(self) -> None:
        try:
            self.edit.revert()
        except OSError as e:
            self._on_error(f"Undo failed: {e}")
        self._notify(self._paths())


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
    """The image, scaled to fit, kept upright; repaints on resize."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._image = QImage()
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumSize(220, 220)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setStyleSheet("background: palette(base); border: 1px solid palette(mid); border-radius: 6px;")

    def set_image(self, img: QImage | None, placeholder: str = "") -> None:
        self._image = img if img is not None else QImage()
        if self._image.isNull():
            self.setPixmap(QPixmap())
            self.setText(placeholder)
        else:
            self.setText("")
            self._rescale()

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self._rescale()

    def _rescale(self) -> None:
        if self._image.isNull():
            return
        target = self.size() - QSize(12, 12)
        pm = QPixmap.fromImage(self._image).scaled(
            target, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
        )
        self.setPixmap(pm)

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
        notify: Callable[[list[Path]], None],
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.undo_stack = undo_stack
        self.loader = loader
        self._notify = notify
        self._item: DatasetItem | None = None
        self._loading = False
        self._dirty = False

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
        self.text.setMinimumHeight(80)
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

    def set_item(self, item: DatasetItem | None) -> None:
        """Show another image (saving the current caption first)."""
        if item is self._item and item is not None:
            return
        self.flush()
        self._item = item
        self.text.setEnabled(item is not None)
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
        self._set_text(self._item.caption)
        c = self.text.textCursor()
        c.setPosition(min(cursor, len(self._item.caption)))
        self.text.setTextCursor(c)
        self._show_encoding_warning()
        self._set_state("saved" if self._item.caption_exists else "new")

    def _show_encoding_warning(self) -> None:
        item = self._item
        if item is not None and not item.caption_utf8:
            self.warning.setText(
                f"⚠ {item.caption_path.name} is not UTF-8 text. Unreadable bytes are shown as \ufffd. "
                "The file is left exactly as it is unless you edit this caption (then it is saved as UTF-8)."
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
        """Save now if there are unsaved changes. False when the write failed (old file kept)."""
        self._timer.stop()
        item = self._item
        if item is None or not self._dirty:
            return True
        new_text = self.text.toPlainText()
        path = item.caption_path
        try:
            old = path.read_bytes()
        except FileNotFoundError:
            old = None
        except OSError as e:
            return self._fail(f"Could not read {path.name}: {e}")
        new = new_text.encode("utf-8")
        if old == new:
            self._dirty = False
            self._set_state("saved")
            return True
        try:
            write_caption(path, new_text)
        except OSError as e:
            return self._fail(str(e))
        self._dirty = False
        edit = CaptionEdit(f"Edit caption of {item.name}", [CaptionChange(path, old, new)])
        self.undo_stack.push(CaptionEditCommand(edit, self._notify, self.status_message.emit))
        item.caption, item.caption_exists, item.caption_utf8 = new_text, True, True
        item.flags.discard(Flag.CAPTION_NOT_UTF8)
        self._show_encoding_warning()
        self._set_state("saved")
        self.caption_saved.emit(item)
        return True

    def _fail(self, message: str) -> bool:
        log.warning("caption not saved: %s", message)
        self._set_state("error")
        self.save_failed.emit(message)
        self.status_message.emit(f"Caption not saved: {message}")
        return False

    def undo(self) -> None:
        self.flush()
        self.undo_stack.undo()

    def redo(self) -> None:
        self.flush()
        self.undo_stack.redo()

    def focus_caption(self) -> None:
        self.text.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.text.moveCursor(self.text.textCursor().MoveOperation.End)


def notify_noop(_paths: list[Path]) -> None:
    """A ``notify`` that does nothing (for editors used alone)."""

