"""The VRAM estimate of network variants against a measured step (tracked fake tensors on CPU, the same
``engine.memory.measure_training_step`` as bench/vram_heldout.py).

The first four rows (LoCon / DoRA, SD 1.5, rank 16, fp16, 512 px, batch 1, with and without checkpointing)
are where ``core/memory/network.py``'s two DoRA constants were solved; the others are held out (the LoHa / LoKr
term has no fitted constant: it is the adapted weights once more, times the checkpointing share).

    python bench/vram_variants.py          # ~6 min on 2 loaded CPU cores
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vram_calibrate import config_for  # noqa: E402

#: (type, resolution, batch, precision, checkpointing, rank, conv rank, train text encoder)
POINTS = [
    ("locon", 512, 1, "fp16", True, 16, 16, False),
    ("dora", 512, 1, "fp16", True, 16, 16, False),
    ("locon", 512, 1, "fp16", False, 16, 16, False),
    ("dora", 512, 1, "fp16", False, 16, 16, False),
    ("locon", 640, 2, "bf16", True, 16, 8, True),
    ("dora", 640, 2, "bf16", True, 16, 8, True),
    ("dora", 512, 1, "fp32", False, 16, 16, False),
    ("loha", 512, 1, "fp16", True, 16, 16, False),
    ("lokr", 512, 1, "fp16", True, 16, 16, False),
    ("loha", 512, 1, "fp16", False, 16, 16, False),
    ("lokr", 640, 2, "bf16", True, 16, 8, True),
]


def main() -> int:
    from guitrainer.core.memory import estimate
    from guitrainer.engine.memory.measure import measure_training_step

    print("| type | px | batch | precision | ckpt | rank / conv rank | train TE | trainable | measured | estimate | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, res, batch, prec, ckpt, rank, conv_rank, te in POINTS:
        cfg = config_for(dict(family="sd15", resolution=res, batch=batch, precision=prec, checkpointing=ckpt,
                              optimizer="AdamW", rank=rank, targets="attention", cache_latents=True,
                              train_text_encoder=te))
        cfg.set("network.type", kind)
        cfg.set("network.conv_rank", conv_rank)
        cfg.set("network.conv_alpha", float(conv_rank))
        t0 = time.perf_counter()
        m = measure_training_step(cfg, method="fake")
        est = estimate.estimate(cfg).allocated
        print(f"| {kind} | {res} | {batch} | {prec} | {ckpt} | {rank} / {conv_rank} | {te} | "
              f"{m.lora_parameter_count / 1e6:.2f} M | {m.peak / 2**20:.0f} MiB | {est / 2**20:.0f} MiB | "
              f"{(est - m.peak) / m.peak:+.1%} |  <!-- {time.perf_counter() - t0:.0f} s -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
