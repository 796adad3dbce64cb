"""Caption editor: the selected image large, its caption beside it, autosaved and undoable.

Every saved change is a :class:`~guitrainer.ui.dataset.caption_jobs.CaptionEditCommand` on the page's
QUndoStack (one per autosave, one per bulk tag operation), holding the old and new bytes of each
caption file, so undo restores the files byte for byte. A caption in a legacy encoding (Windows-1252,
Latin-1, UTF-16, a BOM) is shown as written and saved back in that encoding
(:mod:`guitrainer.core.dataset.captions`); a typed character that encoding cannot hold is asked about
before the file is converted to UTF-8. Nothing writes U+FFFD.

Typed text is never lost (issue 27): a save that fails (a read-only file, a full disk) keeps the text, marked
unsaved, in the box or — once the user moves to another image — in a per-image :class:`HeldCaption`, until it is
saved (tried again at every chance) or discarded; a caption file another program changed since it was read
(:class:`~guitrainer.core.dataset.captions.CaptionStamp`) is never replaced unasked: keep mine, take theirs, or
show both. The main window calls :meth:`CaptionEditor.save_all` on every way out of the app.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from dataclasses import dataclass
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
from guitrainer.base.names import printable
from guitrainer.core.dataset.captions import (
    CaptionEncodingError,
    CaptionStamp,
    caption_bytes,
    decode_caption,
    encode_caption,
    encoding_label,
)
from guitrainer.core.dataset.scan import CaptionChange, CaptionEdit, DatasetItem, Flag, flag_descriptions
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


@dataclass
class HeldCaption:
    """Typed caption text that is not on disk: kept, marked unsaved, until it is saved or the user discards it.

    Attributes:
        item: the image whose caption it is.
        path: the caption file the text is for (the item's ``caption_path`` when it was typed).
        text: what the user typed.
        encoding: the codec it is to be saved in (the file's own, see :mod:`guitrainer.core.dataset.captions`).
        stamp: the caption file as it was when the text was started from it: a file that no longer matches was
            changed by another program meanwhile, and is asked about before it is replaced.
        problem: why the last try to save it did not write it ("" before any try failed).
    """

    item: DatasetItem
    path: Path
    text: str
    encoding: str
    stamp: CaptionStamp
    problem: str = ""


class CaptionEditor(QWidget):
    """Shows one item; saves its caption 500 ms after the last keystroke (atomic write), and at once when the
    image changes or the app asks (:meth:`flush`, :meth:`save_all`).

    Typed text is never dropped: a save that fails, or that waits for a question (a caption file another
    program changed meanwhile, a character its encoding cannot hold), keeps the text — in the box for the image
    shown, in :meth:`unsaved` for the others — until it is saved or the user discards it.
    """

    #: ``item.caption`` is what is on disk now (saved, or taken from the file after a question)
    caption_saved = Signal(object)  # DatasetItem
    save_failed = Signal(str)
    status_message = Signal(str)
    next_requested = Signal()
    previous_requested = Signal()
    #: a caption question (an outside change, an encoding) was answered: "mine", "theirs", "both", "convert", "keep"
    question_answered = Signal(str)

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
        self._stamp = CaptionStamp(False)  # the current item's caption file as it was read
        self._problem = ""  # why the current item's text could not be saved the last time
        self._note = ""  # a line about the text in the box ("both versions are in the box")
        self._held: dict[Path, HeldCaption] = {}  # unsaved text of the images not shown
        self._declined: set[Path] = set()  # files whose owner said "keep the encoding" to a conversion
        #: the open "save as UTF-8?" question, if any (non-modal; tests answer it)
        self.convert_box: MessageBox | None = None
        #: the open "changed by another program" question, if any
        self.conflict_box: MessageBox | None = None
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
        self.warning.setObjectName("caption_warning")
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
        self.discard_button = QToolButton(self)
        self.discard_button.setObjectName("caption_discard")
        self.discard_button.setText("Discard my text…")
        self.discard_button.setToolTip("Throw away the caption typed here and show the file as it is on disk (asks first).")
        self.discard_button.hide()
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
        row.addWidget(self.discard_button)
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
        self.discard_button.clicked.connect(self._ask_discard)
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
        """True while the text in the box is not on disk."""
        return self._dirty

    @property
    def locked(self) -> bool:
        return self._locked

    def unsaved(self) -> list[HeldCaption]:
        """Every typed caption not on disk: the one in the box (if unsaved), then the other images' ones."""
        out = [self._current()] if self._item is not None and self._dirty else []
        return out + list(self._held.values())

    def question_open(self) -> MessageBox | None:
        """The caption question waiting for an answer (an outside change, an encoding), if any."""
        for box in (self.conflict_box, self.convert_box):
            if box is not None and box.isVisible():
                return box
        return None

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
        """Show another image (saving the current caption first; text that cannot be saved is kept)."""
        if item is self._item and item is not None:
            return
        if self._item is not None and not self.flush():
            self._hold_current()
        self._item = item
        self.text.setEnabled(item is not None and not self._locked)
        self.prev_button.setEnabled(item is not None)
        self.next_button.setEnabled(item is not None)
        self._note = ""
        if item is None:
            self.preview.set_image(None, "Select an image to see it large and edit its caption.")
            self.info.setText("")
            self._problem = ""
            self._encoding = "utf-8"
            self._set_text("")
            self._show_warning()
            self._set_state("")
            return
        flags = "; ".join(flag_descriptions(item, leave_out=(Flag.CAPTION_NOT_UTF8,)))
        size = f"{item.width} × {item.height} px" if item.width else "size unknown"
        self.info.setText(
            f"<b>{html.escape(item.name)}</b> · {size} · repeats {item.repeats}"
            + (f"<br>⚠ {html.escape(flags)}" if flags else "")
        )
        held = self._held.pop(item.caption_path, None)
        if held is not None:
            self._show_held(item, held)
        else:
            self._problem = ""
            self._read_file(item)
            self._set_text(item.caption)
            self._show_warning()
            self._set_state("saved" if item.caption_exists else "new")
        img = self.loader.get(str(item.image_path), PREVIEW_SIZE, disk=False)
        self.preview.set_image(img, "Loading…" if img is None else "")

    def reload(self) -> None:
        """The current item's caption changed on disk (undo, bulk edit): show it, keeping the cursor."""
        if self._item is None or self._dirty:
            return
        cursor = self.text.textCursor().position()
        self._read_file(self._item)
        self._set_text(self._item.caption)
        c = self.text.textCursor()
        c.setPosition(min(cursor, len(self._item.caption)))
        self.text.setTextCursor(c)
        self._show_warning()
        self._set_state("saved" if self._item.caption_exists else "new")

    def forget(self, items: list[DatasetItem]) -> None:
        """These images' files are gone (moved to the trash): their unsaved text must not bring a caption back."""
        paths = {it.caption_path for it in items}
        for path in paths:
            self._held.pop(path, None)
        if self._item is not None and self._item.caption_path in paths:
            self._dirty = False
            self._timer.stop()

    def _read_file(self, item: DatasetItem) -> None:
        """Read the caption file: its encoding (its text shown as written, no U+FFFD) and its stamp."""
        try:
            self._stamp, raw = CaptionStamp.read(item.caption_path)
        except OSError:  # unreadable (a folder, a pipe): the save reports it
            self._stamp, raw = CaptionStamp(False), None
        if raw is None:
            self._encoding = "utf-8"
            return
        read = decode_caption(raw)
        self._encoding = read.encoding
        if not read.was_utf8 and read.text != item.caption:
            item.caption = read.text  # the grid, the search and the summary see the real characters

    def _show_held(self, item: DatasetItem, held: HeldCaption) -> None:
        """Back to an image whose typed text is not on disk: the text, marked unsaved, saved at the next chance."""
        held.item = item
        self._encoding, self._stamp, self._problem = held.encoding, held.stamp, held.problem
        self._set_text(held.text)
        self._dirty = True
        self._show_warning()
        self._set_state("error" if held.problem else "unsaved")

    def _hold_current(self) -> None:
        """The image changes while its text is not on disk: keep the text for it."""
        held = self._current()
        self._held[held.path] = held
        self._timer.stop()
        self._dirty = False
        why = f" ({held.problem})" if held.problem else ""
        self.status_message.emit(
            f"The caption of {held.item.name} is not saved yet{why}: your text is kept and saved as soon as it can be "
            "(when you go back to it, type, or quit)."
        )

    def _current(self) -> HeldCaption:
        """The text in the box, as a held caption of the current item."""
        assert self._item is not None
        item = self._item
        return HeldCaption(item, item.caption_path, self.text.toPlainText(), self._encoding, self._stamp, self._problem)

    def _entry(self, path: Path) -> HeldCaption | None:
        """The unsaved text of the caption file ``path``: the box's when it is shown, else the held one."""
        if self._item is not None and self._item.caption_path == path:
            return self._current() if self._dirty else None
        return self._held.get(path)

    def _update_entry(self, entry: HeldCaption) -> None:
        """``entry`` (changed: its text, stamp or problem) is the unsaved text of its image now."""
        if self._item is not None and self._item.caption_path == entry.path:
            self._encoding, self._stamp, self._problem = entry.encoding, entry.stamp, entry.problem
            if self.text.toPlainText() != entry.text:
                self._set_text(entry.text)
            self._dirty = True
            self._show_warning()
            self._set_state("error" if entry.problem else "unsaved")
        else:
            self._held[entry.path] = entry

    def _show_warning(self) -> None:
        """The orange lines over the box: the file's encoding, why the text is not saved, what the box holds."""
        item = self._item
        lines = []
        if item is not None and not _is_utf8(self._encoding):
            label = encoding_label(self._encoding)
            lines.append(
                f"⚠ {item.caption_path.name} is {label} text, not UTF-8. It is shown as written and your edits are "
                f"saved in {label}, as the file is; a character {label} cannot hold is asked about first."
            )
        if item is not None and self._problem and self._dirty:
            lines.append(
                f"⚠ Your text is not saved: {self._problem}. It stays here until it can be saved (tried again as you "
                "type, when you move to another image and when you quit) or you discard it."
            )
        if item is not None and self._note:
            lines.append(f"⚠ {self._note}")
        self.warning.setText("\n".join(lines))
        self.warning.setVisible(bool(lines))
        self.discard_button.setVisible(item is not None and self._dirty and bool(self._problem or self._note))

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
        if not self._problem:
            self._set_state("unsaved")
        self._timer.start()

    def _on_thumb(self, path: str, size: int) -> None:
        if size == PREVIEW_SIZE and self._item is not None and path == str(self._item.image_path):
            img = self.loader.get(path, PREVIEW_SIZE, disk=False)
            self.preview.set_image(img, "This image cannot be shown.")

    # ------------------------------------------------------------------ saving
    def flush(self) -> bool:
        """Save the text in the box now if it is not on disk. False when it is not saved (the old file is kept,
        the text stays in the box: a failed write, or a question waiting for its answer)."""
        self._timer.stop()
        if self._item is None or not self._dirty:
            return True
        if self.question_open() is not None:  # the question stands; its answer saves the latest text
            return False
        return self._save(self._current())

    def save_all(self, *, ask: bool = True) -> list[HeldCaption]:
        """Try to save every unsaved caption (the box's and the other images'); returns those still not on disk.

        A caption that needs a question (an outside change, an encoding) opens it and stays in the list; with
        ``ask`` False (the app is ending and cannot wait for an answer) it is kept unsaved instead, never written
        over a file another program changed."""
        self._timer.stop()
        entries = ([self._current()] if self._item is not None and self._dirty else []) + list(self._held.values())
        for entry in entries:
            if self.question_open() is not None:
                break
            self._save(entry, ask=ask)
        return self.unsaved()

    def discard(self, path: Path) -> None:
        """Drop the unsaved text of the caption file ``path``: the file on disk is what the image has."""
        self._held.pop(path, None)
        item = self._item
        if item is not None and item.caption_path == path:
            self._timer.stop()
            self._dirty = False
            self._problem = self._note = ""
            item.reload_caption()
            self.reload()
            self.caption_saved.emit(item)

    def _save(self, entry: HeldCaption, *, encoding: str = "", overwrite: bool = False, ask: bool = True) -> bool:
        """Write ``entry`` in its encoding (or ``encoding``), atomically, as one undo step. False when not written:
        a failure (kept, with the reason) or a question now open (with ``ask`` False: kept, with the reason).
        ``overwrite``: the user chose to replace a file another program changed."""
        item, path, text = entry.item, entry.path, entry.text
        encoding = encoding or entry.encoding

        if "\ufffd" in text:
            return self._fail(entry, "the caption holds \ufffd (a character lost elsewhere); replace it first")
        try:
            new = encode_caption(text, encoding, path=path)
        except CaptionEncodingError as e:
            if path in self._declined or not ask:
                return self._fail(entry, f"{e.characters} cannot be saved in {encoding_label(encoding)}; take it out or convert")
            self._ask_convert(entry, list(e.characters))
            return False
        try:
            old = caption_bytes(path)
        except OSError as e:
            return self._fail(entry, f"{path.name} cannot be read: {e}")
        if not overwrite and not entry.stamp.matches(old):
            if not ask:
                return self._fail(entry, f"{path.name} was changed by another program meanwhile and is not replaced unasked")
            self._ask_conflict(entry, old)
            return False
        if old != new:
            try:
                atomic_write_bytes(path, new)
            except OSError as e:
                return self._fail(entry, str(e))
            edit = CaptionEdit(f"Edit caption of {item.name}", [CaptionChange(path, old, new)])
            self.undo_stack.push(CaptionEditCommand(edit, self._notify, self.status_message.emit, self.runner))
        self._saved(entry, encoding, new)
        if path == item.caption_path:  # (not when the caption extension changed since: the text was for the old file)
            item.caption, item.caption_exists, item.caption_utf8 = text, True, _is_utf8(encoding)
            item.caption_encoding = encoding
            if _is_utf8(encoding):
                item.flags.discard(Flag.CAPTION_NOT_UTF8)
            if old != new:
                self.caption_saved.emit(item)
        return True

    def _saved(self, entry: HeldCaption, encoding: str, written: bytes) -> None:
        """``entry`` is on disk as ``written``: it is no longer held, and the box (if it shows it) says so."""
        self._held.pop(entry.path, None)
        if self._item is not None and self._item.caption_path == entry.path:
            self._dirty = False
            self._problem = self._note = ""
            self._encoding = encoding
            self._stamp = CaptionStamp.of(written)
            self._show_warning()
            self._set_state("saved")

    def _fail(self, entry: HeldCaption, message: str) -> bool:
        message = message.rstrip(". ")  # it goes inside sentences ("not saved: …. It stays …")
        log.warning("caption of %s not saved: %s", entry.item.name, message)
        entry.problem = message
        self._update_entry(entry)
        self.save_failed.emit(message)
        self.status_message.emit(f"Caption of {entry.item.name} not saved: {message}. Your text is kept.")
        return False

    # ------------------------------------------------------------------ questions
    def _ask_convert(self, entry: HeldCaption, bad: list[str]) -> None:
        """A typed character does not fit the file's encoding: ask before converting it to UTF-8."""
        self._update_entry(entry)
        path = entry.path
        label = encoding_label(entry.encoding)

        def answered(answer: str) -> None:
            self.convert_box = None
            latest = self._entry(path)
            if answer == "convert":
                self._declined.discard(path)
                if latest is not None:
                    self._save(latest, encoding="utf-8")
            else:
                self._declined.add(path)
                if latest is not None:
                    latest.problem = f"it holds characters {label} cannot hold"
                    self._update_entry(latest)
            self.question_answered.emit(answer or "keep")

        self.convert_box = messages.ask(
            self,
            "Save the caption as UTF-8?",
            f"“{''.join(bad[:10])}” cannot be saved in {label}, the encoding of {path.name}.",
            (Button("accept", "Save as UTF-8", "convert"), Button("reject", f"Keep {label}", "keep")),
            answered,
            info="Save this caption as UTF-8 (training reads both)? Or keep the file in "
            f"{label} and take those characters out; nothing is written until you choose.",
            default="convert",
            name="caption_convert_box",
        )

    def _ask_conflict(self, entry: HeldCaption, theirs: bytes | None) -> None:
        """The caption file changed on disk since the text was started from it: ask, never replace it unasked."""
        self._update_entry(entry)
        path = entry.path
        on_disk = decode_caption(theirs).text if theirs is not None else None
        shown_disk = "(the file was deleted)" if on_disk is None else f"“{_short(on_disk)}”"

        def answered(answer: str) -> None:
            self.conflict_box = None
            answer = answer or "both"  # closed without a button: nothing is lost either way
            latest = self._entry(path)
            if latest is not None:
                if answer == "mine":
                    self._save(latest, overwrite=True)
                elif answer == "theirs":
                    self.discard(path)
                    self.status_message.emit(f"{latest.item.name}: took the caption on disk; your text was dropped.")
                else:
                    self._show_both(latest)
            self.question_answered.emit(answer)

        self.conflict_box = messages.ask(
            self,
            "Caption changed on disk",
            f"{path.name} was changed by another program after you began typing its caption.",
            (
                Button("accept", "Keep mine", "mine", name="caption_keep_mine"),
                Button("destructive", "Take theirs", "theirs", name="caption_take_theirs"),
                Button("reject", "Show both", "both", name="caption_show_both"),
            ),
            answered,
            info=f"Yours: “{_short(entry.text)}”\nOn disk now: {shown_disk}\n\nKeep mine writes yours over it (Ctrl+Z "
            "brings theirs back). Take theirs drops what you typed. Show both puts both in the caption box, to make one "
            "of them; nothing is written until you choose.",
            default="both",
            name="caption_conflict_box",
        )

    def _show_both(self, entry: HeldCaption) -> None:
        """Yours, then the file's text, in the box (not saved yet): the file as it is now is the one seen."""
        try:
            stamp, raw = CaptionStamp.read(entry.path)
        except OSError as e:
            self._fail(entry, f"{entry.path.name} cannot be read: {e}")
            return
        disk = decode_caption(raw) if raw is not None else None
        if disk is not None and disk.text.strip() and disk.text != entry.text:
            entry.text = f"{entry.text}\n{disk.text}"
            entry.encoding = disk.encoding
        entry.stamp, entry.problem = stamp, ""
        if self._item is not None and self._item.caption_path == entry.path:
            self._note = (
                f"Both versions are in the box: yours first, then what is in {entry.path.name} now. Make them one "
                "caption; it is saved as you type, when you move on or quit."
            )
        self._update_entry(entry)

    def _ask_discard(self) -> None:
        """The Discard button: ask before the typed text goes."""
        item = self._item
        if item is None or not self._dirty:
            return
        path = item.caption_path

        def answered(answer: str) -> None:
            if answer == "discard":
                self.discard(path)

        messages.ask(
            self,
            "Discard your caption?",
            f"The caption you typed for {item.name} is not saved. Discard it and show {path.name} as it is on disk?",
            (Button("destructive", "Discard my text", "discard"), Button("cancel")),
            answered,
            default="cancel",
            name="caption_discard_box",
        )

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


def _short(text: str, limit: int = 200) -> str:
    """A caption on one line for a question: newlines shown as ⏎, cut at ``limit`` characters."""
    one = printable(text.replace("\n", " ⏎ "))
    return one if len(one) <= limit else one[: limit - 1] + "…"


def notify_noop(_paths: list[Path], _written: Mapping[Path, bytes | None] | None = None) -> None:
    """A ``notify`` that does nothing (for editors used alone)."""


def _is_utf8(encoding: str) -> bool:
    """UTF-8, with or without a byte-order mark (training reads both as they are)."""
    return encoding in ("utf-8", "utf-8-sig")
