"""Caption editor: the selected image large, its caption beside it, autosaved and undoable.

Every saved change is a :class:`CaptionEditCommand` on the page's QUndoStack (one per autosave, one
per bulk tag operation), holding the old and new bytes of each caption file, so undo restores the
files byte for byte. A caption that is not UTF-8 is never written unless the user types in it.

Writing many captions takes long (each write is atomic with an fsync: ~0.7 ms a file on a local SSD,
far more on a network disk), so edits of :data:`BULK_MIN_CAPTIONS` captions or more, and their undo
and redo, run in a worker thread through a :class:`CaptionJobRunner`, one at a time. While one runs,
the page locks whatever else edits captions (caption box, tag tools, undo/redo).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSize, Qt, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QImage, QKeyEvent, QKeySequence, QPainter, QPixmap, QUndoCommand, QUndoStack
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
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)

AUTOSAVE_MS = 500
PREVIEW_SIZE = 768
#: Edits of at least this many captions (and their undo / redo) are written in a worker thread.
#: Smaller ones take under ~40 ms and are written at once, which keeps their code path simple.
BULK_MIN_CAPTIONS = 50
PROGRESS_INTERVAL_S = 0.1  # at most 10 progress updates a second reach the GUI thread

#: ``report(phase, done, total)``: how far a job is (phase: "reading" or "writing").
Report = Callable[[str, int, int], None]
#: ``notify(paths, written)``: these caption files changed on disk; ``written`` (when not None) holds the
#: bytes now in each (None: removed), so the captions can be shown without reading the files again.
Notify = Callable[[list[Path], Mapping[Path, bytes | None] | None], None]


class CaptionJob(BaseWorker):
    """Runs ``fn(report)`` in a worker thread; ``report`` calls become (rate-limited) ``progress`` signals."""

    progress = Signal(str, int, int)  # phase, done, total

    def __init__(self, fn: Callable[[Report], Any]):
        super().__init__()
        self._fn = fn
        self._last = 0.0

    def _report(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - self._last >= PROGRESS_INTERVAL_S:
            self._last = now
            self.progress.emit(phase, done, total)

    def work(self) -> Any:
        return self._fn(self._report)


@dataclass
class _Job:
    label: str
    fn: Callable[[Report], Any]
    on_done: Callable[[Any], None]
    on_failed: Callable[[str], None]


class CaptionJobRunner(QObject):
    """Writes captions in a worker thread, one job at a time; a job submitted meanwhile waits its turn.

    ``busy_changed(True)`` when the first job starts, ``busy_changed(False)`` after the last one's
    callback ran; ``progress(text)`` says how far the running job is ("Sort tags… 800 / 2,000").
    Each job's ``on_done(result)`` or ``on_failed(message)`` runs on the GUI thread.
    """

    busy_changed = Signal(bool)
    progress = Signal(str)

    def __init__(self, undo_stack: QUndoStack, parent: QObject | None = None):
        super().__init__(parent)
        self.undo_stack = undo_stack
        self.min_captions = BULK_MIN_CAPTIONS
        self._queue: deque[_Job] = deque()
        self._current: _Job | None = None
        self._thread: QThread | None = None
        app = QCoreApplication.instance()
        if app is not None:  # quitting mid-job: let the files be written to the end first
            app.aboutToQuit.connect(self.wait)

    @property
    def busy(self) -> bool:
        return self._current is not None

    def in_background(self, count: int) -> bool:
        """Should an edit of ``count`` captions run as a job? (always while busy: it then waits its turn)"""
        return self.busy or count >= self.min_captions

    def submit(
        self,
        label: str,
        fn: Callable[[Report], Any],
        on_done: Callable[[Any], None],
        on_failed: Callable[[str], None],
    ) -> None:
        self._queue.append(_Job(label, fn, on_done, on_failed))
        if self._current is None:
            self.busy_changed.emit(True)
            self._start_next()

    def wait(self, timeout_ms: int = 120_000) -> None:
        """Block until the last job's thread has ended (window closing); queued jobs are dropped."""
        self._queue.clear()
        thread = self._thread
        if thread is not None:
            with contextlib.suppress(RuntimeError):  # already deleted: it has finished
                thread.wait(timeout_ms)

    def _start_next(self) -> None:
        job = self._current = self._queue.popleft()
        self.progress.emit(f"{job.label}…")
        worker = CaptionJob(job.fn)
        worker.progress.connect(self._on_progress)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self._thread = run_in_thread(worker, name="CaptionJobThread")

    @Slot(str, int, int)
    def _on_progress(self, phase: str, done: int, total: int) -> None:
        if self._current is not None:
            what = "reading captions " if phase == "reading" else ""
            self.progress.emit(f"{self._current.label}… {what}{done:,} / {total:,}")

    @Slot(object)
    def _on_finished(self, result: object) -> None:
        self._end(lambda job: job.on_done(result))

    @Slot(str, str)
    def _on_failed(self, message: str, _traceback: str) -> None:
        self._end(lambda job: job.on_failed(message))

    def _end(self, callback: Callable[[_Job], None]) -> None:
        job = self._current  # self._thread stays: its OS thread may still be ending (see wait)
        try:
            if job is not None:
                callback(job)  # still busy here: nothing else may start editing captions yet
        finally:
            self._current = None
            if self._queue:
                self._start_next()
            else:
                self.busy_changed.emit(False)


class CaptionEditCommand(QUndoCommand):
    """An already-applied CaptionEdit: undo restores the old bytes, redo writes the new ones.

    With a ``runner``, a big edit is undone / redone in its worker thread (``notify`` and the message
    follow when it is done). Undo and redo are all or nothing: if one file cannot be written, the others
    are put back and the undo stack steps back to where it was.
    """

    def __init__(
        self,
        edit: CaptionEdit,
        notify: Notify,
        on_message: Callable[[str], None],
        runner: CaptionJobRunner | None = None,
    ):
        super().__init__(edit.description)
        self.edit = edit
        self._notify = notify
        self._on_message = on_message
        self._runner = runner
        self._skip_next = True  # pushed already applied: the stack's first redo writes nothing

    def _paths(self) -> list[Path]:
        return [ch.caption_path for ch in self.edit.changes]

    def _written(self, forward: bool) -> dict[Path, bytes | None]:
        """What each file holds after a successful apply (forward) or revert."""
        if forward:
            return {ch.caption_path: ch.new for ch in self.edit.changes}
        return {ch.caption_path: ch.old for ch in reversed(self.edit.changes)}

    def redo(self) -> None:
        if self._skip_next:
            self._skip_next = False
            return
        self._run(forward=True)

    def undo(self) -> None:
        if self._skip_next:
            self._skip_next = False
            return
        self._run(forward=False)

    def _run(self, forward: bool) -> None:
        edit, verb = self.edit, ("Redo" if forward else "Undo")
        runner = self._runner
        if runner is None or not runner.in_background(edit.count):
            try:
                self._write(forward)
            except OSError as e:
                self._on_message(f"{verb} failed, no caption changed: {e}")
                self._notify(self._paths(), None)
                if runner is not None:  # the stack is mid-undo/redo now: step back once it is done
                    QTimer.singleShot(0, runner, lambda: self._step_back(runner.undo_stack, forward))
            else:
                self._notify(self._paths(), self._written(forward))
            return

        def done(_result: object) -> None:
            self._notify(self._paths(), self._written(forward))
            n = edit.count
            past = "Redone" if forward else "Undone"
            self._on_message(f"{past}: {edit.description} ({n:,} caption{'s' if n != 1 else ''}).")

        def failed(message: str) -> None:
            self._notify(self._paths(), None)
            self._step_back(runner.undo_stack, forward)
            self._on_message(f"{verb} failed, no caption changed: {message}")

        label = f"{'Redoing' if forward else 'Undoing'}: {edit.description}"
        runner.submit(label, lambda report: self._write(forward, report), done, failed)

    def _write(self, forward: bool, report: Report | None = None) -> None:
        """Apply or revert the edit (all or nothing), reporting each file written (worker thread or GUI)."""
        n = self.edit.count

        def progress(done: int) -> None:
            if report is not None:
                report("writing", done, n)

        if forward:
            self.edit.apply(progress)
        else:
            self.edit.revert(progress)

    def _step_back(self, stack: QUndoStack, forward: bool) -> None:
        """The files are as before the failed undo / redo: move the stack's index back to match them."""
        index = stack.index()
        if forward and index > 0 and stack.command(index - 1) is self:
            self._skip_next = True
            stack.undo()
        elif not forward and index < stack.count() and stack.command(index) is self:
            self._skip_next = True
            stack.redo()


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
        self.setMinimumSize(220, 220)
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
        self.undo_stack.push(CaptionEditCommand(edit, self._notify, self.status_message.emit, self.runner))
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

