"""One prepared GPU script: every check that needs CUDA, in one run of at most ~8 minutes, one results file.

Sections (each with its own time budget; a section that would overrun the whole is skipped and says so):

1. ``lab_sd15`` / ``lab_sdxl``: the precision lab (:func:`guitrainer.engine.lab.precision_lab.compare_precisions`)
   on SD 1.5 and SDXL architectures: every component built from the bundled configs
   (``resources/models/<family>``) with random weights, stored fp16; the demo images at 512 / 1024 px.
2. ``fp16_scaler``: the fp16 GradScaler path on the SD 1.5 architecture next to fp32 with the same seed: the
   scale and skipped steps per step, the LoRA parameters' dtype (fp32 master weights), the loss drift.
3. ``bnb_8bit``: bitsandbytes' AdamW8bit, Lion8bit and PagedAdamW8bit on CUDA through the real Trainer.
4. ``vram``: the VRAM estimate against ``torch.cuda.max_memory_allocated`` on 12+ configurations
   (:func:`guitrainer.engine.memory.measure.measure_training_step`, SD 1.5 and SDXL points of bench/vram_calibrate.py).
5. ``engine_vs_bare``: the engine's s/step against a bare diffusers-style loop (bench/train_step.py) on the
   SD 1.5 architecture at 512 px, bf16 and fp16.
6. ``transformers``: full-size Flux.1 dev and SD 3.5 Large steps (random weights, bf16, checkpointing, text outputs
   cached; frozen weights bf16 and fp8) through the family seam: s/step and ``max_memory_allocated`` against the
   estimate (bench/transformer_vram.py's configurations).
7. ``offload``: blocks in system RAM (``precision.offload_blocks`` 0, 0.5, 1) on the SDXL architecture at 1024 px
   (SD 1.5 at 512 px when SDXL was not built), checkpointing on: s/step, the step's ``max_memory_allocated``
   against the estimate, the pinned bytes, the offloader's prefetch counts, and the LoRA against the run without
   offload (bitwise, and its largest difference next to two runs without offload: the noise floor).
8. ``storage``: the frozen-weight formats (``precision.base_weights`` auto, fp8, int8, nf4) on the same architecture
   through the real Trainer, which quantises int8 / nf4 on the GPU layer by layer: s/step, the step's
   ``max_memory_allocated`` against the estimate and its weights part, the loss. (Flux.1's int8 / nf4 at full size
   would need its 24 GB folder built first, which the suite's budget has no room for: the SDXL UNet, 85 % of it
   Linear weights, shows the same layers.)

    python bench/gpu_suite.py [--out bench/gpu_suite_results.json] [--budget 470]
    python bench/gpu_suite.py --smoke      # the same code paths on tiny models on a CPU (a minute or two)

Without CUDA (and without ``--smoke``) it prints why and exits 0 without writing anything.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

NO_CUDA = "gpu_suite: no CUDA device here; nothing to measure (run it on a machine with an NVIDIA GPU, or --smoke)."


class Suite:
    """Runs sections within a total time budget and writes the results file after each one."""

    def __init__(self, out: Path, budget: float, smoke: bool):
        self.out, self.budget, self.smoke = out, budget, smoke
        self.t0 = time.perf_counter()
        self.results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "smoke": smoke}

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.t0)

    def section(self, name: str, needs: float, fn: Callable[[], Any]) -> None:
        """Run ``fn`` when at least ``needs`` seconds of the budget are left; record its result or error."""
        if self.left() < needs:
            self.results[name] = {"skipped": f"time budget: {self.left():.0f} s left, needs ~{needs:.0f} s"}
            print(f"== {name}: skipped ({self.results[name]['skipped']})", flush=True)
            self.write()
            return
        print(f"== {name} ({self.left():.0f} s of the budget left)", flush=True)
        t = time.perf_counter()
        try:
            value = fn()
            self.results[name] = {"seconds": round(time.perf_counter() - t, 1), "result": value}
        except Exception as e:  # noqa: BLE001 - one failing section must not lose the others
            self.results[name] = {"seconds": round(time.perf_counter() - t, 1), "error": f"{type(e).__name__}: {e}",
                                  "traceback": traceback.format_exc()}
            print(f"   FAILED: {type(e).__name__}: {e}", flush=True)
        free()
        self.write()

    def write(self) -> None:
        self.results["elapsed_s"] = round(time.perf_counter() - self.t0, 1)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=2, default=str))
        tmp.replace(self.out)


def free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- models


def build_arch_folder(family: str, folder: Path, device: str) -> Path:
    """A diffusers folder of ``family``'s real architecture (bundled configs), random weights, stored fp16."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    src = ROOT / "resources" / "models" / family
    shutil.copytree(src, folder)
    torch.manual_seed(0)
    with torch.device(device):
        parts: dict[str, Any] = {
            "unet": UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(src / "unet")),
            "vae": AutoencoderKL.from_config(AutoencoderKL.load_config(src / "vae")),
        }
        for name in ("text_encoder", "text_encoder_2"):
            if (src / name / "config.json").is_file():
                cfg = CLIPTextConfig.from_pretrained(src / name)
                cls = CLIPTextModelWithProjection if "WithProjection" in (cfg.architectures or [""])[0] else CLIPTextModel
                parts[name] = cls(cfg)
    for name, module in parts.items():
        torch.nn.Module.to(module, torch.float16).save_pretrained(folder / name)  # torch's: no diffusers warning
        del module
    parts.clear()
    free()
    return folder


def build_smoke_folder(family: str, folder: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import build_tiny

    return build_tiny(folder, family)


def base_config(base: str, family: str, resolution: int, batch: int, out: str) -> Any:
    from guitrainer.config import DatasetFolder, TrainingConfig
    from guitrainer.engine.models.demo import ensure_demo_dataset

    cfg = TrainingConfig()
    cfg.model.base, cfg.model.family = base, family
    cfg.dataset.folders = [DatasetFolder(path=str(ensure_demo_dataset()), repeats=4)]
    cfg.dataset.resolution, cfg.dataset.bucketing = resolution, False
    cfg.network.rank, cfg.network.alpha = 16, 16.0
    cfg.optimizer.name, cfg.optimizer.lr = "AdamW", 1e-4
    cfg.schedule.batch_size, cfg.schedule.seed = batch, 0
    cfg.precision.gradient_checkpointing = family == "sdxl"
    cfg.precision.cache_latents = True
    cfg.precision.cache_text_encoder_outputs = family == "sdxl"
    cfg.precision.save = "fp16"
    cfg.output.folder, cfg.output.overwrite = out, True
    return cfg


def train(cfg: Any, steps: int) -> tuple[Any, Any, Any]:
    """The real Trainer for ``steps`` steps: (summary, reporter, trainer)."""
    import torch

    from guitrainer.core.events import NullReporter
    from guitrainer.engine.trainer import Trainer

    cfg.schedule.max_steps = steps
    rep = NullReporter()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg, rep)
    summary = trainer.run()
    return summary, rep, trainer


def _session_attr(trainer: Any, name: str) -> Any:
    """An attribute of the trainer's Session (the restructured engine), else of the trainer itself."""
    session = getattr(trainer, "session", None)
    return getattr(session if session is not None else trainer, name, None)


def step_summary(rep: Any, warmup: int) -> dict[str, Any]:
    timed = [s.seconds_per_step for s in rep.steps[warmup:]] or [s.seconds_per_step for s in rep.steps]
    peaks = [s.peak_memory_bytes for s in rep.steps if s.peak_memory_bytes]
    return {
        "s_per_step": round(statistics.median(timed), 4) if timed else None,
        "peak_allocated_gib": round(max(peaks) / 2**30, 3) if peaks else None,
        "losses": [round(s.loss, 5) for s in rep.steps],
    }


# --------------------------------------------------------------------------- sections


def lab(base: str, family: str, resolution: int, batch: int, steps: int, warmup: int, tmp: Path) -> dict[str, Any]:
    from guitrainer.core.precision.lab import all_candidates, format_table
    from guitrainer.core.precision.measurements import MeasurementStore
    from guitrainer.engine.lab.precision_lab import compare_precisions

    cfg = base_config(base, family, resolution, batch, str(tmp / "out"))
    report = compare_precisions(cfg, all_candidates(), steps, warmup=warmup, store=MeasurementStore(tmp / f"lab_{family}.json"))
    table = format_table(report)
    print(table, flush=True)
    return {"table": table.splitlines(), "report": report.to_dict()}


def fp16_scaler(base: str, family: str, resolution: int, steps: int, tmp: Path) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    for prec in ("fp32", "fp16"):
        cfg = base_config(base, family, resolution, 2, str(tmp / f"scaler_{prec}"))
        cfg.precision.training = prec
        summary, rep, trainer = train(cfg, steps)
        row = {"status": summary.status, "message": summary.message, **step_summary(rep, 2)}
        if prec == "fp16":
            row["scales"] = [s.grad_scale for s in rep.steps]
            row["skipped"] = [s.skipped for s in rep.steps]
            row["skipped_total"] = summary.skipped_steps
            params = _session_attr(trainer, "params") or []
            row["lora_param_dtypes"] = sorted({str(p.dtype) for p in params})
            row["all_lora_fp32"] = bool(params) and all(p.dtype == torch.float32 for p in params)
        out[prec] = row
        del trainer
        free()
    a, b = out["fp32"]["losses"], out["fp16"]["losses"]
    out["max_rel_loss_diff"] = max((abs(x - y) / abs(x) for x, y in zip(a, b) if x), default=None)
    print(json.dumps({k: v for k, v in out.items() if k != "fp32"}, default=str)[:600], flush=True)
    return out


def bnb_8bit(base: str, family: str, resolution: int, steps: int, tmp: Path) -> dict[str, Any]:
    import torch

    try:
        import bitsandbytes as bnb

        version = bnb.__version__
    except Exception as e:  # noqa: BLE001
        return {"skipped": f"bitsandbytes not importable: {e}"}
    out: dict[str, Any] = {"bitsandbytes": version}
    prec = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp16"
    for name in ("AdamW", "AdamW8bit", "Lion8bit", "PagedAdamW8bit"):
        cfg = base_config(base, family, resolution, 2, str(tmp / f"bnb_{name}"))
        cfg.precision.training = prec
        cfg.optimizer.name = name
        summary, rep, trainer = train(cfg, steps)
        out[name] = {
            "status": summary.status,
            "message": summary.message,
            "optimizer_used": _session_attr(trainer, "optimizer_name") or "?",
            "warnings": list(summary.warnings),
            **step_summary(rep, 2),
        }
        print(f"   {name}: {out[name]['status']} via {out[name]['optimizer_used']}, "
              f"{out[name]['s_per_step']} s/step, peak {out[name]['peak_allocated_gib']} GiB", flush=True)
        del trainer
        free()
    return out


def vram_points(smoke: bool, deadline: float) -> dict[str, Any]:
    from vram_calibrate import config_for, grid

    from guitrainer.core.memory import estimate
    from guitrainer.engine.memory.measure import measure_training_step

    if smoke:
        points, method = [p for p in grid() if p["family"] == "demo"][:2], "fake"
    else:
        sd15 = [p for p in grid() if p["family"] == "sd15"]
        sdxl = [p for p in grid() if p["family"] == "sdxl" and p["batch"] == 1]
        points, method = sd15 + sdxl, "cuda"
    rows = []
    for pt in points:
        if time.perf_counter() > deadline:
            break
        cfg = config_for(pt)
        try:
            m = measure_training_step(cfg, method=method)
        except Exception as e:  # noqa: BLE001 - an out-of-memory point is a result too
            rows.append(dict(pt, error=f"{type(e).__name__}: {str(e)[:200]}"))
            free()
            continue
        b = estimate.estimate(cfg)
        err = (b.allocated - m.peak) / m.peak
        rows.append(dict(pt, measured_peak=m.peak, estimate_allocated=b.allocated, rel_error=round(err, 4),
                         measured_reserved=m.reserved, seconds=round(m.seconds, 1)))
        print(f"   {pt['family']} {pt['resolution']}px b{pt['batch']} {pt['precision']} gc={pt['checkpointing']} "
              f"{pt['optimizer']} r{pt['rank']}: measured {m.peak / 2**30:.2f} GiB, estimate {b.allocated / 2**30:.2f} "
              f"({err:+.1%})", flush=True)
        free()
    errs = [abs(r["rel_error"]) for r in rows if "rel_error" in r]
    return {"method": method, "points": rows, "measured": len(errs),
            "median_abs_error": statistics.median(errs) if errs else None, "worst_abs_error": max(errs) if errs else None}


def transformer_steps(smoke: bool, deadline: float) -> dict[str, Any]:
    """Full-size Flux.1 dev and SD 3.5 Large steps with random weights (built on the GPU from the shipped configs
    through the family seam, :mod:`guitrainer.engine.memory.family_step`): bf16, latents and text outputs cached,
    checkpointing on, the frozen weights in bf16 and in fp8; s/step and ``max_memory_allocated`` against the
    estimate. ``--smoke``: the same code at reduced depth (one block per list, full width), 256 px, on fake tensors."""
    from transformer_vram import Point, make_config, spec_at

    from guitrainer.core.memory import estimate
    from guitrainer.engine.memory.measure import measure_training_step

    res, blocks = (256, {"flux1": (1, 1), "sd35": (1,)}) if smoke else (1024, {})
    method = "fake" if smoke else "cuda"
    rows = []
    for family in ("flux1", "sd35"):
        for fp8 in (False, True):
            if time.perf_counter() > deadline:
                rows.append({"family": family, "fp8": fp8, "skipped": "time budget"})
                continue
            pt = Point(family, res, fp8, True, True, blocks.get(family))
            cfg = make_config(pt)
            try:
                m = measure_training_step(cfg, method=method, blocks=pt.blocks)
            except Exception as e:  # noqa: BLE001 - an out-of-memory point is a result too
                rows.append({"family": family, "fp8": fp8, "error": f"{type(e).__name__}: {str(e)[:200]}"})
                free()
                continue
            b = estimate.estimate(cfg, spec_at(family, pt.blocks))
            err = (b.allocated - m.peak) / m.peak
            rows.append({"family": family, "resolution": res, "fp8": fp8, "blocks": pt.blocks, "measured_peak": m.peak,
                         "measured_reserved": m.reserved, "estimate_allocated": b.allocated, "rel_error": round(err, 4),
                         "s_per_step": None if m.step_seconds is None else round(m.step_seconds, 3)})
            print(f"   {family} {res}px {'fp8' if fp8 else 'bf16'}: measured {m.peak / 2**30:.2f} GiB, estimate "
                  f"{b.allocated / 2**30:.2f} ({err:+.1%})"
                  + (f", {m.step_seconds:.2f} s/step" if m.step_seconds else ""), flush=True)
            free()
    return {"method": method, "points": rows}


def engine_vs_bare(base: str, resolution: int, steps: int, precisions: list[str], tmp: Path) -> dict[str, Any]:
    import torch
    from train_step import bare_run, config, engine_run

    threads = max(1, (os.cpu_count() or 2) - 1)
    out: dict[str, Any] = {}
    for prec in precisions:
        cfg = config(base, resolution, prec, steps, str(tmp / f"bare_{prec}"))
        engine = statistics.median(engine_run(cfg, 2))
        free()
        bare = statistics.median(bare_run(cfg, 2, threads))
        free()
        out[prec] = {"engine_s_per_step": round(engine, 4), "bare_s_per_step": round(bare, 4), "ratio": round(engine / bare, 3)}
        print(f"   {prec}: engine {engine:.4f} s/step, bare {bare:.4f}, ratio {engine / bare:.3f}", flush=True)
    torch.set_num_threads(threads)
    return out


def offload(base: str, family: str, resolution: int, steps: int, tmp: Path) -> dict[str, Any]:
    import dataclasses

    import torch

    from guitrainer.core.memory import estimate, specs
    from guitrainer.engine.network.lora import read_lora

    out: dict[str, Any] = {}
    files: dict[str, dict[str, Any]] = {}
    precision = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    for label, share in (("none", 0.0), ("none_again", 0.0), ("half", 0.5), ("all", 1.0)):
        cfg = base_config(base, family, resolution, 1, str(tmp / f"offload_{label}"))
        cfg.precision.training, cfg.precision.gradient_checkpointing = precision, True
        cfg.precision.offload_blocks = share
        cfg.output.name = f"offload_{label}"
        summary, rep, trainer = train(cfg, steps)
        off = _session_attr(trainer, "offloader")
        est = estimate.estimate(cfg, specs.spec_of(family))
        files[label], _meta = read_lora(summary.lora_path)
        out[label] = {
            **step_summary(rep, 1), "share": share, "status": summary.status,
            "estimate_allocated_gib": round(est.allocated / 2**30, 3),
            "estimate_unet_gib": round(est.get("unet") / 2**30, 3),
            "estimate_streamed_gib": round(est.get("offload_stream") / 2**30, 3),
            "pinned_gib": round(off.offloaded_bytes / 2**30, 3) if off is not None else 0.0,
            "offloader": dataclasses.asdict(off.stats) if off is not None else None,
        }
        print(f"   {label}: {out[label]['s_per_step']} s/step, peak {out[label]['peak_allocated_gib']} GiB "
              f"(estimate {out[label]['estimate_allocated_gib']}), pinned {out[label]['pinned_gib']} GiB", flush=True)
        del trainer
        free()

    def diff(a: str, b: str) -> dict[str, Any]:
        x, y = files[a], files[b]
        worst = max(float((x[k].float() - y[k].float()).abs().max()) for k in x)
        return {"bitwise": all(torch.equal(x[k], y[k]) for k in x), "max_abs_diff": worst}

    out["noise_floor"] = diff("none", "none_again")
    out["half_vs_none"] = diff("none", "half")
    out["all_vs_none"] = diff("none", "all")
    print(f"   LoRA vs no offload: half {out['half_vs_none']}, all {out['all_vs_none']}, "
          f"floor {out['noise_floor']}", flush=True)
    return out


def storage(base: str, family: str, resolution: int, steps: int, tmp: Path) -> dict[str, Any]:
    """Each frozen-weight format through the Trainer: speed and memory against the estimate (section 8)."""
    import torch

    from guitrainer.core.memory import estimate, specs

    out: dict[str, Any] = {}
    precision = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    for fmt in ("auto", "fp8", "int8", "nf4"):
        cfg = base_config(base, family, resolution, 1, str(tmp / f"storage_{fmt}"))
        cfg.precision.training, cfg.precision.gradient_checkpointing = precision, True
        cfg.precision.base_weights = fmt
        cfg.output.name = f"storage_{fmt}"
        try:
            summary, rep, trainer = train(cfg, steps)
        except Exception as e:  # noqa: BLE001 - one format failing must not hide the others
            out[fmt] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            free()
            continue
        est = estimate.estimate(cfg, specs.spec_of(family))
        out[fmt] = {
            **step_summary(rep, 1), "status": summary.status, "message": summary.message,
            "estimate_allocated_gib": round(est.allocated / 2**30, 3),
            "estimate_weights_gib": round(est.get("unet") / 2**30, 3),
            "last_loss": rep.steps[-1].loss if rep.steps else None,
        }
        print(f"   {fmt}: {out[fmt]['s_per_step']} s/step, peak {out[fmt]['peak_allocated_gib']} GiB "
              f"(estimate {out[fmt]['estimate_allocated_gib']}), loss {out[fmt]['last_loss']}", flush=True)
        del trainer
        free()
    return out


def environment() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2**30, 1),
                    bf16=torch.cuda.is_bf16_supported())
    for mod in ("bitsandbytes", "pynvml", "diffusers", "peft", "accelerate"):
        try:
            info[mod] = getattr(__import__(mod), "__version__", "present")
        except Exception as e:  # noqa: BLE001
            info[mod] = f"unavailable ({type(e).__name__})"
    from guitrainer.engine.lab.precision_lab import engine_supports_fp8

    info["engine_fp8_base_weights"] = engine_supports_fp8()
    print(json.dumps(info), flush=True)
    return info


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "gpu_suite_results.json")
    ap.add_argument("--budget", type=float, default=470.0, help="seconds for the whole suite (sections that do not fit are skipped)")
    ap.add_argument("--smoke", action="store_true", help="tiny models on whatever device there is (checks the script itself)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() and not args.smoke:
        print(NO_CUDA)
        return 0
    smoke = args.smoke
    suite = Suite(args.out, args.budget, smoke)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ.setdefault("GUITRAINER_HOME", str(tmp / "home"))
        suite.section("environment", 0, environment)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        folders: dict[str, str] = {}

        def build(family: str) -> dict[str, Any]:
            t = time.perf_counter()
            folder = tmp / f"{family}_arch"
            build_smoke_folder(family, folder) if smoke else build_arch_folder(family, folder, device)
            folders[family] = str(folder)
            size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            return {"folder_gib": round(size / 2**30, 2), "seconds": round(time.perf_counter() - t, 1)}

        r15, rxl = (64, 64) if smoke else (512, 1024)
        steps, warmup = (1, 1) if smoke else (4, 2)
        suite.section("build_sd15", 20, lambda: build("sd15"))
        if "sd15" in folders:
            suite.section("lab_sd15", 60, lambda: lab(folders["sd15"], "sd15", r15, 4 if not smoke else 2, steps, warmup, tmp))
        suite.section("build_sdxl", 150, lambda: build("sdxl"))
        if "sdxl" in folders:
            suite.section("lab_sdxl", 110, lambda: lab(folders["sdxl"], "sdxl", rxl, 1, 3 if not smoke else 1, 1, tmp))
        if "sd15" in folders:
            suite.section("fp16_scaler", 30, lambda: fp16_scaler(folders["sd15"], "sd15", r15, 12 if not smoke else 3, tmp))
            if torch.cuda.is_available():
                suite.section("bnb_8bit", 40, lambda: bnb_8bit(folders["sd15"], "sd15", r15, 6, tmp))
            else:
                suite.results["bnb_8bit"] = {"skipped": "needs CUDA"}
        deadline = time.perf_counter() + max(0.0, min(100.0, suite.left() - 70))
        suite.section("vram", 30, lambda: vram_points(smoke, deadline))
        deadline = time.perf_counter() + max(0.0, min(90.0, suite.left() - 100))  # leave the last two sections theirs
        suite.section("transformers", 40, lambda: transformer_steps(smoke, deadline))
        if "sd15" in folders:
            precs = ["bf16", "fp16"] if torch.cuda.is_available() else ["fp32"]
            suite.section("engine_vs_bare", 45, lambda: engine_vs_bare(folders["sd15"], r15, 12 if not smoke else 4, precs, tmp))
        big = "sdxl" if "sdxl" in folders else "sd15"
        if big in folders:
            side = (rxl if big == "sdxl" else r15) if not smoke else 64
            suite.section("offload", 60, lambda: offload(folders[big], big, side, 6 if not smoke else 2, tmp))
            suite.section("storage", 60, lambda: storage(folders[big], big, side, 4 if not smoke else 2, tmp))
    suite.results["finished"] = True
    suite.write()
    print(f"gpu_suite: done in {suite.results['elapsed_s']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
