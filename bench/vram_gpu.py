"""Measure real training steps on a CUDA GPU and compare with the estimate (SD 1.5 half of the grid).

Runs only where CUDA exists (< 8 minutes on an H100-class GPU). For every SD 1.5 point of
``bench/vram_calibrate.py``'s grid: build the model from the bundled config (random weights), inject LoRA,
run a warm-up step, reset the peak, run one more step, and record ``torch.cuda.max_memory_allocated`` and
``max_memory_reserved``. Writes ``bench/vram_gpu.csv`` and prints the relative errors of the estimate's
``allocated`` (vs max allocated) and ``total - CUDA context`` (vs max reserved).

    python bench/vram_gpu.py [--csv bench/vram_gpu.csv] [--family sd15]
"""

from __future__ import annotations

import argparse
import csv
import gc
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=ROOT / "bench" / "vram_gpu.csv")
    ap.add_argument("--family", default="sd15", choices=("sd15", "sdxl", "demo"))
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (use bench/vram_calibrate.py for the fake-tensor tracker)")
        return 2
    from vram_calibrate import KEYS, config_for, grid

    from guitrainer.core.memory import estimate
    from guitrainer.engine.memory.measure import measure_training_step

    name = torch.cuda.get_device_name()
    total_memory = torch.cuda.get_device_properties(0).total_memory
    points = [p for p in grid() if p["family"] == args.family]
    rows = []
    t_start = time.perf_counter()
    for i, pt in enumerate(points):
        cfg = config_for(pt)
        try:
            m = measure_training_step(cfg, method="cuda")
        except torch.cuda.OutOfMemoryError:
            print(f"[{i + 1}/{len(points)}] {pt}: out of memory on {name}")
            torch.cuda.empty_cache()
            continue
        b = estimate.estimate(cfg, device=SimpleNamespace(total_memory=total_memory))  # a CUDA GPU: its context, slack
        err = (b.allocated - m.peak) / m.peak
        err_reserved = (b.total - b.get("cuda_context") - m.reserved) / m.reserved if m.reserved else float("nan")
        rows.append(dict(pt, device=name, device_total=total_memory, measured_peak=m.peak, measured_reserved=m.reserved,
                         measured_static=m.static, estimate_allocated=b.allocated, estimate_total=b.total,
                         rel_error=round(err, 4), rel_error_reserved=round(err_reserved, 4), seconds=round(m.seconds, 1)))
        print(f"[{i + 1}/{len(points)}] {pt} allocated {m.peak / 2**30:.2f} GiB (est {b.allocated / 2**30:.2f}), "
              f"reserved {m.reserved / 2**30:.2f} GiB, {m.seconds:.1f} s", flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    if not rows:
        return 1
    fields = [*KEYS, "device", "device_total", "measured_peak", "measured_reserved", "measured_static",
              "estimate_allocated", "estimate_total", "rel_error", "rel_error_reserved", "seconds"]
    with open(args.csv, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    errs = [abs(r["rel_error"]) for r in rows]
    print(f"{name}: {len(rows)} points in {time.perf_counter() - t_start:.0f} s; |estimate - max_allocated| / "
          f"max_allocated: median {statistics.median(errs):.1%}, worst {max(errs):.1%}; wrote {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
