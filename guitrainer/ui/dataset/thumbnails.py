"""Thumbnails made off the GUI thread, cached in memory (LRU by bytes) and on disk.

``ThumbnailLoader.get(path, size)`` answers at once: the image if cached, else None after queuing
a job on a QThreadPool. When the job is done ``ready(path, size)`` is emitted on the GUI thread.
Finished jobs are handed over in batches: workers append to a locked list and wake the GUI thread
once per batch, which takes them in at most every ``BATCH_MS`` (one GUI event per batch instead of
one queued signal per image).
Images are EXIF-transposed, so they are shown upright as training sees them. Only QImage is used
off the GUI thread (QPixmap is GUI-thread only).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, QThreadPool, QTimer, Signal, Slot
from PySide6.QtGui import QImage

from guitrainer.base import safe_open
from guitrainer.base.paths import cache_dir

log = logging.getLogger(__name__)

GRID_SIZE = 160
BATCH_MS = 30  # finished thumbnails are taken in by the GUI thread at most this often


def render_thumbnail(path: str | Path, size: int) -> QImage:
    """Decode ``path`` upright and fit it in ``size``×``size`` (thread-safe; raises on a bad file).

    The file is opened through :func:`guitrainer.base.safe_open.open_file`: a named pipe or a device under an
    image's name is refused (``PathError``) instead of blocking the worker thread or being read without end."""
    from PIL import Image, ImageOps

    with safe_open.open_file(path) as fh, Image.open(fh) as im:
        if im.format == "JPEG":
            im.draft("RGB", (size, size))  # decode at 1/2, 1/4 or 1/8 scale: the big saving
        im = ImageOps.exif_transpose(im)
        if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
            import numpy as np

            arr = np.asarray(im, dtype=np.float64)
            peak = max(float(arr.max()), 1.0)
            scale = 255.0 / (65535.0 if peak > 255 else 255.0)
            im = Image.fromarray((arr * scale).clip(0, 255).astype(np.uint8), "L")
        has_alpha = im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info
        im = im.convert("RGBA" if has_alpha else "RGB")
        im.thumbnail((size, size), Image.Resampling.BILINEAR, reducing_gap=2.0)
    return pil_to_qimage(im)


def pil_to_qimage(im) -> QImage:
    """A QImage owning a copy of an RGB or RGBA Pillow image's pixels."""
    fmt = QImage.Format.Format_RGBA8888 if im.mode == "RGBA" else QImage.Format.Format_RGB888
    data = im.tobytes()
    bpl = len(data) // im.height
    return QImage(data, im.width, im.height, bpl, fmt).copy()


def disk_key(path: str | Path, size: int) -> str | None:
    """Cache file name for a thumbnail: path + mtime + byte size + thumbnail size."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    raw = f"{os.path.abspath(path)}|{st.st_mtime_ns}|{st.st_size}|{size}".encode()
    return hashlib.sha1(raw).hexdigest()


class _Results(QObject):
    """Finished jobs, filled by worker threads; ``wake`` is emitted when the list stops being empty."""

    wake = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._lock = threading.Lock()
        self._items: list[tuple[str, int, QImage, bool]] = []

    def put(self, path: str, size: int, img: QImage, ok: bool) -> None:
        with self._lock:
            first = not self._items
            self._items.append((path, size, img, ok))
        if first:
            self.wake.emit()

    def take(self) -> list[tuple[str, int, QImage, bool]]:
        with self._lock:
            items, self._items = self._items, []
        return items


class _ThumbJob(QRunnable):
    def __init__(self, path: str, size: int, disk_dir: Path | None, results: _Results):
        super().__init__()
        self.path, self.size, self.disk_dir, self.results = path, size, disk_dir, results
        self.setAutoDelete(True)

    def run(self) -> None:
        img = QImage()
        ok = False
        cache_file = None
        try:
            if self.disk_dir is not None:
                key = disk_key(self.path, self.size)
                if key:
                    cache_file = self.disk_dir / key[:2] / f"{key}.png"
                    if cache_file.exists() and img.load(str(cache_file)):
                        ok = True
            if not ok:
                img = render_thumbnail(self.path, self.size)
                ok = True
                if cache_file is not None:
                    self._save(img, cache_file)
        except Exception as e:  # one bad image must not stop the others
            log.debug("no thumbnail for %s: %s", self.path, e)
            img, ok = QImage(), False
        with contextlib.suppress(RuntimeError):  # the loader went away while we worked
            self.results.put(self.path, self.size, img, ok)

    @staticmethod
    def _save(img: QImage, cache_file: Path) -> None:
        from PySide6.QtCore import QBuffer, QByteArray, QIODevice

        try:
            buf = QByteArray()
            dev = QBuffer(buf)
            dev.open(QIODevice.OpenModeFlag.WriteOnly)
            img.save(dev, "PNG", 90)  # Qt maps PNG quality 90 to fast, light zlib compression
            dev.close()
            # A cache needs no fsync (that costs ~70 ms a file on some disks): temp file + rename is enough.
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_name(f".{cache_file.name}.{threading.get_ident()}.tmp")
            tmp.write_bytes(bytes(buf.data()))
            os.replace(tmp, cache_file)
        except OSError as e:
            log.debug("cannot cache thumbnail %s: %s", cache_file, e)


class ThumbnailLoader(QObject):
    """Thumbnails on demand: memory LRU (bounded in bytes), disk cache, worker threads."""

    ready = Signal(str, int)  # path, size: ``get(path, size)`` now answers (an image, or a failure)

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        memory_bytes: int = 160 * 1024 * 1024,
        disk_dir: Path | None | bool = True,
        threads: int | None = None,
    ):
        super().__init__(parent)
        self._cache: OrderedDict[tuple[str, int], QImage] = OrderedDict()
        self._bytes = 0
        self._limit = memory_bytes
        self._failed: set[tuple[str, int]] = set()
        self._pending: set[tuple[str, int]] = set()
        self._priority = 0
        if disk_dir is True:
            disk_dir = cache_dir() / "thumbs"
        self._disk_dir: Path | None = disk_dir or None
        self._pool = QThreadPool(self)
        cores = os.cpu_count() or 2
        self._pool.setMaxThreadCount(threads or max(1, min(4, cores - 1)))
        self._results = _Results(self)
        self._batch_timer = QTimer(self)
        self._batch_timer.setSingleShot(True)
        self._batch_timer.setInterval(BATCH_MS)
        self._batch_timer.timeout.connect(self._take_results)
        self._results.wake.connect(self._batch_timer.start)  # queued: workers live in other threads

    # ------------------------------------------------------------------ queries
    def get(self, path: str, size: int = GRID_SIZE, *, disk: bool = True) -> QImage | None:
        """The cached thumbnail, or None (a job is queued; ``ready`` follows)."""
        key = (path, size)
        img = self._cache.get(key)
        if img is not None:
            self._cache.move_to_end(key)
            return img
        if key in self._failed or key in self._pending:
            return None
        self._pending.add(key)
        self._priority += 1  # newest request first: what is on screen now beats what scrolled away
        job = _ThumbJob(path, size, self._disk_dir if disk else None, self._results)
        self._pool.start(job, min(self._priority, 2**30))
        return None

    def failed(self, path: str, size: int = GRID_SIZE) -> bool:
        return (path, size) in self._failed

    def is_pending(self) -> bool:
        return bool(self._pending)

    @property
    def memory_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._cache)

    # ------------------------------------------------------------------ control
    def forget(self, path: str) -> None:
        """Drop a path's thumbnails (the file changed or left the dataset)."""
        for key in [k for k in self._cache if k[0] == path]:
            self._bytes -= self._cache.pop(key).sizeInBytes()
        self._failed = {k for k in self._failed if k[0] != path}

    def cancel_pending(self) -> None:
        """Drop queued (not started) jobs."""
        self._pool.clear()
        self._pending.clear()

    def wait(self, msecs: int = 30000) -> bool:
        """Wait for the workers, then take their results in (``ready`` is emitted for each)."""
        done = self._pool.waitForDone(msecs)
        self._take_results()
        return done

    def shutdown(self) -> None:
        self.cancel_pending()
        self._pool.waitForDone(5000)

    @Slot()
    def _take_results(self) -> None:
        """Cache every finished job's image, then emit ``ready`` for each (GUI thread)."""
        self._batch_timer.stop()
        done = [(p, size) for p, size, img, ok in self._results.take() if self._store(p, size, img, ok)]
        for path, size in done:
            self.ready.emit(path, size)

    def _store(self, path: str, size: int, img: QImage, ok: bool) -> bool:
        key = (path, size)
        if key not in self._pending:  # cancelled meanwhile
            return False
        self._pending.discard(key)
        if ok and not img.isNull():
            self._cache[key] = img
            self._bytes += img.sizeInBytes()
            while self._bytes > self._limit and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._bytes -= old.sizeInBytes()
        else:
            self._failed.add(key)
        return True
