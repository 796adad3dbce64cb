"""GPU check of the training engine on an SD 1.5-architecture model (random weights, no download).

Runs the real ``Trainer`` on a diffusers folder holding an SD 1.5-shaped UNet (config below), a CLIP
text encoder of SD 1.5's width (2 layers, to keep the folder small) and a small 8x VAE, at 512 px:
batch 1 and 4, LoRA rank 16, fp16 + GradScaler + AdamW8bit + gradient checkpointing, then bf16.
Prints s/step, peak ``torch.cuda.max_memory_allocated``, the final loss scale and skipped steps.
Exits 0 with a message where there is no CUDA. Takes ~2-4 minutes on an H100-class GPU.

    python bench/gpu_check.py [--steps 12]
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

SD15_UNET = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "center_input_sample": False,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "only_cross_attention": False,
    "block_out_channels": [320, 640, 1280, 1280],
    "layers_per_block": 2,
    "downsample_padding": 1,
    "mid_block_scale_factor": 1,
    "act_fn": "silu",
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
    "use_linear_projection": False,
}


def build_folder(folder: Path) -> None:
    """SD 1.5-shaped diffusers folder: full UNet, SD-width CLIP (2 layers), small 8x VAE, demo tokenizer."""
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
    with torch.device("cuda"):
        unet = UNet2DConditionModel(**SD15_UNET)
    unet.save_pretrained(folder / "unet")
    del unet
    AutoencoderKL(
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[32, 64, 64, 64],
        latent_channels=4,
        norm_num_groups=32,
        sample_size=512,
    ).save_pretrained(folder / "vae")
    CLIPTextModel(
        CLIPTextConfig(
            vocab_size=1000,
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=2,
            num_attention_heads=12,
            bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=vocab["<|endoftext|>"],
            pad_token_id=vocab["<|endoftext|>"],
        )
    ).save_pretrained(folder / "text_encoder")


def run(base: str, out: str, prec: str, batch: int, steps: int) -> str:
    from guitrainer.config import DatasetFolder, TrainingConfig
    from guitrainer.core.events import NullReporter
    from guitrainer.engine.models.demo import ensure_demo_dataset
    from guitrainer.engine.trainer import Trainer

    cfg = TrainingConfig()
    cfg.model.base, cfg.model.family = base, "sd15"
    cfg.dataset.folders = [DatasetFolder(path=str(ensure_demo_dataset()), repeats=4)]
    cfg.dataset.resolution, cfg.dataset.bucketing = 512, False
    cfg.network.rank, cfg.network.alpha = 16, 16.0
    cfg.optimizer.name, cfg.optimizer.lr = "AdamW8bit", 1e-4
    cfg.schedule.batch_size, cfg.schedule.max_steps = batch, steps
    cfg.precision.training, cfg.precision.save = prec, "fp16"
    cfg.precision.gradient_checkpointing, cfg.precision.cache_latents = True, True
    cfg.output.folder, cfg.output.overwrite = out, True
    rep = NullReporter()
    torch.cuda.empty_cache()
    t0 = time.perf_counter()
    tr = Trainer(cfg, rep)
    summary = tr.run()
    wall = time.perf_counter() - t0
    if summary.status != "finished":
        return f"{prec:5} batch {batch}: {summary.status}: {summary.message} {list(summary.advice)}"
    times = [s.seconds_per_step for s in rep.steps[2:]] or [s.seconds_per_step for s in rep.steps]
    peak = max(s.peak_memory_bytes or 0 for s in rep.steps)
    last = rep.steps[-1]
    scale = f"{last.grad_scale:g}" if last.grad_scale is not None else "-"
    return (
        f"{prec:5} batch {batch}: {statistics.median(times):.3f} s/step, {batch / statistics.median(times):.1f} img/s, "
        f"peak {peak / 2**30:.2f} GiB, final scale {scale}, skipped {summary.skipped_steps}/{summary.steps}, "
        f"loss {last.loss:.4f}, optimizer {tr.session.optimizer_name}, run {wall:.0f} s"
        + (f"; warnings: {list(summary.warnings)}" if summary.warnings else "")
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check (run this on a machine with an NVIDIA GPU).")
        return 0
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.total_memory / 2**30:.0f} GiB, cc {props.major}.{props.minor}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("GUITRAINER_HOME", str(Path(tmp) / "home"))
        base = Path(tmp) / "sd15_arch"
        t0 = time.perf_counter()
        build_folder(base)
        print(f"built the SD 1.5-architecture folder in {time.perf_counter() - t0:.0f} s")
        precisions = ["fp16", "bf16"] if torch.cuda.is_bf16_supported() else ["fp16"]
        for prec in precisions:
            for batch in (1, 4):
                print(run(str(base), str(Path(tmp) / "out"), prec, batch, args.steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
