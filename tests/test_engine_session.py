"""engine.session: build_session turns a config into one complete, frozen Session (demo model, CPU)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import configs

from guitrainer.config import TrainingConfig
from guitrainer.engine.feedback import Feedback
from guitrainer.engine.session import Session, build_session

pytestmark = pytest.mark.slow  # every test here builds a training session on the demo model


def demo_cfg(out: Path, **settings: object) -> TrainingConfig:
    """helpers.configs' short Demo run, saving as the preset saves (fp16)."""
    return configs.demo_cfg(out, precision__save="fp16", **settings)


@pytest.fixture(scope="module")
def fp16_session(tmp_path_factory) -> Session:
    cfg = demo_cfg(tmp_path_factory.mktemp("out"), precision__training="fp16", schedule__gradient_accumulation=2)
    return build_session(cfg, Feedback())


def test_a_session_is_frozen_and_complete(fp16_session):
    s = fp16_session
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.optimizer = None  # type: ignore[misc]
    assert all(getattr(s, f.name) is not None for f in dataclasses.fields(s) if f.name not in ("class_dataset", "validation_dataset", "offloader"))
    assert s.class_dataset is None and s.train_counts and s.class_counts == [] and s.offloader is None  # offload off


def test_fp16_session_follows_the_precision_table(fp16_session):
    s = fp16_session
    assert s.dtype == torch.float16 and isinstance(s.scaler, torch.amp.GradScaler)
    assert s.params and all(p.dtype == torch.float32 and p.requires_grad for p in s.params)  # fp32 master weights
    frozen = [p for n, p in s.model.denoiser.named_parameters() if "lora_" not in n]
    assert frozen and all(p.dtype == torch.float16 and not p.requires_grad for p in frozen)
    assert next(s.model.vae.parameters()).dtype == torch.float32  # fp16 on a CPU: the VAE stays fp32
    in_optimizer = {id(p) for g in s.optimizer.param_groups for p in g["params"]}
    assert in_optimizer == {id(p) for p in s.params}


def test_schedule_counts_from_the_demo_dataset(fp16_session):
    # the demo draws 12 images at 64 px without bucketing: batch 2 -> 6 batches per epoch; accumulation 2
    # -> 3 optimizer steps per epoch; 2 epochs -> 6 steps
    s = fp16_session
    assert len(s.dataset) == 12
    assert s.batches_per_epoch == 6 and s.steps_per_epoch == 3 and s.total_steps == 6
    assert sorted(i for b in s.epoch_batches(0) for i in b) == list(range(12))
    assert [cls for _b, cls in s.epoch_pairs(0)] == [[]] * 6  # no class images


def test_bf16_has_no_scaler_and_max_steps_wins(tmp_path):
    s = build_session(demo_cfg(tmp_path, precision__training="bf16", schedule__max_steps=3), Feedback())
    assert s.scaler is None and s.dtype == torch.bfloat16 and s.total_steps == 3
    frozen = [p for n, p in s.model.denoiser.named_parameters() if "lora_" not in n]
    assert all(p.dtype == torch.bfloat16 for p in frozen)
