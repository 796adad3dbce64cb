"""The recipe settings in TrainingConfig: [loss], [noise], [validation], the new schedule and optimizer fields."""

from __future__ import annotations

import pytest

from guitrainer import config as C
from guitrainer.config import ConfigError, TrainingConfig, config_from_dict


def test_recipe_sections_default_to_off_and_are_not_written_into_presets():
    cfg = TrainingConfig()
    assert cfg.loss.min_snr_gamma == 0 and cfg.loss.loss_type == "l2" and not cfg.loss.debiased_estimation
    assert (cfg.loss.min_timestep, cfg.loss.max_timestep) == (0, 1000)
    assert cfg.noise.noise_offset == 0 and cfg.noise.multires_noise_iterations == 0 and cfg.noise.ip_noise_gamma == 0
    assert cfg.validation.split == 0 and cfg.validation.folder == ""
    assert C.diff(TrainingConfig(), cfg) == {}


def test_recipe_fields_are_advanced_and_round_trip_through_toml(tmp_path):
    for section in ("loss", "noise", "validation"):
        for path in (p for p in C.field_paths() if p.startswith(section + ".")):
            assert C.field_info(path).metadata["advanced"], path
    cfg = C.config_from_dict(
        {
            "loss": {"min_snr_gamma": 5, "loss_type": "huber", "huber_schedule": "exponential", "min_timestep": 100},
            "noise": {"noise_offset": 0.05, "multires_noise_iterations": 6, "multires_noise_discount": 0.8},
            "schedule": {"lr_scheduler": "cosine_with_restarts", "lr_scheduler_num_cycles": 3, "warmup_ratio": 0.05},
            "validation": {"split": 0.1, "every_n_steps": 20},
        }
    )
    p = tmp_path / "c.toml"
    C.save_toml(cfg, p)
    back = C.load_toml(p)
    assert back == cfg
    assert back.loss.min_snr_gamma == 5.0 and back.schedule.lr_scheduler_num_cycles == 3


@pytest.mark.parametrize(
    ("data", "field", "needle"),
    [
        ({"loss": {"min_timestep": 500, "max_timestep": 400}}, "loss.min_timestep", "must not exceed"),
        ({"noise": {"adaptive_noise_scale": 0.1}}, "noise.adaptive_noise_scale", "needs a noise offset"),
        ({"validation": {"split": 0.1, "folder": "/v"}}, "validation.split", "not both"),
        ({"validation": {"folder": "/data/a"}, "dataset": {"folders": ["/data/a"]}}, "validation.folder", "training folder"),
        ({"loss": {"loss_type": "l3"}}, "loss.loss_type", "one of 'l2', 'l1', 'huber', 'smooth_l1'"),
        ({"loss": {"huber_c": 0}}, "loss.huber_c", "between"),
        ({"schedule": {"lr_scheduler_num_cycles": 0}}, "schedule.lr_scheduler_num_cycles", "between 1 and 1000"),
        ({"schedule": {"warmup_ratio": 1.5}}, "schedule.warmup_ratio", "between 0 and 1"),
    ],
)
def test_bad_recipe_settings_name_their_field(data, field, needle):
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert ei.value.field == field and needle in str(ei.value)


def test_new_optimizers_are_choices():
    choices = C.field_choices(C.field_info("optimizer.name"))
    for name in ("Prodigy", "AdamWScheduleFree", "DAdaptAdam", "CAME"):
        assert name in choices and name in C.OPTIMIZERS
    assert "LR 1.0" in C.field_info("optimizer.name").metadata["choice_labels"]["Prodigy"]


def test_lr_free_optimizer_without_a_learning_rate_gets_one():
    cfg = config_from_dict({"optimizer": {"name": "Prodigy"}})
    assert (cfg.optimizer.lr, cfg.optimizer.text_encoder_lr) == (1.0, 1.0)
    # a learning rate given beside it is kept, whatever the order of the keys
    kept = config_from_dict({"optimizer": {"lr": 0.5, "name": "DAdaptAdam"}})
    assert kept.optimizer.lr == 0.5 and kept.optimizer.text_encoder_lr == 1.0
    # one set by the config below the overlay (a preset) is kept too
    base = TrainingConfig()
    base.optimizer.lr = 3e-4
    over = C.apply_overlay(base, {"optimizer": {"name": "Prodigy"}})
    assert over.optimizer.lr == 3e-4
    # other optimizers keep AdamW's default
    assert config_from_dict({"optimizer": {"name": "CAME"}}).optimizer.lr == 1e-4


def test_a_shipped_preset_uses_prodigy_and_min_snr_with_the_reason_written():
    from guitrainer.base.paths import shipped_presets_dir
    from guitrainer.config.presets import PresetStore
    from guitrainer.core.memory import estimate

    cfg = PresetStore().get("SD 1.5 style — 8 GB").config()
    assert (cfg.optimizer.name, cfg.optimizer.lr, cfg.loss.min_snr_gamma) == ("Prodigy", 1.0, 5.0)
    assert estimate.estimate(cfg).total < 8 * 2**30  # still an 8 GB preset with Prodigy's 16 B/param state
    text = (shipped_presets_dir() / "20_sd15_style.toml").read_text(encoding="utf-8")
    comments = " ".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    assert "Prodigy" in comments and "min-SNR" in comments


def test_the_readme_recipe_example_loads(tmp_path):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", readme, re.S)
    example = next(b for b in blocks if "[loss]" in b)
    path = tmp_path / "recipes.toml"
    path.write_text(example, encoding="utf-8")
    cfg = C.load_toml(path)
    assert (cfg.loss.min_snr_gamma, cfg.loss.loss_type, cfg.noise.multires_noise_iterations) == (5.0, "huber", 6)
    assert (cfg.optimizer.name, cfg.optimizer.lr, cfg.schedule.lr_scheduler_num_cycles) == ("Prodigy", 1.0, 3)
    assert cfg.validation.split == 0.1
