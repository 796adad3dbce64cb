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
    """The Demo preset, short, writing into ``out``: fp32 files, no samples (a test that wants them sets them),
    2 epochs of batches of 2 with no step cap (12 steps over the Demo's 12 pictures), with ``section__field=value``
    overrides. The preset's own run is ``tests/test_demo_learns.py``'s."""
    cfg = PresetStore().get(DEMO_PRESET).config()
    cfg.output.folder = str(out)
    cfg.precision.save = "fp32"
    cfg.sampling.every_n_steps = 0
    cfg.sampling.at_start = False
    cfg.schedule.epochs, cfg.schedule.max_steps, cfg.schedule.batch_size = 2, 0, 2
    for key, value in settings.items():
        cfg.set(key.replace("__", "."), value)
    return cfg
