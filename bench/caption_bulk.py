"""Bench: a bulk tag edit on 2,000 captions, and its undo and redo, through the Dataset page.

Prints, for the edit, the undo and the redo: wall time until done, and the longest GUI-thread block
(gaps between ticks of a 10 ms QTimer probe, minus the 10 ms). ``--sync`` writes on the GUI thread as
before bulk edits moved to a worker thread (``CaptionJobRunner.min_captions`` set out of reach).

    QT_QPA_PLATFORM=offscreen python bench/caption_bulk.py [--count 2000] [--sync]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


class Probe:
    """A 10 ms timer on the GUI thread; ``worst_ms`` is its longest gap beyond 10 ms since ``reset``."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self.reset()
        self.timer.start()

    def reset(self) -> None:
        self.last = time.perf_counter()
        self.worst_ms = 0.0

    def _tick(self) -> None:
        now = time.perf_counter()
        self.worst_ms = max(self.worst_ms, (now - self.last) * 1000 - 10)
        self.last = now


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--sync", action="store_true", help="write on the GUI thread (the old way)")
    args = ap.parse_args()

    from PIL import Image
    from PySide6.QtWidgets import QApplication

    from guitrainer.config import TrainingConfig
    from guitrainer.core.dataset import scan as ds
    from guitrainer.ui.binding import ConfigBinding
    from guitrainer.ui.dataset.page import DatasetPage

    app = QApplication.instance() or QApplication([])
    folder = Path(tempfile.mkdtemp(prefix="caption_bulk_")) / "set"
    folder.mkdir()
    Image.new("RGB", (8, 8), (40, 120, 200)).save(folder.parent / "px.png")
    png = (folder.parent / "px.png").read_bytes()
    for i in range(args.count):
        (folder / f"img{i:05d}.png").write_bytes(png)
        (folder / f"img{i:05d}.txt").write_text(f"red hair, smile, tag{i % 17}")
    page = DatasetPage(ConfigBinding(TrainingConfig()))
    page.resize(1280, 860)
    page.show()
    if args.sync:
        page.caption_jobs.min_captions = 10**9
    page.add_paths([folder])
    deadline = time.monotonic() + 300
    while (len(page.items) < args.count or page.is_loading()) and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)
    for _ in range(50):  # let the first thumbnails settle
        app.processEvents()
        time.sleep(0.01)

    probe = Probe()
    done: list[object] = []
    page.tag_operation_finished.connect(done.append)

    def measure(label: str, action) -> None:
        busy_before = page.caption_jobs.busy
        probe.reset()
        t0 = time.perf_counter()
        action()
        while (page.caption_jobs.busy or (label == "edit" and not done)) and time.perf_counter() - t0 < 300:
            app.processEvents()
            time.sleep(0.001)
        for _ in range(5):
            app.processEvents()
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        print(f"{label:5s}: {wall:6.2f} s until done, longest GUI-thread block {probe.worst_ms:7.1f} ms"
              + ("  (busy before)" if busy_before else ""))

    measure("edit", lambda: page.captions.apply_tag_operation("Add trigger word", lambda t: ds.add_trigger(t, "zz"), "all"))
    measure("undo", page.undo_stack.undo)
    measure("redo", page.undo_stack.redo)
    changed = sum(1 for p in folder.glob("*.txt") if p.read_text().startswith("zz, "))
    print(f"{changed} of {args.count} captions carry the trigger word; mode: {'GUI thread' if args.sync else 'worker thread'}")
    page.shutdown()


if __name__ == "__main__":
    main()
