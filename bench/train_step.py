"""Seconds per training step: the guitrainer engine next to a bare diffusers-style loop of the same config.

For fp32 / bf16 / fp16 on the demo model (64 px) and on a mid-size UNet (block_out_channels
128/256/512, 256 px), both loops use the same model folder, batch, LoRA (rank 4 on attention),
AdamW, precision rules (DESIGN §4), cached latents, gradient clipping and thread count.
The ratio engine / bare is the engine's overhead; the goal is <= 1.03.

    python bench/train_step.py [--steps 8] [--warmup 2] [--models demo,mid] [--precisions fp32,bf16,fp16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from guitrainer.config import TrainingConfig  # noqa: E402
from guitrainer.core.events import NullReporter, StepMetrics  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def build_mid_model(folder: Path) -> None:
    """Mid-size SD-1.x-shaped model: UNet 128/256/512, 8x VAE, small CLIP; demo tokenizer. Random weights."""
    import shutil

    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from guitrainer.engine.models.demo import demo_vocab, ensure_demo_model

    vocab = demo_vocab()[0]
    demo = ensure_demo_model()
    shutil.copytree(demo / "tokenizer", folder / "tokenizer")
    shutil.copy(demo / "model_index.json", folder / "model_index.json")
    DDPMScheduler.from_pretrained(demo, subfolder="scheduler").save_pretrained(folder / "scheduler")
    torch.manual_seed(0)
    UNet2DConditionModel(
        sample_size=32,
        block_out_channels=(128, 256, 512),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        layers_per_block=2,
        cross_attention_dim=256,
        attention_head_dim=8,
    ).save_pretrained(folder / "unet")
    AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(32, 32, 64, 64),
        latent_channels=4,
        norm_num_groups=32,
    ).save_pretrained(folder / "vae")
    CLIPTextModel(
        CLIPTextConfig(
            vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"],
        )
    ).save_pretrained(folder / "text_encoder")


class Clock(NullReporter):
    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def on_step(self, metrics: StepMetrics) -> None:
        self.times.append(time.perf_counter())


def step_times(stamps: list[float], warmup: int) -> list[float]:
    return [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :])]


def config(base: str, res: int, prec: str, steps: int, out: str) -> TrainingConfig:
    from guitrainer.config import DatasetFolder
    from guitrainer.engine.models.demo import ensure_demo_dataset

    cfg = TrainingConfig()
    cfg.dataset.folders = [DatasetFolder(path=str(ensure_demo_dataset()))]
    cfg.model.base, cfg.model.family = base, ("demo" if base == "demo" else "sd15")
    cfg.dataset.resolution, cfg.dataset.bucketing = res, False
    cfg.network.rank, cfg.network.alpha = 4, 4.0
    cfg.optimizer.name, cfg.optimizer.lr = "AdamW", 1e-4
    cfg.schedule.batch_size, cfg.schedule.max_steps, cfg.schedule.seed = 2, steps, 0
    cfg.precision.training, cfg.precision.save, cfg.precision.cache_latents = prec, "fp16", True
    cfg.output.folder, cfg.output.overwrite = out, True
    return cfg


def engine_run(cfg: TrainingConfig, warmup: int) -> list[float]:
    from guitrainer.engine.trainer import Trainer

    clock = Clock()
    summary = Trainer(cfg, clock).run()
    assert summary.status == "finished", summary.message
    return step_times(clock.times, warmup)


def bare_run(cfg: TrainingConfig, warmup: int, threads: int) -> list[float]:
    """A plain diffusers-style LoRA loop: what train_text_to_image_lora.py does, nothing more."""
    import random

    import torch.nn.functional as F
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from diffusers.training_utils import cast_training_params
    from peft import LoraConfig
    from transformers import CLIPTextModel, CLIPTokenizer

    from guitrainer.engine.data import load_image_tensor
    from guitrainer.engine.models.demo import ensure_demo_dataset, ensure_demo_model

    torch.set_num_threads(threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    src = str(ensure_demo_model()) if cfg.model.base == "demo" else cfg.model.base
    kw = {"local_files_only": True}
    unet = UNet2DConditionModel.from_pretrained(src, subfolder="unet", **kw)
    vae = AutoencoderKL.from_pretrained(src, subfolder="vae", **kw)
    te = CLIPTextModel.from_pretrained(src, subfolder="text_encoder", **kw)
    tok = CLIPTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)
    sched = DDPMScheduler.from_pretrained(src, subfolder="scheduler", **kw)
    prec = cfg.precision.training
    dtype = DTYPES[prec]
    for m in (unet, vae, te):
        m.requires_grad_(False)
    torch.nn.Module.to(unet, dev, dtype)
    te.to(dev, dtype=dtype)
    torch.nn.Module.to(vae, dev, torch.float32 if prec == "fp16" and dev.type == "cpu" else dtype)
    unet.add_adapter(LoraConfig(r=4, lora_alpha=4.0, init_lora_weights="gaussian", target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    cast_training_params(unet, dtype=torch.float32)
    unet.train()
    params = [p for p in unet.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    scaler = torch.amp.GradScaler(dev.type) if prec == "fp16" else None
    folder = ensure_demo_dataset()
    images = sorted(folder.glob("*.png"))
    captions = [p.with_suffix(".txt").read_text() for p in images]
    with torch.no_grad():
        latents = [
            vae.encode(load_image_tensor(p, cfg.dataset.resolution)[None].to(dev, vae.dtype)).latent_dist.sample()[0].to(dtype)
            * vae.config.scaling_factor
            for p in images
        ]
    bs = cfg.schedule.batch_size
    stamps = []
    for step in range(cfg.schedule.max_steps):
        idx = random.sample(range(len(images)), bs)
        lat = torch.stack([latents[i] for i in idx])
        ids = tok([captions[i] for i in idx], padding="max_length", max_length=tok.model_max_length, truncation=True, return_tensors="pt").input_ids.to(dev)
        with torch.autocast(dev.type, dtype=dtype, enabled=prec != "fp32"):
            with torch.no_grad():
                hidden = te(ids)[0]
            noise = torch.randn_like(lat)
            t = torch.randint(0, sched.config.num_train_timesteps, (bs,), device=dev)
            pred = unet(sched.add_noise(lat, noise, t), t, hidden).sample
            loss = F.mse_loss(pred.float(), noise.float())
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())  # the engine reads the loss every step too
        stamps.append(time.perf_counter())
        del step
    return step_times(stamps, warmup)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6, help="steps per run (demo model: 4x this)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--mid-fp16-on-cpu", action="store_true", help="also fp16 on the mid model without CUDA (~70 s/step: no fast fp16 conv)"
    )
    ap.add_argument("--models", default="demo,mid")
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--repeats", type=int, default=2, help="alternate bare/engine runs; the fastest median of each counts")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("GUITRAINER_HOME", str(Path(tmp) / "home"))
        threads = max(1, (os.cpu_count() or 2) - 1)  # what the engine uses on CPU
        print(f"torch {torch.__version__}, {torch.get_num_threads()} -> {threads} threads, cpu_count {os.cpu_count()}")
        print(f"{'model':6} {'prec':5} {'engine s/step':>14} {'bare s/step':>12} {'ratio':>6}")
        for model in args.models.split(","):
            if model == "mid":
                base, res, steps = str(Path(tmp) / "mid"), 256, args.steps
                build_mid_model(Path(base))
            else:
                base, res, steps = "demo", 64, args.steps * 4
            for prec in args.precisions.split(","):
                if model == "mid" and prec == "fp16" and not torch.cuda.is_available() and not args.mid_fp16_on_cpu:
                    print(f"{model:6} {prec:5} {'skipped: CPU fp16 convolutions are ~20x slower (--mid-fp16-on-cpu)':>34}")
                    continue
                cfg = config(base, res, prec, steps, str(Path(tmp) / "out"))
                bares, engs = [], []
                for _ in range(args.repeats):  # alternate, so load from other processes hits both alike
                    bares.append(statistics.median(bare_run(cfg, args.warmup, threads)))
                    engs.append(statistics.median(engine_run(cfg, args.warmup)))
                e, b = min(engs), min(bares)
                print(f"{model:6} {prec:5} {e:14.4f} {b:12.4f} {e / b:6.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
