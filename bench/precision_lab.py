"""The precision lab's table on this machine: the demo model and a mid-size model, and the lab's own overhead.

The demo model is the Demo preset (64 px, batch 2, rank 4). The mid model is bench/train_step.py's
(UNet 128/256/512, 256 px, batch 2, cached latents). On a machine without CUDA the mid model's fp16
candidate is left out unless asked for: CPU fp16 convolutions take ~70 s a step there (bench/RESULTS.md).

    python bench/precision_lab.py [--steps 3] [--warmup 1] [--models demo,mid] [--mid-fp16-on-cpu] [--fp8] [--json FILE]

Overhead: the lab's total time (loading the model once per candidate, set-up, warm-up, evaluation, the
throw-away saves) against the sum of its timed steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from guitrainer.core.precision.lab import Candidate, format_table  # noqa: E402
from guitrainer.core.precision.measurements import MeasurementStore  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3, help="timed steps per candidate")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--models", default="demo,mid")
    ap.add_argument("--mid-fp16-on-cpu", action="store_true", help="also fp16 on the mid model without CUDA (slow)")
    ap.add_argument("--fp8", action="store_true", help="also each precision with fp8 base weights (six candidates)")
    ap.add_argument("--json", help="write the reports here")
    args = ap.parse_args()
    from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
    from guitrainer.engine.lab.precision_lab import compare_precisions

    reports = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("GUITRAINER_HOME", str(Path(tmp) / "home"))
        store = MeasurementStore(Path(tmp) / "lab.json")
        print(f"torch {torch.__version__}, cpu_count {os.cpu_count()}, CUDA {torch.cuda.is_available()}")
        for model in args.models.split(","):
            candidates = [Candidate(t, w) for w in (("auto", "fp8") if args.fp8 else ("auto",))
                          for t in ("fp32", "fp16", "bf16")]
            if model == "mid":
                from train_step import build_mid_model, config

                base = Path(tmp) / "mid"
                build_mid_model(base)
                cfg = config(str(base), 256, "fp32", 1, str(Path(tmp) / "out"))
                if not torch.cuda.is_available() and not args.mid_fp16_on_cpu:
                    candidates = [c for c in candidates if c.training != "fp16"]
                    print("mid: fp16 left out on this CPU (~70 s/step; --mid-fp16-on-cpu to include it)")
            else:
                cfg = PresetStore().get(DEFAULT_PRESET).config()
            t0 = time.perf_counter()
            report = compare_precisions(cfg, candidates, args.steps, warmup=args.warmup, store=store)
            wall = time.perf_counter() - t0
            print(f"\n== {model} (wall {wall:.1f} s)")
            print(format_table(report), flush=True)
            reports[model] = report.to_dict()
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
