"""Finding and reading dropped images off the GUI thread: :class:`ScanWorker` and the page's :class:`ScanJob`.

The worker runs through :func:`~guitrainer.ui.workers.run_in_thread` (its errors reach the GUI thread as
``failed``); the job, which lives on the GUI thread, turns the worker's signals into queued calls of the
page with the import's :class:`~guitrainer.core.dataset.report.ImportReport`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, QThread, Signal, Slot

from guitrainer.base.paths import path_key
from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.report import CollectRequest, ImportReport
from guitrainer.core.dataset.scan import DatasetItem
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)


class ScanWorker(BaseWorker):
    """Finds the images (directory listing), then reads captions and image headers (lives in a QThread).

    ``collected`` reports what was found, refused and already known; rows follow in batches. ``known``
    holds :func:`ds.file_key` of every image in (or on its way into) the dataset; it is shared with the
    page and other workers and updated under ``lock``, so two drops of the same files add them once.
    """

    collected = Signal(object)  # ds.Collected
    partial_folders = Signal(object)  # list[(folder, images on disk that were not dropped)]
    batch_loaded = Signal(object)  # list[DatasetItem]

    def __init__(
        self,
        requests: Sequence[CollectRequest],
        caption_extension: str,
        resolution: int,
        known: set,
        lock: threading.Lock,
    ):
        super().__init__()
        self.requests = list(requests)
        self.caption_extension = caption_extension
        self.resolution = resolution
        self.known = known
        self.lock = lock
        self._stop = threading.Event()

    def cancel(self) -> None:
        self._stop.set()

    def _collect(self) -> ds.Collected:
        out = ds.Collected()
        with self.lock:
            seen = set(self.known)
        for req in self.requests:
            col = ds.collect(
                req.paths, self.caption_extension, seen, recursive=req.recursive, repeats=req.repeats
            )
            if req.exclude:
                col.candidates = [c for c in col.candidates if path_key(c.path) not in req.exclude]
            keys = [ds.file_key(c.path) for c in col.candidates]
            with self.lock:  # another drop may have taken some of these files meanwhile
                for c, key in zip(col.candidates, keys):
                    if key in self.known:
                        out.duplicates.append((c.path, "already in the dataset"))
                    else:
                        self.known.add(key)
                        out.candidates.append(c)
            seen.update(keys)
            out.rejected += col.rejected
            out.duplicates += col.duplicates
        return out

    def _partial_folders(self) -> list[tuple[str, list[str]]]:
        """Folders of loose dropped images that hold other images too: (folder, those other images)."""
        loose = {p.parent for req in self.requests for p in req.paths if p.is_file()}
        out = []
        with self.lock:  # after _collect: every image of this drop and of earlier ones is known
            known = set(self.known)
        for folder in sorted(loose):
            on_disk = ds.collect([folder], self.caption_extension, recursive=False).candidates
            others = [path_key(c.path) for c in on_disk if ds.file_key(c.path) not in known]
            if others:
                out.append((str(folder), others))
        return out


    def work(self) -> None:
        batch: list[DatasetItem] = []
        last = time.monotonic()
        first = True
        col = self._collect()
        self.partial_folders.emit(self._partial_folders())
        self.collected.emit(col)
        rows = ds.iter_items(col.candidates, self.caption_extension, self.resolution, self._stop.is_set)
        for item in rows:
            batch.append(item)
            now = time.monotonic()
            # the first rows go out at once (first screen fast), then in batches (few model resets)
            if (first and len(batch) >= 24) or len(batch) >= 200 or now - last > 0.1:
                self.batch_loaded.emit(batch)
                batch, last, first = [], now, False
        if batch:
            self.batch_loaded.emit(batch)


class ScanJob(QObject):
    """One import on its way into the grid (GUI thread): its report, its worker and thread.

    Signals (queued from the worker, emitted on the GUI thread):
        collected(ImportReport): the files are found (the report says what was added, refused, skipped);
        partial_folders(ImportReport, list): folders of loose dropped images that hold other images too;
        batch_loaded(list[DatasetItem]): rows for the grid;
        done(ScanJob, str): the scan ended; the message is "" or why it failed.
    """

    collected = Signal(object)
    partial_folders = Signal(object, object)
    batch_loaded = Signal(object)
    done = Signal(object, str)

    def __init__(self, worker: ScanWorker, report: ImportReport, parent: QObject | None = None):
        super().__init__(parent)
        self.worker, self.report = worker, report
        self.thread: QThread | None = None
        worker.collected.connect(self._on_collected)
        worker.partial_folders.connect(self._on_partial)
        worker.batch_loaded.connect(self._on_batch)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)

    def start(self) -> None:
        self.thread = run_in_thread(self.worker, name="DatasetScan")

    def cancel(self) -> None:
        self.worker.cancel()

    def wait(self, timeout_ms: int = 5000) -> None:
        if self.thread is not None:
            with contextlib.suppress(RuntimeError):  # already finished and deleted
                self.thread.wait(timeout_ms)

    @Slot(object)
    def _on_collected(self, col: ds.Collected) -> None:
        self.report.added = len(col.candidates)
        self.report.rejected = [(str(p), why) for p, why in col.rejected]
        self.report.duplicates = [(str(p), why) for p, why in col.duplicates]
        self.collected.emit(self.report)

    @Slot(object)
    def _on_partial(self, found: list) -> None:
        self.partial_folders.emit(self.report, found)

    @Slot(object)
    def _on_batch(self, items: list) -> None:
        self.batch_loaded.emit(items)

    @Slot(object)
    def _on_finished(self, _result: object) -> None:
        self.done.emit(self, "")

    @Slot(str, str)
    def _on_failed(self, message: str, _details: str) -> None:
        self.done.emit(self, message)


def start_scan(
    requests: Sequence[CollectRequest],
    report: ImportReport,
    caption_extension: str,
    resolution: int,
    known: set,
    lock: threading.Lock,
    parent: QObject | None = None,
    connect: Callable[[ScanJob], None] | None = None,
) -> ScanJob:
    """Start a scan of ``requests`` (``connect(job)`` wires its signals before it starts)."""
    job = ScanJob(ScanWorker(requests, caption_extension, resolution, known, lock), report, parent)
    if connect is not None:
        connect(job)
    job.start()
    return job
