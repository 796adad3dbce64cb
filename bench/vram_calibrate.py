"""Fit the VRAM estimator's activation constants to measured training steps, and compare.

Measures every grid point with :func:`guitrainer.engine.memory.measure.measure_training_step` (tracked fake tensors,
no GPU; ``--method cuda`` on a GPU), fits ``ACTIVATION_FIT`` / ``VAE_ENCODE_FIT`` by least squares on the
relative error, optionally writes them into ``guitrainer/core/memory/estimate.py`` (``--write``), then writes the grid,
measurements and estimates to ``bench/vram_grid.csv`` and prints the worst and median relative error.

    python bench/vram_calibrate.py --write          # measure (~5 min on 2 CPU cores), fit, write
    python bench/vram_calibrate.py --reuse          # refit / recompare from the stored CSV
"""

from __future__ import annotations

import argparse
import csv
import importlib
import logging
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guitrainer.config import TrainingConfig  # noqa: E402
from guitrainer.core.memory import estimate, specs  # noqa: E402

log = logging.getLogger("vram_calibrate")
CSV_PATH = ROOT / "bench" / "vram_grid.csv"
FIELDS = [
    "family", "resolution", "batch", "precision", "checkpointing", "optimizer", "rank", "targets",
    "cache_latents", "train_text_encoder", "cache_text", "method", "measured_peak", "measured_static",
    "estimate_allocated", "estimate_total", "rel_error", "seconds",
]
KEYS = FIELDS[:11]


def grid() -> list[dict[str, Any]]:
    """>= 24 points: SD 1.5 and SDXL, 512-1024 px, batch 1/2/4, checkpointing on/off, fp16/bf16/fp32,
    AdamW/AdamW8bit, rank 4-128, all three target sets, uncached latents, and the demo model."""
    pts: list[dict[str, Any]] = []

    def add(family: str, res: int, batch: int, prec: str, gc: bool, opt: str, rank: int, targets: str = "attention",
            cache_latents: bool = True, train_te: bool = False, text_cached: bool = False) -> None:
        pts.append(dict(family=family, resolution=res, batch=batch, precision=prec, checkpointing=gc, optimizer=opt,
                        rank=rank, targets=targets, cache_latents=cache_latents, train_text_encoder=train_te,
                        cache_text=text_cached))

    for gc in (False, True):
        for prec in ("fp16", "fp32"):
            add("sd15", 512, 1, prec, gc, "AdamW", 16)
            add("sd15", 768, 2, prec, gc, "AdamW8bit", 64, "attention_ff")
            add("sd15", 512, 4, prec, gc, "AdamW", 128, "attention_ff_proj")
            # SDXL steps take ~30 s each to simulate on 2 cores: two points per group, text embeddings cached
            add("sdxl", 768, 1, prec, gc, "AdamW", 16, text_cached=True)
            add("sdxl", 1024, 2, prec, gc, "AdamW8bit", 64, "attention_ff", text_cached=True)
    add("sd15", 768, 1, "bf16", False, "AdamW8bit", 4)
    add("sd15", 512, 2, "bf16", True, "AdamW", 32)
    add("sd15", 768, 1, "fp16", True, "AdamW", 16, cache_latents=False)
    add("sdxl", 1024, 1, "bf16", True, "AdamW8bit", 128, "attention_ff_proj", text_cached=True)
    add("sdxl", 1024, 1, "fp16", True, "AdamW", 16, cache_latents=False)
    add("sd15", 1024, 1, "fp16", True, "AdamW8bit", 16)
    for gc in (False, True):
        for prec in ("fp16", "fp32"):
            add("demo", 256, 2, prec, gc, "AdamW", 4)
            add("demo", 512, 1, prec, gc, "AdamW", 16, "attention_ff_proj")
            add("demo", 128, 4, prec, gc, "AdamW", 8, "attention_ff")
    add("demo", 256, 1, "fp16", False, "AdamW", 4, cache_latents=False)
    return pts


def config_for(pt: dict[str, Any]) -> TrainingConfig:
    c = TrainingConfig()
    c.set("model.family", pt["family"])
    c.set("dataset.resolution", int(pt["resolution"]))
    c.set("schedule.batch_size", int(pt["batch"]))
    c.set("precision.training", pt["precision"])
    c.set("precision.gradient_checkpointing", _bool(pt["checkpointing"]))
    c.set("optimizer.name", pt["optimizer"])
    c.set("network.rank", int(pt["rank"]))
    c.set("network.alpha", float(pt["rank"]))
    c.set("network.target_modules", pt["targets"])
    c.set("precision.cache_latents", _bool(pt["cache_latents"]))
    c.set("network.train_text_encoder", _bool(pt["train_text_encoder"]))
    c.set("precision.cache_text_encoder_outputs", _bool(pt.get("cache_text", False)))
    return c


def _bool(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")


def measure(points: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    from guitrainer.engine.memory.measure import measure_training_step

    rows = []
    partial = CSV_PATH.with_suffix(".partial.csv")
    for i, pt in enumerate(points):
        t0 = time.perf_counter()
        m = measure_training_step(config_for(pt), method=method)
        row = dict(pt, method=m.method, measured_peak=m.peak, measured_static=m.static, seconds=round(time.perf_counter() - t0, 1))
        rows.append(row)
        with open(partial, "a", encoding="utf-8") as f:  # progress survives an interrupted run
            f.write(repr(row) + "\n")
        print(f"[{i + 1}/{len(points)}] {pt} peak {m.peak / 2**30:.2f} GiB ({row['seconds']} s)", flush=True)
    return rows


def _non_activation(cfg: TrainingConfig) -> int:
    """What the estimate puts next to the activations in the measured peak."""
    b = estimate.estimate(cfg)
    return b.allocated - b.get("activations")


def fit(rows: list[dict[str, Any]]) -> tuple[dict[tuple[str, str, bool], tuple[float, float, float]], dict[str, float]]:
    """Least squares on relative error: activations per sample = px * (a + k * rank * T)."""
    import numpy as np

    saved_act, saved_vae = dict(estimate.ACTIVATION_FIT), dict(estimate.VAE_ENCODE_FIT)
    estimate.ACTIVATION_FIT.clear()
    estimate.VAE_ENCODE_FIT.clear()
    try:
        groups: dict[tuple[str, str, bool], list[tuple[list[float], float]]] = {}
        vae_rows: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            cfg = config_for(r)
            spec = specs.spec_of(r["family"])
            y = float(r["measured_peak"]) - _non_activation(cfg)
            if _bool(r["train_text_encoder"]):
                continue
            b, px = int(r["batch"]), (int(r["resolution"]) // 8) ** 2
            if not _bool(r["cache_latents"]):
                vae_w = 4 if (r["family"] == "sdxl" and r["precision"] == "fp16") or r["precision"] == "fp32" else 2
                vae_rows.setdefault(r["family"], []).append((b * int(r["resolution"]) ** 2 * vae_w, y))
                continue
            tokens = sum(c * f for _, _, c, f in spec.denoiser_lora[r["targets"]])
            key = (r["family"], "fp32" if r["precision"] == "fp32" else "half", _bool(r["checkpointing"]))
            groups.setdefault(key, []).append(([b * px, b * px * int(r["rank"]) * tokens], y))
        act: dict[tuple[str, str, bool], tuple[float, float, float]] = {}
        for key, pts in sorted(groups.items()):
            x = np.array([p[0] for p in pts], dtype=float)
            y = np.array([p[1] for p in pts], dtype=float)
            w = 1.0 / y
            coef, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
            for j in (1, 0):  # activations never shrink with rank or size: refit without a negative term
                if coef[j] < 0:
                    keep = 1 - j
                    c1, *_ = np.linalg.lstsq(x[:, [keep]] * w[:, None], y * w, rcond=None)
                    coef = np.zeros(2)
                    coef[keep] = max(float(c1[0]), 0.0)
            act[key] = (round(float(coef[0]), 3), round(float(coef[1]), 5), 0.0)
        vae_fit: dict[str, float] = {}
        for fam, pts in vae_rows.items():
            # the VAE peak only matters where it exceeds the UNet's; fit it as the upper envelope of these points
            vae_fit[fam] = round(max(y / x for x, y in pts), 4)
        return act, vae_fit
    finally:
        estimate.ACTIVATION_FIT.update(saved_act)
        estimate.VAE_ENCODE_FIT.update(saved_vae)


def write_constants(act: dict, vae_fit: dict) -> None:
    path = ROOT / "guitrainer" / "core" / "memory" / "estimate.py"
    text = path.read_text(encoding="utf-8")
    lines = ["# >>> fitted by bench/vram_calibrate.py --write", "ACTIVATION_FIT: dict[tuple[str, str, bool], tuple[float, float, float]] = {"]
    lines += [f"    {k!r}: {v!r}," for k, v in sorted(act.items())]
    lines += ["}", f"VAE_ENCODE_FIT: dict[str, float] = {dict(sorted(vae_fit.items()))!r}", "# <<< fitted"]
    new, n = re.subn(r"# >>> fitted.*?# <<< fitted", "\n".join(lines), text, flags=re.S)
    if n != 1:
        raise SystemExit("fitted-constants markers not found in core/memory/estimate.py")
    path.write_text(new, encoding="utf-8")
    print(f"wrote fitted constants into {path.relative_to(ROOT)}")


def compare(rows: list[dict[str, Any]]) -> list[float]:
    errs = []
    for r in rows:
        b = estimate.estimate(config_for(r))
        r["estimate_allocated"] = b.allocated
        r["estimate_total"] = b.total
        r["rel_error"] = round((b.allocated - float(r["measured_peak"])) / float(r["measured_peak"]), 4)
        errs.append(abs(r["rel_error"]))
    return errs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reuse", action="store_true", help="reuse measurements from the CSV instead of measuring")
    ap.add_argument("--write", action="store_true", help="write the fitted constants into guitrainer/core/memory/estimate.py")
    ap.add_argument("--method", default="fake", choices=("fake", "cuda", "auto"))
    ap.add_argument("--csv", type=Path, default=CSV_PATH)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.reuse:
        with open(args.csv, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    else:
        t0 = time.perf_counter()
        rows = measure(grid(), args.method)
        print(f"measured {len(rows)} points in {time.perf_counter() - t0:.0f} s")
    act, vae_fit = fit(rows)
    print("ACTIVATION_FIT =", act)
    print("VAE_ENCODE_FIT =", vae_fit)
    if args.write:
        write_constants(act, vae_fit)
        importlib.reload(estimate)
    else:
        estimate.ACTIVATION_FIT.clear()
        estimate.ACTIVATION_FIT.update(act)
        estimate.VAE_ENCODE_FIT.clear()
        estimate.VAE_ENCODE_FIT.update(vae_fit)
    errs = compare(rows)
    with open(args.csv, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    worst = max(range(len(rows)), key=lambda i: errs[i])
    print(f"{len(rows)} points: median |estimate - measured| / measured = {statistics.median(errs):.1%}, "
          f"worst = {errs[worst]:.1%} ({ {k: rows[worst][k] for k in KEYS} })")
    print(f"within 10 %: {sum(e <= 0.10 for e in errs)}/{len(errs)}; wrote {args.csv.relative_to(ROOT)}")
    return 0 if max(errs) <= 0.10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
