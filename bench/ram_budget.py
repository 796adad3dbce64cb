"""The system-RAM estimate (core/memory/system_ram.py) against measured peak RSS, one fresh process per point.

    python bench/ram_budget.py                      # every point; prints a Markdown table
    python bench/ram_budget.py --points load_sd15,train_sd15 --json out.json
    python bench/ram_budget.py --offload-table      # the estimate with 0 / 0.5 / 1 of the blocks in RAM (no run)

Each point runs in its own child process (``--child NAME``), so the process's peak RSS (``VmHWM`` in
``/proc/self/status``) is that point's alone: the imports, the load and any training. The estimate is the one the
start check makes for the same config: headless (no window), the CPU as the device when it trains, the images in
its folders. The full-size SD 1.5 point builds a random-weight SD 1.5 folder once (fp16 safetensors, 2.1 GB) in
``--work`` and trains it for one step at 64 px.

Points are :data:`POINTS`; a feature with its own RAM cost adds one there (the 4-bit / 8-bit quantisation of issue
30 item 1 adds its "quantise" point: load, quantise on the CPU, train a step, estimated by its own part).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CPU = SimpleNamespace(kind="cpu", total_memory=None)  # the estimator's view of this machine: training in RAM


def peak_rss() -> int:
    """This process's peak resident set (VmHWM), in bytes."""
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


@dataclass(frozen=True)
class Point:
    what: str
    run: Callable[[Path], dict[str, Any]]  # in the child: does the work, returns {"estimate": bytes, ...}


# --------------------------------------------------------------------------- the work of each point


def _imports(_work: Path) -> dict[str, Any]:
    import accelerate  # noqa: F401
    import diffusers  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401

    from guitrainer.core.memory import system_ram
    from guitrainer.engine import trainer  # noqa: F401

    return {"estimate": system_ram.BASELINE_HEADLESS, "part": "baseline"}


def _demo_config(work: Path, **settings: Any) -> Any:
    from guitrainer.config.presets import DEMO_PRESET, PresetStore

    cfg = PresetStore().get(DEMO_PRESET).config()
    cfg.output.folder = str(work / "out")
    cfg.precision.save = "fp32"
    cfg.precision.training = "fp32"
    cfg.precision.cache_to_disk = False  # memory only: nothing written to the user's cache folder
    cfg.schedule.max_steps = 3
    for key, value in settings.items():
        cfg.set(key, value)
    return cfg


def _estimate(cfg: Any, family: str, images: int | None, phase: str, spec: Any = None) -> int:
    from guitrainer.core.memory import specs, system_ram

    ram = system_ram.estimate_ram(cfg, spec or specs.spec_of(family), CPU, images=images, window=False, machine_total=0)
    return {"loading": ram.loading, "peak": ram.peak}[phase]


def _images(folder: Path) -> int:
    from guitrainer.config import DatasetFolder
    from guitrainer.core.dataset.folder_check import look_at_folders

    return look_at_folders([DatasetFolder(path=str(folder), repeats=1)])[0].images


def _load(cfg: Any, family: str, config_dir: Path | None = None, spec: Any = None, used: bool = False) -> dict[str, Any]:
    """Load as the session does: each part in the dtype the run places it in (``load_dtypes``; the CPU trains).
    ``used``: then read every weight once, as the move to the GPU does (a weight the load did not copy is the
    file's memory-mapped pages, resident only once read)."""
    from guitrainer.engine.models.loading import load_base_model, load_dtypes
    from guitrainer.engine.session import COMPUTE_DTYPES

    training = cfg.precision.training
    t0 = time.perf_counter()
    model = load_base_model(cfg.model, config_dir=config_dir,
                            dtypes=load_dtypes(training, COMPUTE_DTYPES[training], CPU.kind))
    n = sum(p.numel() for m in (model.denoiser, model.vae, *model.text_encoders) for p in m.parameters())
    if used:
        for m in (model.denoiser, model.vae, *model.text_encoders):
            for p in m.parameters():
                p.detach().sum()
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for m in (model.denoiser, *model.text_encoders)
                     for p in m.parameters()})
    return {"estimate": _estimate(cfg, family, None, "loading", spec), "part": "loading", "params": n,
            "dtypes": dtypes, "seconds": round(time.perf_counter() - t0, 1)}


def _load_demo(work: Path) -> dict[str, Any]:
    from guitrainer.engine.models.demo import ensure_demo_model

    ensure_demo_model()
    return _load(_demo_config(work), "demo")


def _train(cfg: Any, family: str) -> dict[str, Any]:
    from guitrainer.engine.models.demo import ensure_demo_dataset
    from guitrainer.engine.trainer import Trainer

    folder = Path(cfg.dataset.folders[0].path) if cfg.dataset.folders else ensure_demo_dataset()
    t0 = time.perf_counter()
    summary = Trainer(cfg).run()
    assert summary.status == "finished", summary.message
    return {"estimate": _estimate(cfg, family, _images(folder), "peak"), "part": "peak",
            "seconds": round(time.perf_counter() - t0, 1)}


def _train_demo(**settings: Any) -> Callable[[Path], dict[str, Any]]:
    return lambda work: _train(_demo_config(work, **settings), "demo")


def _sd15_folder(work: Path) -> Path:
    """A full-size SD 1.5 diffusers folder with random weights (fp16 files), from the bundled configs; built once."""
    folder = work / "sd15_random"
    if (folder / "done").is_file():
        return folder
    import torch
    from diffusers import AutoencoderKL, DDPMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    res = ROOT / "resources" / "models" / "sd15"
    torch.manual_seed(0)
    unet = UNet2DConditionModel.from_config(json.loads((res / "unet" / "config.json").read_text()))
    vae = AutoencoderKL.from_config(json.loads((res / "vae" / "config.json").read_text()))
    te_cfg = json.loads((res / "text_encoder" / "config.json").read_text())
    te = CLIPTextModel(CLIPTextConfig(**{k: v for k, v in te_cfg.items() if not k.startswith("_")}))
    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=te, tokenizer=CLIPTokenizer.from_pretrained(res / "tokenizer"), unet=unet,
        scheduler=DDPMScheduler.from_pretrained(res / "scheduler"), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.to(torch.float16).save_pretrained(folder, safe_serialization=True)
    (folder / "done").write_text("1")
    return folder


def _sd15_config(work: Path, **settings: Any) -> Any:
    from guitrainer.engine.models.demo import ensure_demo_dataset

    cfg = _demo_config(work, **settings)
    cfg.model.base = str(_sd15_folder(work))
    cfg.model.family = "sd15"
    cfg.set("dataset.folders", [str(ensure_demo_dataset())])
    cfg.schedule.max_steps = 1
    cfg.schedule.batch_size = 1
    for key, value in {"dataset.resolution": 64, "precision.gradient_checkpointing": True, **settings}.items():
        cfg.set(key, value)
    return cfg


def _build_sd15(work: Path) -> dict[str, Any]:
    _sd15_folder(work)
    _sd15_single(work)
    return {"estimate": 0, "part": "none"}


def _sd15_single(work: Path) -> Path:
    """The random SD 1.5 as one original-layout fp16 .safetensors (the civitai kind), from its folder; built once."""
    path = work / "sd15_random.safetensors"
    if path.is_file():
        return path
    import torch
    from safetensors.torch import save_file

    from guitrainer.engine.models.loading import LoadDtypes, load_folder
    from guitrainer.engine.models.singlefile import to_original_layout

    f16 = torch.float16
    m = load_folder(_sd15_folder(work), "sd15", dtypes=LoadDtypes(f16, f16, f16))
    save_file(to_original_layout(m.denoiser, m.vae, m.text_encoders, "sd15"), str(path.with_suffix(".part")))
    path.with_suffix(".part").rename(path)
    return path


def _sd15_single_config(work: Path, **settings: Any) -> Any:
    cfg = _sd15_config(work, **settings)
    cfg.model.base = str(_sd15_single(work))
    return cfg


# Flux.1 at full width with fewer blocks: the full 12 B model in bf16 (23.8 GB, T5-XXL 9.5 GB more) does not fit a
# 24 GB machine. Every part is as wide as FLUX.1 dev's (hidden 3072, T5 d_model 4096, the real CLIP-L and VAE); the
# transformer keeps FLUX_BLOCKS of its 19 double and 38 single blocks, T5 FLUX_T5_LAYERS of its 24 layers.
FLUX_BLOCKS = (2, 4)
FLUX_T5_LAYERS = 2


def _fill(module: Any, dtype: Any, seed: int) -> Any:
    """``module`` (built on meta) given storage in ``dtype`` and small random values: nothing made in fp32."""
    import torch

    module.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            if t.is_floating_point():
                t.data = torch.empty(t.shape, dtype=dtype).normal_(0, 0.02, generator=gen)
    return module


def _flux_files(work: Path) -> dict[str, Path]:
    """The reduced Flux.1 dev as the split files ComfyUI users keep: the transformer in bf16 (BFL's layout, as
    flux1-dev.safetensors), t5xxl and clip_l in fp16 (t5xxl_fp16, clip_l), ae in bf16; and its config folder (the
    shipped one at the reduced depth, with a T5 tokenizer: the tests' small one). Built once."""
    import shutil

    folder = work / "flux_reduced"
    files = {"transformer": folder / "flux1-dev-reduced.safetensors", "t5": folder / "t5xxl_fp16_reduced.safetensors",
             "clip_l": folder / "clip_l.safetensors", "vae": folder / "ae.safetensors", "configs": folder / "configs"}
    if (folder / "done").is_file():
        return files
    import torch
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from safetensors.torch import save_file
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from guitrainer.engine.families.flux1.convert import diffusers_to_bfl
    from guitrainer.engine.models.singlefile import vae_to_original

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.tiny_flux import t5_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    configs = shutil.copytree(ROOT / "resources" / "models" / "flux1", files["configs"], dirs_exist_ok=True)
    tcfg = json.loads((configs / "transformer" / "config.json").read_text())
    tcfg.update(num_layers=FLUX_BLOCKS[0], num_single_layers=FLUX_BLOCKS[1])
    (configs / "transformer" / "config.json").write_text(json.dumps(tcfg, indent=2))
    t5cfg = json.loads((configs / "text_encoder_2" / "config.json").read_text())
    t5cfg.update(num_layers=FLUX_T5_LAYERS, num_decoder_layers=FLUX_T5_LAYERS)
    (configs / "text_encoder_2" / "config.json").write_text(json.dumps(t5cfg, indent=2))
    t5_tokenizer().save_pretrained(str(configs / "tokenizer_2"))
    plain = {k: v for k, v in tcfg.items() if not k.startswith("_")}
    bf16, fp16 = torch.bfloat16, torch.float16
    with init_empty_weights():
        transformer = FluxTransformer2DModel(**plain)
    sd = diffusers_to_bfl(_fill(transformer, bf16, 1).state_dict())
    save_file({k: v.contiguous() for k, v in sd.items()}, str(files["transformer"]))
    del transformer, sd
    with init_empty_weights():
        t5 = T5EncoderModel(T5Config(**{k: v for k, v in t5cfg.items() if not k.startswith("_")}))
    sd = {k: v for k, v in _fill(t5, fp16, 2).state_dict().items() if k != "encoder.embed_tokens.weight"}
    save_file({k: v.contiguous() for k, v in sd.items()}, str(files["t5"]))
    del t5, sd
    clip_cfg = json.loads((configs / "text_encoder" / "config.json").read_text())
    with init_empty_weights():
        clip = CLIPTextModel(CLIPTextConfig(**{k: v for k, v in clip_cfg.items() if not k.startswith("_")}))
    sd = {f"text_model.{k}": v.contiguous() for k, v in _fill(clip, fp16, 3).state_dict().items()
          if not k.endswith("position_ids")}
    save_file(sd, str(files["clip_l"]))
    vae_cfg = json.loads((configs / "vae" / "config.json").read_text())
    with init_empty_weights():
        vae = AutoencoderKL.from_config(vae_cfg)
    vae_sd = vae_to_original(_fill(vae, bf16, 4).state_dict(), len(vae.config.block_out_channels))
    save_file({k.removeprefix("first_stage_model."): v.contiguous() for k, v in vae_sd.items()}, str(files["vae"]))
    (folder / "done").write_text("1")
    return files


def _flux_spec(work: Path) -> Any:
    """FLUX.1 dev's spec with the reduced model's parameter counts (counted from its files' headers)."""
    import dataclasses

    from guitrainer.core.memory import specs
    from guitrainer.core.model.checkpoint import read_safetensors_header

    def count(path: Path, skip: str = "") -> int:
        import math

        header = read_safetensors_header(path)[0]
        return sum(math.prod(v["shape"]) for k, v in header.items() if not (skip and k.startswith(skip)))

    files = _flux_files(work)
    return dataclasses.replace(specs.spec_of("flux1"), denoiser=count(files["transformer"]),
                               text_encoders=(count(files["clip_l"]), count(files["t5"])))


def _flux_config(work: Path, **settings: Any) -> Any:
    files = _flux_files(work)
    cfg = _demo_config(work, **{"precision.training": "bf16", **settings})
    cfg.model.base = str(files["transformer"])
    cfg.model.family = "flux1"
    cfg.model.text_encoders = [str(files["clip_l"]), str(files["t5"])]
    cfg.model.vae = str(files["vae"])
    return cfg


def _load_flux(work: Path, *, used: bool = False) -> dict[str, Any]:
    return _load(_flux_config(work), "flux1", config_dir=_flux_files(work)["configs"], spec=_flux_spec(work), used=used)


def _flux_folder(work: Path) -> Path:
    """The same reduced Flux.1 dev as a diffusers folder (the transformer and VAE bf16, the text encoders fp16, as
    the split files); built once from them."""
    folder = work / "flux_reduced_folder"
    if (folder / "model_index.json").is_file():
        return folder
    import torch
    from diffusers import FluxPipeline

    from guitrainer.engine.models.loading import LoadDtypes, load_base_model

    bf16 = torch.bfloat16
    m = load_base_model(_flux_config(work).model, config_dir=_flux_files(work)["configs"],
                        dtypes=LoadDtypes(bf16, bf16, bf16))
    for te in m.text_encoders:
        te.to(torch.float16)
    FluxPipeline(scheduler=m.noise_scheduler, vae=m.vae, text_encoder=m.text_encoders[0], tokenizer=m.tokenizers[0],
                 text_encoder_2=m.text_encoders[1], tokenizer_2=m.tokenizers[1],
                 transformer=m.denoiser).save_pretrained(str(folder))
    return folder


def _load_flux_folder(work: Path, *, used: bool = False) -> dict[str, Any]:
    cfg = _flux_config(work)
    cfg.model.base, cfg.model.text_encoders, cfg.model.vae = str(_flux_folder(work)), [], ""
    return _load(cfg, "flux1", spec=_flux_spec(work), used=used)


def _build_flux(work: Path) -> dict[str, Any]:
    _flux_files(work)
    _flux_folder(work)
    return {"estimate": 0, "part": "none"}


POINTS: dict[str, Point] = {
    "import": Point("libraries and the engine imported, no weights", _imports),
    "load_demo": Point("the demo model loaded (fp32 on the CPU)", _load_demo),
    "load_sd15": Point("full-size SD 1.5 loaded from fp16 files (fp32 on the CPU)", lambda w: _load(_sd15_config(w), "sd15")),
    "load_sd15_bf16": Point("full-size SD 1.5 loaded from fp16 files for a bf16 run (built in bf16)",
                            lambda w: _load(_sd15_config(w, **{"precision.training": "bf16"}), "sd15")),
    "load_sd15_single_bf16": Point("full-size SD 1.5 from one fp16 checkpoint file for a bf16 run (read whole, each "
                                   "tensor cast)", lambda w: _load(_sd15_single_config(w, **{"precision.training": "bf16"}),
                                                                  "sd15")),
    "load_flux_bf16": Point(f"Flux.1 dev at full width, {FLUX_BLOCKS[0]} + {FLUX_BLOCKS[1]} blocks and {FLUX_T5_LAYERS} "
                            "T5 layers, split files (bf16 transformer, fp16 T5 / CLIP), for a bf16 run", _load_flux),
    "load_flux_bf16_used": Point("the same, then every weight read once (as the move to the GPU reads it)",
                                 lambda w: _load_flux(w, used=True)),
    "load_flux_folder_bf16": Point("the same Flux as a diffusers folder, for a bf16 run", _load_flux_folder),
    "load_flux_folder_bf16_used": Point("the same, then every weight read once (as the move to the GPU reads it)",
                                        lambda w: _load_flux_folder(w, used=True)),
    "train_demo": Point("demo, 3 steps fp32, latents not cached (decoded images kept)",
                        _train_demo(**{"precision.cache_latents": False})),
    "train_demo_cached": Point("demo, 3 steps fp32, latents and text embeddings cached in memory",
                               _train_demo(**{"precision.cache_latents": True, "precision.cache_text_encoder_outputs": True})),
    "train_demo_offload": Point("demo, 3 steps fp32, checkpointing, half the blocks in system RAM (a no-op on the CPU)",
                                _train_demo(**{"precision.gradient_checkpointing": True, "precision.offload_blocks": 0.5})),
    "train_sd15": Point("full-size SD 1.5, 1 step fp32 at 64 px, checkpointing, cached latents",
                        lambda w: _train(_sd15_config(w), "sd15")),
    "train_sd15_bf16": Point("full-size SD 1.5, 1 step bf16 at 64 px, checkpointing, cached latents (built in bf16)",
                             lambda w: _train(_sd15_config(w, **{"precision.training": "bf16"}), "sd15")),
    "train_sd15_int8": Point("full-size SD 1.5, 1 step bf16 at 64 px, checkpointing, cached latents, the UNet's Linears "
                             "quantised to int8 on the CPU", lambda w: _train(_sd15_config(
                                 w, **{"precision.training": "bf16", "precision.base_weights": "int8"}), "sd15")),
    "train_sd15_nf4": Point("the same with nf4 (quantised layer by layer on the CPU)", lambda w: _train(_sd15_config(
                                w, **{"precision.training": "bf16", "precision.base_weights": "nf4"}), "sd15")),
    "train_sd15_512": Point("full-size SD 1.5, 1 step fp32 at 512 px, no checkpointing, cached latents",
                            lambda w: _train(_sd15_config(w, **{"dataset.resolution": 512,
                                                                "precision.gradient_checkpointing": False}), "sd15")),
}


def offload_table() -> None:
    """The estimate's two sides of ``precision.offload_blocks`` for the families with a block table, on a 12 GB GPU:
    bf16, batch 1, rank 16, checkpointing, latents and text embeddings cached, at each family's native size."""
    from guitrainer.config import TrainingConfig
    from guitrainer.core.families.registry import all_facts
    from guitrainer.core.memory import estimate, specs, system_ram

    gpu = SimpleNamespace(kind="cuda", total_memory=12 * 2**30)
    gib = 2**30
    print("| model | blocks in RAM | UNet / transformer weights on the GPU | streamed blocks | GPU total | pinned RAM | "
          "RAM while training |")
    print("|---|---|---|---|---|---|---|")
    for fam in all_facts():
        spec = fam.spec
        if spec is None or not spec.offload_blocks or fam.name == "demo":
            continue
        for share in (0.0, 0.5, 1.0):
            c = TrainingConfig()
            for key, value in {"model.family": fam.name, "precision.training": "bf16", "dataset.resolution":
                               fam.native_resolution, "precision.gradient_checkpointing": True,
                               "precision.cache_text_encoder_outputs": True, "precision.offload_blocks": share}.items():
                c.set(key, value)
            v = estimate.estimate(c, specs.spec_of(fam.name), gpu)
            r = system_ram.estimate_ram(c, specs.spec_of(fam.name), gpu, images=100, window=True, machine_total=0)
            print(f"| {fam.label} | {share:.0%} | {v.get('unet') / gib:.2f} GiB | {v.get('offload_stream') / gib:.2f} GiB | "
                  f"{v.total / gib:.2f} GiB | {r.get('pinned_blocks') / gib:.2f} GiB | {r.training / gib:.2f} GiB |")


# --------------------------------------------------------------------------- parent and child


def child(name: str, work: Path) -> None:
    builders = {"build_sd15": _build_sd15, "build_flux": _build_flux}
    result = builders[name](work) if name in builders else POINTS[name].run(work)
    result.update(point=name, measured=peak_rss())
    print(json.dumps(result))


def run_point(name: str, work: Path) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", name, "--work", str(work)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", default=",".join(POINTS), help="comma-separated: " + ", ".join(POINTS))
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "guitrainer_ram_budget"))
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--offload-table", action="store_true", help="print the estimate with blocks in RAM and exit")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.offload_table:
        offload_table()
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.child:
        child(args.child, work)
        return
    names = [n.strip() for n in args.points.split(",") if n.strip()]
    if any("sd15" in n for n in names):
        run_point("build_sd15", work)  # not measured: the random weights are made once
    if any("flux" in n for n in names):
        run_point("build_flux", work)
    rows = []
    print("| point | what | estimate | measured peak RSS | estimate − measured |")
    print("|---|---|---|---|---|")
    for name in names:
        r = run_point(name, work)
        rows.append(r)
        err = (r["estimate"] - r["measured"]) / r["measured"]
        gib = 2**30
        print(f"| {name} | {POINTS[name].what} | {r['estimate'] / gib:.2f} GiB | {r['measured'] / gib:.2f} GiB | "
              f"{err:+.1%} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
