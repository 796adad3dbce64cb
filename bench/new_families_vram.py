"""The VRAM estimate of issue 32's families at full size (Chroma1-HD, Z-Image, Qwen-Image), at their presets' settings and at the
settings the peers publish figures for, part by part (GiB, CUDA context and allocator slack included: what a card
must hold). The estimator's accuracy against the memory tracker is ``bench/transformer_vram.py --family …``.

    python bench/new_families_vram.py            # a few seconds
    python bench/new_families_vram.py --markdown
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guitrainer.base.units import GiB  # noqa: E402
from guitrainer.config import TrainingConfig  # noqa: E402
from guitrainer.config.presets import PresetStore  # noqa: E402
from guitrainer.core.memory.estimate import estimate  # noqa: E402

PRESETS = {"chroma": "Chroma1-HD — 16 GB", "zimage": "Z-Image — 12 GB", "qwenimage": "Qwen-Image — 24 GB"}


@dataclass(frozen=True)
class Card:
    total_memory: int


def variant(family: str, *, resolution: int, base_weights: str, cache_text: bool = True, batch: int = 1) -> TrainingConfig:
    """The family's preset with the settings a peer's figure is for."""
    c = PresetStore().get(PRESETS[family]).config()
    c.dataset.resolution = resolution
    c.precision.base_weights = base_weights
    c.precision.cache_text_encoder_outputs = cache_text
    c.schedule.batch_size = batch
    return c


ROWS = [
    ("chroma", "preset (1024 px, fp8)", dict(resolution=1024, base_weights="fp8")),
    ("chroma", "bf16 frozen weights, 1024 px", dict(resolution=1024, base_weights="auto")),
    ("chroma", "int8, 1024 px", dict(resolution=1024, base_weights="int8")),
    ("chroma", "nf4, 1024 px", dict(resolution=1024, base_weights="nf4")),
    ("chroma", "fp8, 512 px", dict(resolution=512, base_weights="fp8")),
    ("zimage", "preset (1024 px, fp8)", dict(resolution=1024, base_weights="fp8")),
    ("zimage", "bf16 frozen weights, 1024 px", dict(resolution=1024, base_weights="auto")),
    ("zimage", "int8, 1024 px", dict(resolution=1024, base_weights="int8")),
    ("zimage", "nf4, 1024 px", dict(resolution=1024, base_weights="nf4")),
    ("zimage", "fp8, 512 px, batch 2", dict(resolution=512, base_weights="fp8", batch=2)),
    ("qwenimage", "preset (1024 px, nf4)", dict(resolution=1024, base_weights="nf4")),
    ("qwenimage", "fp8, 1024 px (musubi-tuner's 30 GB row)", dict(resolution=1024, base_weights="fp8")),
    ("qwenimage", "bf16 frozen weights, 1024 px (musubi-tuner's 42 GB row)", dict(resolution=1024, base_weights="auto")),
    ("qwenimage", "int8, 1024 px", dict(resolution=1024, base_weights="int8")),
    ("qwenimage", "fp8, 512 px (OneTrainer's presets' size)", dict(resolution=512, base_weights="fp8")),
    ("qwenimage", "nf4, 512 px", dict(resolution=512, base_weights="nf4")),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    head = ("model", "settings", "total GiB", "frozen weights GiB", "activations GiB", "LoRA + grads + optimizer GiB")
    print(("| " + " | ".join(head) + " |\n|" + "---|" * len(head)) if args.markdown else "  ".join(head))
    for family, label, kw in ROWS:
        b = estimate(variant(family, **kw), device=Card(24 * GiB))
        parts = {p.key: p.bytes for p in b.parts}
        frozen = parts.get("unet", 0) + parts.get("fp8_widening", 0) + parts.get("text_encoders", 0)
        lora = sum(v for k, v in parts.items() if k.startswith(("lora", "optimizer")))
        row = (PRESETS[family].split(" — ")[0], label, f"{b.total / GiB:.2f}", f"{frozen / GiB:.2f}",
               f"{parts.get('activations', 0) / GiB:.2f}", f"{lora / GiB:.2f}")
        print(("| " + " | ".join(row) + " |") if args.markdown else "  ".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
