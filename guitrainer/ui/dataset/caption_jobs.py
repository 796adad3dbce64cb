"""Caption writes that may be big: :class:`CaptionJobRunner` (one background job at a time) and
:class:`CaptionEditCommand` (one undo step holding the old and new bytes of each caption file).

Writing many captions takes long (each write is atomic with an fsync: ~0.7 ms a file on a local SSD,
far more on a network disk), so edits of :data:`BULK_MIN_CAPTIONS` captions or more, and their undo
and redo, run in a worker thread, one at a time.
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

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QUndoCommand, QUndoStack

from guitrainer.core.dataset.scan import CaptionEdit
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)

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
    are put back and the undo stack steps back to where it was. Each undo and redo says what it did
    ("Undone: Sort tags (3 captions).") through ``on_message``, after ``applied(edit, forward)``, whose
    answer (a sentence, or "") is added to it.
    """

    def __init__(
        self,
        edit: CaptionEdit,
        notify: Notify,
        on_message: Callable[[str], None],
        runner: CaptionJobRunner | None = None,
        applied: Callable[[CaptionEdit, bool], str] | None = None,
    ):
        super().__init__(edit.description)
        self.edit = edit
        self._notify = notify
        self._on_message = on_message
        self._runner = runner
        self._applied = applied
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
                self._say_done(forward)
            return

        def done(_result: object) -> None:
            self._notify(self._paths(), self._written(forward))
            self._say_done(forward)

        def failed(message: str) -> None:
            self._notify(self._paths(), None)
            self._step_back(runner.undo_stack, forward)
            self._on_message(f"{verb} failed, no caption changed: {message}")

        label = f"{'Redoing' if forward else 'Undoing'}: {edit.description}"
        runner.submit(label, lambda report: self._write(forward, report), done, failed)

    def _say_done(self, forward: bool) -> None:
        """"Undone: Rename tag “a” to “b” (3 captions)." — every undo and redo says what it did."""
        edit, n = self.edit, self.edit.count
        note = self._applied(edit, forward) if self._applied is not None else ""
        past = "Redone" if forward else "Undone"
        self._on_message(f"{past}: {edit.description} ({n:,} caption{'s' if n != 1 else ''}).{' ' + note if note else ''}")

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


