"""Configs for tests: defaults or the Demo preset, with ``section__field=value`` overrides."""

from __future__ import annotations

from pathlib import Path

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import DEMO_PRESET, PresetStore


def config_with(**settings: object) -> TrainingConfig:
    """The default config with ``section__field=value`` overrides (each set and checked as the UI sets it)."""
    cfg = TrainingConfig()
    for key, value in settings.items():
        cfg.set(key.replace("__", "."), value)
    return cfg


def demo_cfg(out: Path, **settings: object) -> TrainingConfig:
    """The Demo preset's model and dataset with a small plain training, writing into ``out``, with
    ``section__field=value`` overrides: a rank-4 LoRA of the attention layers (the UNet only) at 1e-3, constant,
    2 epochs of batches of 2 with no step cap (12 steps over the Demo's 12 pictures), no latent cache, fp32 files,
    no samples (a test that wants them sets them; then one prompt, 4 steps). The engine's tests vary one thing from here; the preset's own
    recipe (LoCon rank 16, the text encoder, min-SNR, 240 steps, samples) is ``tests/test_demo_learns.py``'s."""
    cfg = PresetStore().get(DEMO_PRESET).config()
    cfg.output.folder = str(out)
    cfg.precision.save = "fp32"
    cfg.precision.cache_latents = False
    cfg.sampling.every_n_steps = 0
    cfg.sampling.at_start = False
    cfg.sampling.prompts, cfg.sampling.steps = [cfg.sampling.prompts[0]], 4  # one prompt, 4 steps: when a test samples
    cfg.schedule.epochs, cfg.schedule.max_steps, cfg.schedule.batch_size = 2, 0, 2
    cfg.schedule.lr_scheduler = "constant"
    cfg.network.type, cfg.network.rank, cfg.network.alpha = "lora", 4, 4.0
    cfg.network.target_modules = TrainingConfig().network.target_modules
    cfg.network.train_text_encoder = False
    cfg.optimizer.lr = 1e-3
    cfg.loss.min_snr_gamma = TrainingConfig().loss.min_snr_gamma
    for key, value in settings.items():
        cfg.set(key.replace("__", "."), value)
    return cfg
