"""One device probe for the whole window: every page listens to :class:`DeviceService`.

The probe imports torch (seconds), so it runs once, on a worker thread started through
:func:`~guitrainer.ui.workers.run_in_thread`; its result (or its error) arrives queued on the GUI
thread. The Model page, the Training page's start check and Help ▸ Environment all ask this
service instead of probing on their own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QObject, QThread, Signal, Slot

from guitrainer.core.device import hardware
from guitrainer.core.device.hardware import DeviceInfo
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)

#: the thread's name, seen in logs and by tests that check the probe never runs on the GUI thread
THREAD_NAME = "guitrainer-device-probe"


class _ProbeWorker(BaseWorker):
    """Runs the probe function (it imports torch: seconds)."""

    def __init__(self, fn: Callable[[], DeviceInfo]):
        super().__init__()
        self.fn = fn

    def work(self) -> DeviceInfo:
        import threading

        threading.current_thread().name = THREAD_NAME
        return self.fn()


class DeviceService(QObject):
    """The probed machine, probed once; ``device_ready`` / ``probe_failed`` tell the listeners.

    Args:
        probe: returns the :class:`DeviceInfo` (default: :func:`hardware.probe`, looked up when it runs).
        use_cache: take :func:`hardware.cached` when it already holds a result (no thread at all).
    """

    device_ready = Signal(object)  # DeviceInfo
    probe_failed = Signal(str)  # a message in plain words

    def __init__(
        self, probe: Callable[[], DeviceInfo] | None = None, parent: QObject | None = None, *, use_cache: bool = True
    ):
        super().__init__(parent)
        self._probe = probe
        self._device: DeviceInfo | None = hardware.cached() if use_cache else None
        self._error = ""
        self._thread: QThread | None = None
        self._started = self._device is not None
        self._waiting: list[tuple[Callable[[DeviceInfo], None], Callable[[str], None]]] = []

    # ------------------------------------------------------------------ queries
    def device(self) -> DeviceInfo | None:
        """The probed machine, or None while it is not known (not probed yet, probing, or failed)."""
        return self._device

    def error(self) -> str:
        """Why the probe failed ("" when it has not)."""
        return self._error

    def running(self) -> bool:
        return self._thread is not None

    def started(self) -> bool:
        return self._started

    # ------------------------------------------------------------------ probing
    def start(self) -> bool:
        """Probe on a worker thread, once. False when it already ran, runs, or the result was cached."""
        if self._started:
            return False
        self._started = True
        worker = _ProbeWorker(self._probe or (lambda: hardware.probe()))
        # bound methods of this GUI-thread object: Qt queues the calls to the GUI thread
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self._thread = run_in_thread(worker, name=THREAD_NAME)
        return True

    def when_known(self, ready: Callable[[DeviceInfo], None], failed: Callable[[str], None]) -> None:
        """Call ``ready(device)`` now if the device is known, else when the probe ends (``failed(why)``)."""
        if self._device is not None:
            ready(self._device)
            return
        if self._started and not self.running():
            failed(self._error or "the device probe did not finish")
            return
        self._waiting.append((ready, failed))  # answered once, when the probe ends
        self.start()

    @Slot(object)
    def _on_finished(self, device: DeviceInfo) -> None:
        self._thread = None
        self._device = device
        self._error = ""
        waiting, self._waiting = self._waiting, []
        self.device_ready.emit(device)
        for ready, _failed in waiting:
            if _alive(ready):
                ready(device)

    @Slot(str, str)
    def _on_failed(self, message: str, _details: str) -> None:
        self._thread = None
        self._error = message
        log.warning("device probe failed: %s", message)
        waiting, self._waiting = self._waiting, []
        self.probe_failed.emit(message)
        for _ready, failed in waiting:
            if _alive(failed):
                failed(message)

    def wait(self, timeout_ms: int = 5000) -> None:
        """Closing: give a running probe a moment to end (a stuck driver call never blocks the quit)."""
        thread = self._thread
        if thread is not None:
            with contextlib.suppress(RuntimeError):  # already deleted
                thread.wait(timeout_ms)


def _alive(callback: Callable[..., object]) -> bool:
    """False when ``callback`` is a method of a Qt object deleted meanwhile (a dialog closed before the probe ended)."""
    owner = getattr(callback, "__self__", None)
    return not isinstance(owner, QObject) or shiboken6.isValid(owner)
