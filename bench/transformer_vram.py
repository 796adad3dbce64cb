"""The VRAM estimate of the full-size transformer families against the memory tracker (issue 29, issue 32).

Every point is measured by :func:`guitrainer.engine.memory.measure.measure_training_step` — the trainer's step
through the family seam on tracked fake tensors (:mod:`guitrainer.engine.memory.family_step`: no GPU, no weights,
~15 s a point on one core) — and estimated by :func:`guitrainer.core.memory.estimate.estimate`; the table prints
both (GiB, comparable with ``torch.cuda.max_memory_allocated``: no CUDA context, no allocator slack) and their ratio.

``--fit`` measures the fit points instead — reduced depth (a few blocks, full width), 256 and 512 px, bf16, text
outputs cached, no fp8 — and fits ``TRANSFORMER_ACTIVATION_FIT`` by least squares on the relative error (``--write``
puts it into ``guitrainer/core/memory/estimate.py``). The full-size table is then an out-of-sample check: other
depths, 1024 px, fp8 and the text encoders never entered the fit.

    python bench/transformer_vram.py --fit --write     # ~3 min on one core
    python bench/transformer_vram.py                   # 32 points, ~8 min
    python bench/transformer_vram.py --markdown        # the table for bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guitrainer.config import TrainingConfig  # noqa: E402
from guitrainer.core.families.facts import ModelSpec  # noqa: E402
from guitrainer.core.families.registry import facts  # noqa: E402
from guitrainer.core.memory import estimate  # noqa: E402

GiB = 2**30
LABELS = {"flux1": "Flux.1 dev", "sd35": "SD 3.5 Large", "chroma": "Chroma1-HD", "zimage": "Z-Image",
          "qwenimage": "Qwen-Image"}
#: the fit's reduced depths: Flux (double, single) blocks, SD 3.5 joint blocks
FIT_DEPTHS: dict[str, list[tuple[int, ...]]] = {
    "flux1": [(1, 1), (3, 1), (1, 4), (3, 4), (6, 8)], "sd35": [(1,), (3,), (6,), (10,)],
    "chroma": [(1, 1), (3, 1), (1, 4), (3, 4), (6, 8)],
    "zimage": [(2, 2, 1), (2, 2, 3), (2, 2, 6), (2, 2, 10)],  # the refiners kept, fewer main layers
    "qwenimage": [(1,), (3,), (6,), (10,)],
}
FIT_RESOLUTIONS = (256, 384, 512)
Fit = tuple[tuple[float, ...], float, tuple[float, ...]]


@dataclass(frozen=True)
class Point:
    family: str
    resolution: int
    fp8: bool
    text_cached: bool
    checkpointing: bool
    blocks: tuple[int, ...] | None = None
    batch: int = 1
    rank: int = 16


def make_config(pt: Point) -> TrainingConfig:
    """bf16, latents cached, AdamW, rank 16 on the attention layers (the defaults), as ``pt`` says otherwise."""
    c = TrainingConfig()
    c.model.family = pt.family
    c.dataset.resolution = pt.resolution
    c.schedule.batch_size = pt.batch
    c.network.rank = pt.rank
    c.network.alpha = float(pt.rank)
    p = c.precision
    p.training = "bf16"
    p.cache_latents = True
    p.cache_text_encoder_outputs = pt.text_cached
    p.gradient_checkpointing = pt.checkpointing
    p.base_weights = "fp8" if pt.fp8 else "auto"
    return c


def spec_at(family: str, blocks: tuple[int, ...] | None) -> ModelSpec:
    """The estimator's table of the full-size model, or of the same width at ``blocks`` depth."""
    if blocks is None:
        spec = facts(family).spec
        assert spec is not None
        return spec
    if family == "flux1":
        from guitrainer.engine.families.flux1.spec import as_model_spec, flux_spec

        return as_model_spec(flux_spec((blocks[0], blocks[1])))
    if family == "chroma":
        from guitrainer.engine.families.chroma.spec import as_model_spec as chroma_spec

        return chroma_spec((blocks[0], blocks[1]))
    if family == "zimage":
        from guitrainer.engine.families.zimage.spec import as_model_spec as zimage_spec

        return zimage_spec(blocks[-1])
    if family == "qwenimage":
        from guitrainer.engine.families.qwenimage.spec import as_model_spec as qwenimage_spec

        return qwenimage_spec(blocks[-1])
    from guitrainer.engine.families.sd35.spec import parameter_table

    return parameter_table("5-large", blocks[0]).spec


def measure(pt: Point) -> Any:
    from guitrainer.engine.memory.measure import measure_training_step

    return measure_training_step(make_config(pt), method="fake", blocks=pt.blocks)


def estimated(pt: Point) -> estimate.VramBreakdown:
    return estimate.estimate(make_config(pt), spec_at(pt.family, pt.blocks), device=None)


def full_size_points() -> list[Point]:
    """Each model at 512 and 1024 px, fp8 frozen weights off / on, text outputs cached / not, checkpointing on / off:
    16 points each."""
    return [
        Point(fam, res, fp8, cached, ckpt)
        for fam, res, fp8, cached, ckpt in itertools.product(tuple(LABELS), (512, 1024), (False, True),
                                                             (True, False), (True, False))
    ]


def fit_points(family: str, checkpointing: bool) -> list[Point]:
    return [Point(family, res, False, True, checkpointing, blocks)
            for blocks in FIT_DEPTHS[family] for res in FIT_RESOLUTIONS]


def tokens(pt: Point) -> int:
    fam = facts(pt.family)
    return fam.image_tokens(pt.resolution, pt.resolution) + fam.text_tokens


def fit(family: str, checkpointing: bool) -> tuple[Fit, list[tuple[Point, float, float]]]:
    """Measure the fit points and solve ``activations = N * (sum_j a_j * blocks_j + p) + sum_j c_j * blocks_j`` by
    least squares on the relative error; the activations are the measured peak less every other part of the
    estimate."""
    import numpy as np

    rows, ys, pts = [], [], []
    for pt in fit_points(family, checkpointing):
        m = measure(pt)
        est = estimated(pt)
        others = est.allocated - est.get("activations")
        y = m.peak - others
        spec = spec_at(family, pt.blocks)
        n = tokens(pt)
        rows.append([n * count for count, _, _ in spec.blocks] + [n] + [count for count, _, _ in spec.blocks])
        ys.append(y)
        pts.append((pt, m.peak, others))
    a = np.array(rows, dtype=float)
    y = np.array(ys, dtype=float)
    w = 1.0 / y
    sol, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    lists = len(spec.blocks)
    per_block = tuple(round(float(v), 1) for v in sol[:lists])
    rest = round(float(sol[lists]), 1)
    fixed = tuple(round(float(v), 1) for v in sol[lists + 1:])
    fitted = [(pt, peak, others + float(np.dot(r, sol))) for (pt, peak, others), r in zip(pts, rows)]
    return (per_block, rest, fixed), fitted


def write_fit(fitted: dict[tuple[str, bool], Fit]) -> None:
    """The fitted constants into estimate.py, beside the other families' (a ``--family`` fit replaces only its own)."""
    values = {**estimate.TRANSFORMER_ACTIVATION_FIT, **fitted}
    path = ROOT / "guitrainer" / "core" / "memory" / "estimate.py"
    text = path.read_text(encoding="utf-8")
    body = "\n".join(f"    {key!r}: {val!r}," for key, val in sorted(values.items()))
    block = ("# >>> fitted by bench/transformer_vram.py --write\n"
             "TRANSFORMER_ACTIVATION_FIT: dict[tuple[str, bool], tuple[tuple[float, ...], float, tuple[float, ...]]] = {\n"
             f"{body}\n}}\n# <<< fitted")
    new, n = re.subn(r"# >>> fitted by bench/transformer_vram\.py --write\n.*?# <<< fitted", block, text, flags=re.S)
    if n != 1:
        raise SystemExit("estimate.py has no TRANSFORMER_ACTIVATION_FIT block to replace")
    path.write_text(new, encoding="utf-8")


def _row(pt: Point) -> tuple[str, ...]:
    t0 = time.perf_counter()
    m = measure(pt)
    est = estimated(pt)
    ratio = est.allocated / m.peak
    return (LABELS[pt.family], str(pt.resolution), "fp8" if pt.fp8 else "bf16", "cached" if pt.text_cached else "encoded",
            "on" if pt.checkpointing else "off", f"{est.allocated / GiB:.2f}", f"{m.peak / GiB:.2f}", f"{ratio:.3f}",
            f"{time.perf_counter() - t0:.0f}")


HEAD = ("model", "px", "frozen weights", "text", "checkpointing", "estimate GiB", "measured GiB", "est/meas", "s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", action="store_true", help="measure the reduced-depth fit points and fit the constants")
    ap.add_argument("--write", action="store_true", help="with --fit: write the constants into estimate.py")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--family", choices=sorted(LABELS), help="one model only")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.fit:
        values: dict[tuple[str, bool], Fit] = {}
        for family in [args.family] if args.family else sorted(LABELS):
            for ckpt in (False, True):
                (per_block, rest, fixed), pts = fit(family, ckpt)
                values[(family, ckpt)] = (per_block, rest, fixed)
                print(f"{family} checkpointing={ckpt}: a={per_block} B/token/block, p={rest} B/token, "
                      f"c={tuple(round(c / 2**20, 2) for c in fixed)} MiB/block")
                for pt, peak, est in pts:
                    print(f"   blocks {pt.blocks} {pt.resolution:4d} px: measured {peak / GiB:.3f} GiB, "
                          f"fitted {est / GiB:.3f} GiB ({est / peak:.3f})")
        if args.write:
            write_fit(values)
            print("written to guitrainer/core/memory/estimate.py")
        return 0
    points = [pt for pt in full_size_points() if not args.family or pt.family == args.family]
    if args.markdown:
        print("| " + " | ".join(HEAD) + " |")
        print("|" + "---|" * len(HEAD))
    else:
        print("  ".join(HEAD))
    worst = 0.0
    for pt in points:
        row = _row(pt)
        worst = max(worst, abs(float(row[7]) - 1.0))
        print(("| " + " | ".join(row) + " |") if args.markdown else "  ".join(row), flush=True)
    print(f"\n{len(points)} points, worst |estimate/measured - 1| = {worst:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
