"""Latent caching: seconds per image to cache, and how much faster cached epochs are than uncached ones.

On the mid-size model of bench/train_step.py (UNet 128/256/512, 8x VAE 32/32/64/64, small CLIP) at 256 px
with aspect buckets, fp32, batch 1, rank 4. Three Trainer runs of ``--epochs`` epochs over ``--images``
generated images (mixed aspects):

* uncached: every step decodes the image and runs the VAE encoder;
* cached, cold: the cache is built first (timed: seconds per image), then the steps use it;
* cached, warm: a second run finds every latent on disk (timed: seconds per image to load).

``--vae`` picks the VAE: ``bench`` (train_step.py's 32/32/64/64), ``mid`` (64/128/256/256) or ``sd``
(SD 1.5's real architecture 128/256/512/512 from resources/models/sd15/vae, random weights).

    python bench/latent_cache.py [--images 8] [--epochs 2] [--vae bench|mid|sd]
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from guitrainer.config import DatasetFolder, TrainingConfig  # noqa: E402


def make_images(folder: Path, n: int) -> None:
    from PIL import Image

    folder.mkdir(parents=True)
    for i in range(n):
        size = (256, 256) if i % 2 == 0 else (384, 256)
        Image.effect_noise(size, 40 + i).convert("RGB").save(folder / f"{i:03d}.png")
        (folder / f"{i:03d}.txt").write_text(f"a photo of a demo shape {i}")


def replace_vae(model: Path, kind: str) -> None:
    """Swap the model's VAE for a bigger one (same 8x downsampling, random weights)."""
    import shutil

    from diffusers import AutoencoderKL

    from guitrainer.base.paths import resources_dir

    if kind == "bench":
        return
    torch.manual_seed(0)
    if kind == "sd":
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(resources_dir() / "models" / "sd15" / "vae"))
    else:
        vae = AutoencoderKL(
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            block_out_channels=(64, 128, 256, 256),
            layers_per_block=2,
            latent_channels=4,
            norm_num_groups=32,
        )
    shutil.rmtree(model / "vae")
    vae.save_pretrained(model / "vae")


def config(model: Path, data: Path, out: Path, epochs: int, cache: bool) -> TrainingConfig:
    cfg = TrainingConfig()
    cfg.model.base, cfg.model.family = str(model), "auto"
    cfg.dataset.folders = [DatasetFolder(path=str(data))]
    cfg.dataset.resolution, cfg.dataset.bucketing = 256, True
    cfg.dataset.min_bucket_resolution, cfg.dataset.max_bucket_resolution, cfg.dataset.bucket_step = 128, 512, 64
    cfg.network.rank, cfg.network.alpha = 4, 4.0
    cfg.schedule.batch_size, cfg.schedule.epochs, cfg.schedule.seed = 1, epochs, 0
    cfg.precision.training, cfg.precision.save, cfg.precision.cache_latents = "fp32", "fp16", cache
    cfg.output.folder, cfg.output.overwrite = str(out), True
    return cfg


def run(cfg: TrainingConfig) -> dict[str, float]:
    from train_step import Clock

    from guitrainer.engine.trainer import Trainer

    timing: dict[str, float] = {}
    orig = Trainer._cache_latents

    def timed(self: Trainer) -> None:
        t0 = time.perf_counter()
        orig(self)
        timing["cache_s"] = time.perf_counter() - t0
        timing["encoded"] = float(self.latent_store.misses if self.latent_store else 0)
        timing["reused"] = float(self.latent_store.hits if self.latent_store else 0)

    Trainer._cache_latents = timed  # type: ignore[method-assign]
    try:
        clock = Clock()
        t0 = time.perf_counter()
        summary = Trainer(cfg, clock).run()
        timing["total_s"] = time.perf_counter() - t0
    finally:
        Trainer._cache_latents = orig  # type: ignore[method-assign]
    assert summary.status == "finished", summary.message
    steps = [b - a for a, b in zip(clock.times, clock.times[1:])]
    timing["step_s"] = statistics.median(steps)
    timing["steps"] = float(len(clock.times))
    return timing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--vae", choices=("bench", "mid", "sd"), default="mid")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["GUITRAINER_HOME"] = str(root / "home")
        from train_step import build_mid_model

        build_mid_model(root / "mid")
        replace_vae(root / "mid", args.vae)
        from diffusers import AutoencoderKL

        vae_params = sum(p.numel() for p in AutoencoderKL.from_pretrained(root / "mid", subfolder="vae").parameters())
        make_images(root / "data", args.images)
        un = run(config(root / "mid", root / "data", root / "o1", args.epochs, cache=False))
        cold = run(config(root / "mid", root / "data", root / "o2", args.epochs, cache=True))
        warm = run(config(root / "mid", root / "data", root / "o3", args.epochs, cache=True))
    n = args.images
    print(f"threads {torch.get_num_threads()}, torch {torch.__version__}, {n} images, {args.epochs} epochs, batch 1, fp32, 256 px, "
          f"VAE {args.vae} ({vae_params / 1e6:.1f} M params)")
    print(f"cache build (cold): {cold['cache_s']:.2f} s = {cold['cache_s'] / n:.3f} s/image ({cold['encoded']:.0f} encoded)")
    print(f"cache load (warm, from disk): {warm['cache_s']:.3f} s = {warm['cache_s'] / n * 1000:.1f} ms/image "
          f"({warm['reused']:.0f} reused, {warm['encoded']:.0f} encoded)")
    print(f"median step: uncached {un['step_s']:.3f} s, cached {cold['step_s']:.3f} s "
          f"-> cached epochs {un['step_s'] / cold['step_s']:.2f}x faster")
    print(f"epoch ({n} steps): uncached {un['step_s'] * n:.2f} s, cached {cold['step_s'] * n:.2f} s")
    print(f"whole run: uncached {un['total_s']:.1f} s, cached cold {cold['total_s']:.1f} s, cached warm {warm['total_s']:.1f} s")


if __name__ == "__main__":
    main()
