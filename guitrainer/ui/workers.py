"""Background workers: a QObject moved to a QThread, with the canonical wiring (DESIGN §3).

A worker lives in its own thread and talks to the GUI only through signals, which Qt queues
to the GUI thread, so slots that touch widgets always run there. Control requests (stop,
pause, sample now, save now) are *not* queued slots: the worker's thread is busy in the
training loop, so they set thread-safe flags (:class:`~guitrainer.core.events.Control`) that
the loop polls once per step.

No torch at import time: the engine is imported inside the worker thread when a run starts.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, Protocol

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, Signal, Slot

from guitrainer.config import TrainingConfig
from guitrainer.core.events import Control, Reporter, RunSummary, SampleImage, SavedFile, StepMetrics

log = logging.getLogger(__name__)


class RunsToSummary(Protocol):
    """What a trainer looks like to the worker: ``run() -> RunSummary``."""

    def run(self) -> RunSummary: ...


#: ``factory(config, reporter, control)`` builds a trainer; the default imports the real engine lazily.
TrainerFactory = Callable[[TrainingConfig, Reporter, Control], RunsToSummary]

# Threads and workers kept alive until the thread has finished, so a caller that
# drops its references cannot get a running QThread garbage-collected ("Destroyed while running").
_LIVE: set[tuple[QThread, QObject]] = set()


class BaseWorker(QObject):
    """A job for a background thread: override :meth:`work`; ``run`` turns its outcome into signals.

    ``finished(result)`` after a normal return, ``failed(message, traceback)`` after an exception.
    Exactly one of the two is emitted; nothing is swallowed.
    """

    finished = Signal(object)
    failed = Signal(str, str)

    def work(self) -> Any:
        raise NotImplementedError

    @Slot()
    def run(self) -> None:
        """Thread entry point (connected to ``QThread.started``)."""
        try:
            result = self.work()
        except BaseException as e:  # noqa: BLE001 - every error must reach the GUI
            tb = traceback.format_exc()
            log.error("%s failed: %s\n%s", type(self).__name__, e, tb)
            message = str(e) or type(e).__name__
            if not isinstance(e, Exception):
                message = f"{type(e).__name__}: {message}"
            self._home()
            self.failed.emit(message, tb)
            return
        self._home()
        self.finished.emit(result)

    def _home(self) -> None:
        """Hand the worker back to the GUI thread before its last signal, so ``deleteLater`` destroys it there.

        Destroyed in the worker thread, a Python-backed QObject needs the GIL inside Qt's destructor while it
        holds one of Qt's shared signal-slot mutexes; a GUI thread holding the GIL and waiting for that mutex
        (any ``connect``) then deadlocks both — seen as a hung test run.
        """
        app = QCoreApplication.instance()
        if app is not None and self.thread() is not app.thread():
            self.moveToThread(app.thread())


def run_in_thread(
    worker: BaseWorker, *, name: str = "", thread_finished: Callable[[], None] | None = None
) -> QThread:
    """Start ``worker`` on a new QThread with the canonical wiring and return the thread.

    ``thread.started -> worker.run``; ``worker.finished / failed -> thread.quit``;
    ``thread.finished -> deleteLater`` of both. Keep no Python reference to either after
    ``thread.finished``: their C++ objects are deleted then. ``thread_finished`` (a slot of a GUI-thread
    object, to drop those references) is connected before the thread starts: connected to the returned
    thread, it would miss the end of a worker that is done before ``run_in_thread`` returns.
    """
    thread = QThread()
    thread.setObjectName(name or f"{type(worker).__name__}Thread")
    worker.moveToThread(thread)
    # The janitor lives in the calling (GUI) thread, so its slot runs there (queued); Qt owns it.
    janitor = _Janitor(QCoreApplication.instance())
    entry = (thread, worker)
    janitor.entry = entry
    _LIVE.add(entry)
    thread.started.connect(worker.run)
    # Direct: QThread.quit is thread-safe, and a GUI thread blocked in QThread.wait() (closing) could not run a
    # queued quit, so the wait would last its whole timeout
    worker.finished.connect(thread.quit, Qt.ConnectionType.DirectConnection)
    worker.failed.connect(thread.quit, Qt.ConnectionType.DirectConnection)
    thread.finished.connect(worker.deleteLater)
    thread.finished.connect(thread.deleteLater)
    thread.finished.connect(janitor.release)
    if thread_finished is not None:
        thread.finished.connect(thread_finished)
    thread.start()
    return thread


class FunctionWorker(BaseWorker):
    """A one-off job: ``fn()`` on a worker thread (see :func:`call_in_thread`)."""

    def __init__(self, fn: Callable[[], Any]):
        super().__init__()
        self._fn = fn

    def work(self) -> Any:
        return self._fn()


class _Callbacks(QObject):
    """Lives in the calling (GUI) thread, so the worker's signals reach its slots queued there.

    Owned by the application, not by ``owner``: when ``owner`` (a dialog, say) is gone by the time the
    job ends, the callbacks are skipped instead of running on a deleted widget.
    """

    def __init__(self, done: Callable[[Any], None], failed: Callable[[str, str], None], owner: QObject | None):
        super().__init__(QCoreApplication.instance())
        self._done, self._failed, self._owner = done, failed, owner

    def _owner_alive(self) -> bool:
        return self._owner is None or shiboken6.isValid(self._owner)

    @Slot(object)
    def on_finished(self, result: Any) -> None:
        self.deleteLater()
        if self._owner_alive():
            self._done(result)

    @Slot(str, str)
    def on_failed(self, message: str, details: str) -> None:
        self.deleteLater()
        if self._owner_alive():
            self._failed(message, details)
        else:
            log.warning("a background job failed after its window closed: %s", message)


def call_in_thread(
    fn: Callable[[], Any],
    done: Callable[[Any], None],
    failed: Callable[[str, str], None],
    *,
    name: str = "",
    parent: QObject | None = None,
) -> QThread:
    """Run ``fn()`` on a new thread; ``done(result)`` or ``failed(message, traceback)`` runs on the GUI thread.

    Plain callables connected to a worker's signal would run in the worker's thread; here they are
    called by a QObject of the calling thread, so they may touch widgets. ``parent``: the object
    whose deletion skips the callbacks (e.g. the dialog that waits for the result).
    """
    worker = FunctionWorker(fn)
    callbacks = _Callbacks(done, failed, parent)
    worker.finished.connect(callbacks.on_finished)
    worker.failed.connect(callbacks.on_failed)
    return run_in_thread(worker, name=name or "FunctionWorker")


class _Janitor(QObject):
    """Drops the module's references to a finished thread and its worker, on the GUI thread."""

    entry: tuple[QThread, QObject] | None = None

    @Slot()
    def release(self) -> None:
        entry, self.entry = self.entry, None
        if entry is None:
            return
        thread = entry[0]
        with contextlib.suppress(RuntimeError):  # RuntimeError: already deleted by deleteLater
            thread.wait(5000)  # `finished` is emitted just before the OS thread ends
        _LIVE.discard(entry)
        self.deleteLater()


@atexit.register
def _wait_for_live_threads(timeout_ms: int = 10_000) -> None:
    """At exit, give threads still running (a device probe importing torch, say) time to end: a QThread
    destroyed while it runs aborts the process."""
    for thread, _worker in list(_LIVE):
        with contextlib.suppress(RuntimeError):  # already deleted
            thread.wait(timeout_ms)


def live_threads() -> int:
    """How many threads started by :func:`run_in_thread` have not yet been released."""
    return len(_LIVE)


def cap_torch_threads() -> int:
    """On a CPU run leave one core to the GUI: lower torch's intra-op threads to cores - 1.

    Only lowers, never raises. Returns the thread count now in force (0 when torch is not loaded).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    target = max(1, (os.cpu_count() or 2) - 1)
    if torch.get_num_threads() > target:
        torch.set_num_threads(target)
    return int(torch.get_num_threads())


def default_trainer_factory(config: TrainingConfig, reporter: Reporter, control: Control) -> RunsToSummary:
    """The real engine, imported here (in the worker thread) so the GUI never loads torch at start."""
    import torch  # noqa: F401 - loaded first so its threads can be capped before anything runs

    cap_torch_threads()
    from guitrainer.engine.trainer import Trainer

    return Trainer(config, reporter, control)


class _SignalReporter:
    """A :class:`Reporter` that turns each engine callback into a queued signal of the worker."""

    def __init__(self, worker: TrainingWorker):
        self._worker = worker

    def on_step(self, metrics: StepMetrics) -> None:
        self._worker.step_finished.emit(metrics)

    def on_status(self, text: str) -> None:
        self._worker.status_changed.emit(str(text))

    def on_warning(self, text: str) -> None:
        self._worker.warning_raised.emit(str(text))

    def on_saved(self, saved: SavedFile) -> None:
        self._worker.checkpoint_saved.emit(saved)

    def on_sample(self, sample: SampleImage) -> None:
        self._worker.sample_ready.emit(sample)


class TrainingWorker(BaseWorker):
    """Runs ``Trainer(config, reporter, control).run()`` in a background thread.

    Signals (all queued to the GUI thread; payloads are frozen dataclasses of plain numbers):
        step_finished(StepMetrics), status_changed(str), warning_raised(str),
        sample_ready(SampleImage), checkpoint_saved(SavedFile),
        files_chosen(RunFiles: the label and folder every file of the run carries, once the trainer is made),
        finished(RunSummary), failed(message, traceback).

    The control methods (:meth:`stop`, :meth:`pause`, ...) are safe to call from the GUI thread
    while the run holds the worker thread.
    """

    step_finished = Signal(object)
    status_changed = Signal(str)
    warning_raised = Signal(str)
    sample_ready = Signal(object)
    checkpoint_saved = Signal(object)
    files_chosen = Signal(object)

    def __init__(self, config: TrainingConfig, trainer_factory: TrainerFactory | None = None, *, record: bool = True):
        super().__init__()
        self.config = config.copy()  # the run owns its settings; the user's stay untouched
        self.control = Control()
        self._factory: TrainerFactory = trainer_factory or default_trainer_factory
        self.record = record  # keep the run in the run history (Runs page)
        self.run_id: int | None = None  # its id there, once the run has started

    # ------------------------------------------------------------------ control (any thread)
    def stop(self) -> None:
        """Ask the run to stop after the current step; the engine saves the LoRA and a resumable state."""
        self.control.request_stop()

    def pause(self) -> None:
        self.control.pause()

    def resume(self) -> None:
        self.control.resume()

    def request_sample(self) -> None:
        self.control.request_sample()

    def request_save(self) -> None:
        self.control.request_save()

    def set_output_folder(self, folder: str) -> None:
        """Later saves of the running trainer go to ``folder`` (see ``Control.redirect_output``)."""
        self.control.redirect_output(folder)

    @property
    def paused(self) -> bool:
        return self.control.paused

    @property
    def stop_requested(self) -> bool:
        return self.control.stop_requested

    # ------------------------------------------------------------------ the run (worker thread)
    def work(self) -> RunSummary:
        from guitrainer.engine.recording import recording  # no torch: the recorder only needs sqlite

        with recording(_SignalReporter(self), self.config, source="app", enabled=self.record) as rec:
            self.run_id = rec.run_id
            trainer = self._factory(self.config, rec.reporter, self.control)
            files = getattr(trainer, "files", None)
            if files is not None:
                self.files_chosen.emit(files)
            rec.attach(trainer)
            summary = trainer.run()
            if not isinstance(summary, RunSummary):
                raise TypeError(f"the trainer returned {type(summary).__name__}, not a RunSummary")
            rec.finish(summary)
        return summary
