"""fp8 frozen weights: the VRAM estimate against the tracker, and the estimate's table for SD 1.5 / SDXL.

The tracker (``engine.memory.measure_training_step(method="fake")``) runs the real training step on fake tensors
and counts every allocation, so it needs no GPU. Each point is measured with the base weights in the training
precision ("auto") and in fp8.

    python bench/fp8_memory.py             # both tables (~2 min on 2 cores)
    python bench/fp8_memory.py --table     # the estimate's table only (instant)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from guitrainer.base.units import MiB, format_bytes  # noqa: E402
from guitrainer.config import TrainingConfig  # noqa: E402
from guitrainer.core.memory import estimate  # noqa: E402

#: (family, px, gradient checkpointing) of the tracked points
POINTS = [("sd15", 512, True), ("sd15", 768, True), ("sdxl", 512, True), ("sdxl", 1024, True),
          ("sd15", 512, False), ("sdxl", 1024, False)]


def config(family: str, px: int, base: str, ckpt: bool, precision: str = "fp16", cached: bool = False) -> TrainingConfig:
    c = TrainingConfig()
    c.model.family, c.precision.training, c.precision.base_weights = family, precision, base
    c.dataset.resolution, c.schedule.batch_size, c.network.rank, c.optimizer.name = px, 1, 16, "AdamW"
    c.precision.gradient_checkpointing, c.precision.cache_latents = ckpt, cached
    return c


def table() -> None:
    print("| model | resolution | frozen weights, bf16 | frozen weights, fp8 | widened fp8 weights | total, bf16 | total, fp8 | saving |")
    print("|---|---|---|---|---|---|---|---|")
    for family in ("sd15", "sdxl"):
        for px in (512, 1024):
            auto, fp8 = (estimate.estimate(config(family, px, b, True, "bf16", cached=True)) for b in ("auto", "fp8"))
            weights = [e.get("unet") + e.get("text_encoders") for e in (auto, fp8)]
            saving = fp8.total - auto.total
            print(f"| {family} | {px} px | {format_bytes(weights[0])} | {format_bytes(weights[1])} | "
                  f"{format_bytes(fp8.get('fp8_widening'))} | {format_bytes(auto.total)} | {format_bytes(fp8.total)} | "
                  f"{format_bytes(saving)} ({100 * saving / auto.total:.0f} %) |")


def tracked() -> None:
    from guitrainer.engine.memory.measure import measure_training_step

    print("| model | px | ckpt | base | frozen measured / estimate | peak measured / estimate (error) | s |")
    print("|---|---|---|---|---|---|---|")
    for family, px, ckpt in POINTS:
        for base in ("auto", "fp8"):
            t = time.perf_counter()
            c = config(family, px, base, ckpt)
            m, e = measure_training_step(c, method="fake"), estimate.estimate(c)
            frozen = e.get("unet") + e.get("text_encoders") + e.get("vae")
            print(f"| {family} | {px} | {'on' if ckpt else 'off'} | {base} | {m.frozen_weights / MiB:.0f} / "
                  f"{frozen / MiB:.0f} MiB | {m.peak / MiB:.0f} / {e.allocated / MiB:.0f} MiB "
                  f"({100 * (e.allocated / m.peak - 1):+.1f} %) | {time.perf_counter() - t:.0f} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="only the estimate's table")
    args = ap.parse_args()
    table()
    if not args.table:
        print()
        tracked()
    return 0


if __name__ == "__main__":
    sys.exit(main())
