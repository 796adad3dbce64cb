"""Held-out check of the VRAM estimator: configurations the constants were NOT fitted on.

``bench/vram_calibrate.py`` fits two activation constants per (family, precision, checkpointing) group; SDXL
has only two grid points per group, so its fit is exact by construction there. This measures other points
the same way (tracked fake tensors, ``engine.memory.measure_training_step``) and prints the estimator's error
on each, without refitting. Text-encoder training appears here only (no grid point trains it).

    python bench/vram_heldout.py          # ~5 min on 2 CPU cores
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vram_calibrate import config_for  # noqa: E402

POINTS = [
    dict(family="sdxl", resolution=512, batch=4, precision="fp16", checkpointing=True, optimizer="AdamW", rank=4,
         targets="attention", cache_latents=True, train_text_encoder=False, cache_text=True),
    dict(family="sdxl", resolution=1024, batch=1, precision="bf16", checkpointing=True, optimizer="AdamW", rank=32,
         targets="attention_ff", cache_latents=True, train_text_encoder=False, cache_text=True),
    dict(family="sdxl", resolution=768, batch=2, precision="fp32", checkpointing=True, optimizer="AdamW8bit", rank=8,
         targets="attention", cache_latents=True, train_text_encoder=False, cache_text=True),
    dict(family="sdxl", resolution=640, batch=1, precision="fp16", checkpointing=False, optimizer="AdamW", rank=32,
         targets="attention", cache_latents=True, train_text_encoder=False, cache_text=True),
    dict(family="sd15", resolution=640, batch=3, precision="bf16", checkpointing=False, optimizer="AdamW", rank=24,
         targets="attention_ff", cache_latents=True, train_text_encoder=False, cache_text=False),
    dict(family="sd15", resolution=512, batch=1, precision="fp16", checkpointing=True, optimizer="AdamW", rank=16,
         targets="attention", cache_latents=True, train_text_encoder=True, cache_text=False),
    dict(family="sd15", resolution=512, batch=2, precision="fp32", checkpointing=False, optimizer="AdamW", rank=8,
         targets="attention", cache_latents=True, train_text_encoder=True, cache_text=False),
]


def main() -> int:
    from guitrainer.core import vram
    from guitrainer.engine.memory import measure_training_step

    errors = []
    print("| family | px | batch | precision | ckpt | optimizer | rank | targets | train TE | measured | estimate | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pt in POINTS:
        cfg = config_for(pt)
        t0 = time.perf_counter()
        m = measure_training_step(cfg, method="fake")
        est = vram.estimate(cfg).allocated
        err = (est - m.peak) / m.peak
        errors.append(abs(err))
        print(
            f"| {pt['family']} | {pt['resolution']} | {pt['batch']} | {pt['precision']} | {pt['checkpointing']} | "
            f"{pt['optimizer']} | {pt['rank']} | {pt['targets']} | {pt['train_text_encoder']} | "
            f"{m.peak / 2**30:.2f} GiB | {est / 2**30:.2f} GiB | {err:+.1%} |  <!-- {time.perf_counter() - t0:.0f} s -->",
            flush=True,
        )
    errors.sort()
    print(f"held-out points: {len(errors)}, median |error| {errors[len(errors) // 2]:.1%}, worst {errors[-1]:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
