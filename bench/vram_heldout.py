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


def _point(family: str, res: int, batch: int, prec: str, ckpt: bool, opt: str, rank: int, targets: str = "attention",
           train_te: bool = False) -> dict:
    """A grid point in vram_calibrate's form (latents cached; text embeddings cached for SDXL unless trained)."""
    return dict(family=family, resolution=res, batch=batch, precision=prec, checkpointing=ckpt, optimizer=opt,
                rank=rank, targets=targets, cache_latents=True, train_text_encoder=train_te,
                cache_text=family == "sdxl" and not train_te)


POINTS = [
    _point("sdxl", 512, 4, "fp16", True, "AdamW", 4),
    _point("sdxl", 1024, 1, "bf16", True, "AdamW", 32, "attention_ff"),
    _point("sdxl", 768, 2, "fp32", True, "AdamW8bit", 8),
    _point("sdxl", 640, 1, "fp16", False, "AdamW", 32),
    _point("sd15", 640, 3, "bf16", False, "AdamW", 24, "attention_ff"),
    _point("sd15", 512, 1, "fp16", True, "AdamW", 16, train_te=True),
    _point("sd15", 512, 2, "fp32", False, "AdamW", 8, train_te=True),
]


def main() -> int:
    from guitrainer.core.memory import estimate
    from guitrainer.engine.memory.measure import measure_training_step

    errors = []
    print("| family | px | batch | precision | ckpt | optimizer | rank | targets | train TE | measured | estimate | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pt in POINTS:
        cfg = config_for(pt)
        t0 = time.perf_counter()
        m = measure_training_step(cfg, method="fake")
        est = estimate.estimate(cfg).allocated
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
