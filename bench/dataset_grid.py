"""Bench: dataset grid with 2,000 images of 1024 px.

Measures, from ``DatasetPage.add_paths`` (what a drop calls):
  - seconds until the first screen of thumbnails is visible (every grid cell in the viewport drawn
    from a real thumbnail), with a cold thumbnail disk cache;
  - seconds until all 2,000 rows are in the grid, and until all thumbnails exist;
  - process memory (RSS) after every thumbnail was made;
  - the longest GUI-thread block: gaps between ticks of a 10 ms QTimer probe, minus the 10 ms.

Images are generated once into a cache folder and reused.

    QT_QPA_PLATFORM=offscreen python bench/dataset_grid.py [--count 2000] [--size 1024] [--warm]
        [--trace] [--no-thumbs]

``--trace`` times GUI-thread slots and GC passes and lists what ran in each probe gap over 30 ms;
``--no-thumbs`` makes every thumbnail job fail at once (the probe without the thumbnail worker);
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def image_folder(count: int, size: int) -> Path:
    import platformdirs
    from PIL import Image, ImageDraw

    root = Path(os.environ.get("GUITRAINER_BENCH_CACHE", platformdirs.user_cache_dir("guitrainer-bench")))
    folder = root / f"dataset_{count}_{size}" / "10_bench"
    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    base = Image.linear_gradient("L").resize((size, size))
    radial = Image.radial_gradient("L").resize((size, size))
    for i in range(count):
        w, h = (size, size) if i % 3 == 0 else ((size, size * 3 // 4) if i % 3 == 1 else (size * 3 // 4, size))
        r = base.rotate((i * 37) % 360).resize((w, h))
        g = radial.resize((w, h)).point(lambda v, k=i: (v + k * 13) % 256)
        b = base.transpose(Image.Transpose.FLIP_LEFT_RIGHT).resize((w, h))
        im = Image.merge("RGB", (r, g, b))
        d = ImageDraw.Draw(im)
        d.ellipse([w // 4, h // 4, w // 4 + w // 5, h // 4 + h // 5], fill=((i * 53) % 256, 200, 120))
        im.save(folder / f"img_{i:05d}.jpg", quality=90)
        if i % 3 != 2:
            (folder / f"img_{i:05d}.txt").write_text(f"bench, tag{i % 17}, tag{i % 5}, sample {i}")
    done.write_text("ok")
    print(f"generated {count} images in {time.perf_counter() - t:.1f} s -> {folder}", file=sys.stderr)
    return folder


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--warm", action="store_true", help="reuse the thumbnail disk cache of a previous run")
    ap.add_argument("--trace", action="store_true", help="time GUI-thread slots and GC passes; explain long gaps")
    ap.add_argument("--no-thumbs", action="store_true", help="thumbnail jobs do nothing (probe baseline)")
    args = ap.parse_args()
    folder = image_folder(args.count, args.size)
    home = Path(os.environ.get("GUITRAINER_BENCH_HOME", "")) if args.warm else Path(tempfile.mkdtemp(prefix="gt_bench_"))
    if args.warm and not str(home):
        home = Path(tempfile.gettempdir()) / "gt_bench_warm"
    os.environ["GUITRAINER_HOME"] = str(home)

    from PySide6.QtCore import QRect, QTimer
    from PySide6.QtWidgets import QApplication

    from guitrainer.ui.binding import ConfigBinding
    from guitrainer.ui.dataset.page import DatasetPage

    trace = Tracer() if args.trace else None
    if trace:
        trace.install()
    if args.no_thumbs:
        from guitrainer.ui.dataset import thumbnails

        thumbnails.render_thumbnail = lambda path, size: (_ for _ in ()).throw(OSError("disabled"))  # type: ignore

    app = QApplication.instance() or QApplication(sys.argv)
    page = DatasetPage(ConfigBinding())
    page.resize(1440, 900)
    page.show()
    for _ in range(5):
        app.processEvents()
    rss_before = rss_mb()
    import gc

    gc.collect()
    gc.freeze()  # as guitrainer.app.main does once the window is shown

    gaps: list[float] = []
    probe_last = [time.perf_counter()]
    worst_at = [""]
    per_phase: dict[str, float] = {}
    phase = ["idle"]

    def tick() -> None:
        now = time.perf_counter()
        gap = now - probe_last[0] - 0.010
        if trace and gap > 0.030:
            trace.gaps.append((probe_last[0], now, phase[0]))
        if gaps and gap > max(gaps):
            worst_at[0] = phase[0]
        gaps.append(gap)
        per_phase[phase[0]] = max(per_phase.get(phase[0], 0.0), gap)
        probe_last[0] = now

    probe = QTimer()
    probe.setInterval(10)
    probe.timeout.connect(tick)
    probe.start()

    results: dict[str, float] = {}
    t0 = [0.0]

    def first_screen_ready() -> bool:
        grid = page.grid
        n = page.proxy.rowCount()
        if not n:
            return False
        vp = QRect(0, 0, grid.viewport().width(), grid.viewport().height())
        seen = 0
        for r in range(n):
            idx = page.proxy.index(r, 0)
            rect = grid.visualRect(idx)
            if rect.top() > vp.bottom():
                break
            if rect.intersects(vp):
                seen += 1
                path = page.model.item(page.proxy.mapToSource(idx).row()).image_path
                if page.loader.get(str(path)) is None and not page.loader.failed(str(path)):
                    return False
        return seen > 0

    def start() -> None:
        phase[0] = "add_paths"
        t0[0] = time.perf_counter()
        page.add_paths([folder])
        phase[0] = "loading"
        check.start()

    def poll() -> None:
        now = time.perf_counter() - t0[0]
        if "first_screen_s" not in results and first_screen_ready():
            results["first_screen_s"] = now
            page.grab()  # what the user sees, painted
        if "all_rows_s" not in results and len(page.items) == args.count and not page.is_loading():
            results["all_rows_s"] = now
        if "first_screen_s" in results and "all_rows_s" in results and requested[0] < len(page.items):
            phase[0] = "all thumbnails"
            for it in page.items[requested[0] : requested[0] + 40]:  # a screenful per tick, as scrolling would
                page.loader.get(str(it.image_path))
            requested[0] += 40
        if requested[0] >= args.count and not page.loader.is_pending() and "all_thumbs_s" not in results:
            results["all_thumbs_s"] = now
            results["rss_mb"] = rss_mb()
            phase[0] = "scroll"
            scroll_steps[0] = 0
        if "all_thumbs_s" in results and scroll_steps[0] is not None:
            sb = page.grid.verticalScrollBar()
            if sb.value() < sb.maximum():
                sb.setValue(min(sb.maximum(), sb.value() + page.grid.viewport().height()))
                page.grid.viewport().repaint()
            else:
                check.stop()
                QTimer.singleShot(200, app.quit)

    scroll_steps: list[int | None] = [None]
    requested = [0]
    check = QTimer()
    check.setInterval(5)
    check.timeout.connect(poll)
    QTimer.singleShot(300, start)
    deadline = QTimer()
    deadline.setSingleShot(True)
    deadline.timeout.connect(app.quit)
    deadline.start(600_000)
    app.exec()
    probe.stop()
    page.shutdown()

    gaps_after = gaps[30:] if len(gaps) > 30 else gaps  # skip start-up
    worst = max(gaps_after) * 1000 if gaps_after else float("nan")
    over50 = sum(1 for g in gaps_after if g > 0.050)
    print(f"images: {args.count} × {args.size} px JPEG (+ captions for 2/3), disk thumbnail cache: {'warm' if args.warm else 'cold'}")
    print(f"CPU cores: {os.cpu_count()}, thumbnail threads: {page.loader._pool.maxThreadCount()}")
    for k in ("first_screen_s", "all_rows_s", "all_thumbs_s"):
        print(f"{k}: {results.get(k, float('nan')):.3f}")
    print(f"rss_mb before import: {rss_before:.0f}, after all thumbnails: {results.get('rss_mb', float('nan')):.0f}")
    print(f"thumbnail memory cache: {page.loader.memory_bytes / 2**20:.0f} MiB in {len(page.loader)} images")
    print(f"longest GUI-thread block: {worst:.1f} ms (phase: {worst_at[0]}); gaps > 50 ms: {over50} of {len(gaps_after)}")
    print("longest block per phase (ms): " + ", ".join(f"{k} {v * 1000:.0f}" for k, v in per_phase.items() if k != "idle"))
    if trace:
        trace.report()
    return 0


class Tracer:
    """Times GUI-thread slots and GC passes, then lists what ran inside each long probe gap."""

    def __init__(self) -> None:
        self.events: list[tuple[float, float, str]] = []  # start, end, what
        self.gaps: list[tuple[float, float, str]] = []
        self.totals: dict[str, list[float]] = {}
        self._gc_start = 0.0

    def install(self) -> None:
        import gc
        import threading

        from guitrainer.ui.dataset import model as dataset_model
        from guitrainer.ui.dataset import page as dataset_page
        from guitrainer.ui.dataset import summary as dataset_summary
        from guitrainer.ui.dataset import thumbnails

        main = threading.get_ident()

        def on_gc(phase: str, info: dict) -> None:
            if phase == "start":
                self._gc_start = time.perf_counter()
            else:
                where = "gui" if threading.get_ident() == main else "worker"
                self.events.append((self._gc_start, time.perf_counter(), f"gc gen{info['generation']} ({where})"))

        gc.callbacks.append(on_gc)
        for cls, name in (
            (dataset_model.DatasetModel, "_on_thumb"),
            (dataset_model.DatasetModel, "add_items"),
            (dataset_model.ThumbnailDelegate, "paint"),
            (dataset_page.DatasetPage, "_on_batch"),
            (dataset_page.DatasetPage, "_update_summary"),
            (dataset_page.DatasetPage, "_on_scan_done"),
            (dataset_page.DatasetPage, "add_paths"),
            (dataset_page.ds, "collect"),
            (dataset_page.DatasetPage, "_sync_config"),
            (dataset_page.DatasetPage, "_rebuild_folders_table"),
            (dataset_page.DatasetPage, "_update_selection_label"),
            (dataset_page.SummaryPanel, "show_summary"),
            (dataset_page.TagToolsPanel, "set_frequencies"),
            (dataset_page.ds, "summarize"),
            (dataset_page.ds, "tag_frequency"),
            (thumbnails.ThumbnailLoader, "_on_done"),  # before the batched hand-over
            (thumbnails.ThumbnailLoader, "_take_results"),
            (dataset_model.DatasetModel, "flush_thumbnails"),
            (dataset_model.DatasetFilterProxy, "filterAcceptsRow"),
            (dataset_summary.SummaryRunner, "_step"),
            (dataset_summary.SummaryRunner, "_start"),
            (dataset_summary.SummaryRunner, "update_now"),
        ):
            if hasattr(cls, name):
                setattr(cls, name, self._wrap(getattr(cls, name), f"{cls.__name__}.{name}"))

    def _wrap(self, fn, label: str):
        import functools

        @functools.wraps(fn)
        def inner(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                e = time.perf_counter()
                self.events.append((t, e, label))
                self.totals.setdefault(label, []).append(e - t)

        return inner

    def report(self) -> None:
        print("GUI-thread slots: calls, total ms, max ms")
        for label, ds in sorted(self.totals.items()):
            print(f"  {label}: {len(ds)}, {sum(ds) * 1000:.0f}, {max(ds) * 1000:.1f}")
        gcs = [e for e in self.events if e[2].startswith("gc")]
        for kind in sorted({e[2] for e in gcs}):
            ds = [e[1] - e[0] for e in gcs if e[2] == kind]
            print(f"  {kind}: {len(ds)} passes, max {max(ds) * 1000:.1f} ms, total {sum(ds) * 1000:.0f} ms")
        print("gaps > 30 ms and what ran in them (events >= 2 ms, summed by kind):")
        for a, b, ph in self.gaps:
            inside: dict[str, list[float]] = {}
            for s, e, what in self.events:
                if e > a and s < b and e - s >= 0.002:
                    inside.setdefault(what, []).append(e - s)
            desc = "; ".join(f"{w} ×{len(v)} {sum(v) * 1000:.0f} ms (max {max(v) * 1000:.0f})" for w, v in inside.items())
            print(f"  {(b - a) * 1000 - 10:.0f} ms [{ph}]: {desc or '-'}")


if __name__ == "__main__":
    raise SystemExit(main())
