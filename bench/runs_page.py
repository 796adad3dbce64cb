"""Run history: the Runs page with many stored runs, the cost of recording a run, the database's size.

1. A store with ``--runs`` runs of ``--steps`` steps each (made in a temp folder, deleted after):
   time from importing the Runs page to its list painted on screen (cold, then warm opens), and
   to the chart of the newest run drawn.
2. The demo model trained with and without recording, alternated in one process: the median time
   between consecutive steps (what a user waits), and the recorder's own time (the training thread's
   ``on_step`` plus the writer thread's batches) per step.
3. Database size per 10,000 steps (one run, file size after a WAL checkpoint, minus an empty store).

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/runs_page.py --runs 1000 --steps 2000 --pairs 3
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DEMO = "Demo — tiny built-in model (CPU, about a minute)"


def _rows(steps: int, rnd: random.Random, batch: int = 2) -> list[tuple]:
    loss, rows = 0.2 + rnd.random() * 0.1, []
    for i in range(1, steps + 1):
        loss = max(0.01, loss * 0.9995 + rnd.gauss(0, 0.01))
        rows.append((i, 1 + i // 100, loss, 1e-4 * min(1.0, i / 100), 65536.0 if i % 7 else 32768.0,
                     0.5 + rnd.random() * 0.05, float(batch * i), None, None, 0))  # fmt: skip
    return rows


def make_store(path: Path, runs: int, steps: int) -> float:
    """``runs`` runs of ``steps`` steps with realistic values; returns seconds taken."""
    from guitrainer.config import TrainingConfig
    from guitrainer.core.runs.store import RunStore

    t0 = time.perf_counter()
    rnd = random.Random(0)
    base = TrainingConfig()
    with RunStore(path) as store:
        for i in range(runs):
            cfg = base.copy()
            cfg.network.rank = rnd.choice([4, 8, 16, 32])
            cfg.optimizer.lr = rnd.choice([1e-4, 5e-5, 2e-4])
            cfg.output.name = f"subject_{i % 37}_v{i}"
            run = store.begin_run(name=cfg.output.name, config=cfg.to_dict(), model="/models/sd15/v1-5-pruned.safetensors",
                                  precision=rnd.choice(["fp16", "bf16", "fp32"]), total_steps=steps,
                                  output_folder=f"/data/out/{i}", now=1.7e9 + i * 3600)  # fmt: skip
            rows = _rows(steps, rnd)
            store.write_batch(run, rows, run={"steps": steps, "final_loss": rows[-1][2], "device": "cuda:0"})
            store.end_run(run, rnd.choice(["finished"] * 8 + ["stopped", "failed"]))
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - t0


def bench_page(app, db: Path, opens: int) -> dict[str, object]:
    from PySide6.QtCore import QEvent, QObject

    t_import = time.perf_counter()
    from guitrainer.config import TrainingConfig
    from guitrainer.ui.binding import ConfigBinding
    from guitrainer.ui.runs.page import RunsPage

    import_s = time.perf_counter() - t_import
    painted: list[float] = []

    class FirstPaint(QObject):
        def eventFilter(self, obj, event) -> bool:  # noqa: N802, ANN001
            if event.type() == QEvent.Type.Paint and not painted:
                painted.append(time.perf_counter())
            return False

    first_screen, chart_ms, rows = [], [], 0
    for i in range(opens):
        painted.clear()
        t0 = time.perf_counter() - (import_s if i == 0 else 0.0)
        page = RunsPage(ConfigBinding(TrainingConfig()), store_path=db)
        spy = FirstPaint()
        page.table.viewport().installEventFilter(spy)
        page.resize(1200, 900)
        page.show()
        while not painted:
            app.processEvents()
        first_screen.append((painted[0] - t0) * 1000)
        rows = page.model.rowCount()
        t1 = time.perf_counter()
        page.ensure_chart()
        page.select_ids([page.model.rows[0].id])
        page.chart.plot_widget.repaint()
        chart_ms.append((time.perf_counter() - t1) * 1000)
        page.close_store()
        page.deleteLater()
        app.processEvents()
    return {"rows": rows, "import_ms": import_s * 1000, "first_screen_ms": first_screen, "chart_ms": chart_ms}


def bench_recording(pairs: int, steps: int, out: Path) -> dict[str, float]:
    """Alternate plain and recorded demo runs; per-step wall intervals and the recorder's own time."""
    import torch

    torch.set_num_threads(1)
    from guitrainer.config.presets import PresetStore
    from guitrainer.core.events import NullReporter
    from guitrainer.engine import recording as R
    from guitrainer.engine.trainer import Trainer

    spent = {"on_step": 0.0, "write": 0.0, "steps": 0}
    on_step, write = R.RunRecorder.on_step, R.RunRecorder._write

    def timed_on_step(self, m):  # noqa: ANN001, ANN202
        t = time.perf_counter()
        on_step(self, m)
        spent["on_step"] += time.perf_counter() - t
        spent["steps"] += 1

    def timed_write(self, store, items):  # noqa: ANN001, ANN202
        t = time.perf_counter()
        write(self, store, items)
        spent["write"] += time.perf_counter() - t

    R.RunRecorder.on_step, R.RunRecorder._write = timed_on_step, timed_write

    class Clock(NullReporter):
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []

        def on_step(self, metrics) -> None:  # noqa: ANN001
            self.times.append(time.perf_counter())
            super().on_step(metrics)

    intervals: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(pairs):
        for record in (False, True):
            cfg = PresetStore().get(DEMO).config()
            cfg.output.folder = str(out / "lora")
            cfg.output.overwrite = True
            cfg.schedule.max_steps, cfg.schedule.epochs = steps, 10_000
            clock = Clock()
            with R.recording(clock, cfg, source="bench", enabled=record, store_path=out / "rec.sqlite3") as rec:
                trainer = Trainer(cfg, rec.reporter)
                rec.attach(trainer)
                rec.finish(trainer.run())
            t = clock.times[5:]  # past the first steps (allocator, caches)
            intervals[record] += [b - a for a, b in zip(t, t[1:])]
    plain, recorded = statistics.median(intervals[False]), statistics.median(intervals[True])
    n = max(1, spent["steps"])
    return {
        "plain_ms": plain * 1000,
        "recorded_ms": recorded * 1000,
        "ratio": recorded / plain,
        "on_step_us": spent["on_step"] / n * 1e6,
        "write_us": spent["write"] / n * 1e6,
        "own_share": (spent["on_step"] + spent["write"]) / n / plain,
        "steps": spent["steps"],
    }


def bench_size(folder: Path, steps: int = 10_000) -> dict[str, float]:
    from guitrainer.config import TrainingConfig
    from guitrainer.core.runs.store import RunStore

    empty, full = folder / "empty.sqlite3", folder / "one.sqlite3"
    with RunStore(empty) as s:
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with RunStore(full) as s:
        run = s.begin_run(name="size", config=TrainingConfig().to_dict(), total_steps=steps)
        rows = _rows(steps, random.Random(1))
        for i in range(0, steps, 20):  # as the recorder writes: a batch per second (~20 steps)
            s.write_batch(run, rows[i : i + 20], run={"steps": i + 20})
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"bytes": full.stat().st_size - empty.stat().st_size, "empty": empty.stat().st_size}


def _print_recording(r: dict[str, float]) -> None:
    print(f"recording: median step interval plain {r['plain_ms']:.2f} ms, recorded {r['recorded_ms']:.2f} ms, "
          f"ratio {r['ratio']:.4f}; recorder's own time per step: on_step {r['on_step_us']:.1f} us + "
          f"writer {r['write_us']:.1f} us = {100 * r['own_share']:.3f} % of a step ({r['steps']} recorded steps)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000, help="0: only the recording cost")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--opens", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=3, help="plain/recorded demo runs, alternated")
    ap.add_argument("--train-steps", type=int, default=60)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="guitrainer-runs-bench-"))
    os.environ.setdefault("GUITRAINER_HOME", str(tmp / "home"))
    try:
        from PySide6.QtWidgets import QApplication, QLabel

        app = QApplication.instance() or QApplication([])
        window = QLabel("the app's window is already open when the Runs page is first shown")
        window.show()  # Qt's one-time costs of a first window (fonts, style) are not the page's
        app.processEvents()
        db = tmp / "runs.sqlite3"
        if not args.runs:
            r = bench_recording(args.pairs, args.train_steps, tmp)
            _print_recording(r)
            return
        made = make_store(db, args.runs, args.steps)
        print(f"store: {args.runs} runs x {args.steps} steps made in {made:.1f} s, {db.stat().st_size / 1e6:.1f} MB")
        p = bench_page(app, db, args.opens)
        fs, ch = p["first_screen_ms"], p["chart_ms"]
        print(f"page: {p['rows']} rows; import {p['import_ms']:.0f} ms; first screen cold {fs[0]:.0f} ms "
              f"(incl. import), warm median {statistics.median(fs[1:] or fs):.0f} ms, max {max(fs):.0f} ms; "
              f"chart of the newest run median {statistics.median(ch):.0f} ms (first {ch[0]:.0f} ms, incl. pyqtgraph)")  # fmt: skip
        size = bench_size(tmp)
        print(f"size: {size['bytes'] / 1e6:.2f} MB per 10,000 steps (empty store {size['empty'] / 1e3:.0f} kB)")
        if args.pairs:
            _print_recording(bench_recording(args.pairs, args.train_steps, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
