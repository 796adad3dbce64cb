"""Validation loss (engine/validation.py): held-out images, fixed timesteps, fixed noise, comparable scores."""

from __future__ import annotations

import shutil

import pytest
import torch
from helpers import demo_cfg

from guitrainer.core.events import NullReporter
from guitrainer.engine import validation as V
from guitrainer.engine.models.demo import ensure_demo_dataset
from guitrainer.engine.trainer import Trainer


def test_split_holds_out_the_share_and_is_fixed_by_the_seed():
    items = list(range(10))
    train, held = V.split_items(items, 0.2, seed=3)
    assert len(train) == 8 and len(held) == 2  # ceil(10 x 0.8) train, as sd-scripts splits
    assert sorted(train + held) == items and not set(train) & set(held)
    assert V.split_items(items, 0.2, seed=3) == (train, held)
    assert any(V.split_items(items, 0.2, seed=s)[1] != held for s in range(4, 10))
    assert V.split_items(items, 0.0, seed=3) == (items, [])
    assert V.split_items([1], 0.5, seed=3) == ([1], [])  # one image: nothing to hold out
    assert V.split_items([1, 2], 0.9, seed=3)[0]  # at least one image left to train on


def test_fixed_timesteps_are_sd_scripts_linspace():
    # numpy.linspace(0, 1000, 6, dtype=int)[1:-1] = [200, 400, 600, 800]
    assert V.fixed_timesteps(0, 1000) == [200, 400, 600, 800]
    assert V.fixed_timesteps(100, 600) == [200, 300, 400, 500]


def test_bucket_batches_keep_each_batch_in_one_bucket():
    buckets = [(64, 64), (64, 32), (64, 64), (64, 64), (64, 32)]
    assert V.bucket_batches(buckets, 2) == [[0, 2], [3], [1, 4]]


def test_score_is_the_same_twice_and_leaves_the_rng_alone():
    plan = V.make_plan([(8, 8)] * 3, 2, V.fixed_timesteps(0, 1000), seed=5)
    assert plan.passes == 2 * 4

    def batch_loss(batch, t):
        return torch.randn(len(batch)).mean() + t.float().mean() / 1000

    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = V.score(plan, batch_loss, torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), before)
    assert V.score(plan, batch_loss, torch.device("cpu")) == a


@pytest.mark.slow
def test_validation_loss_in_a_run_is_reported_and_repeatable(tmp_path):
    torch.set_num_threads(1)
    rep = NullReporter()
    cfg = demo_cfg(tmp_path, schedule__max_steps=6, validation__split=0.25, validation__every_n_steps=3)
    trainer = Trainer(cfg, rep)
    assert trainer.run().status == "finished"
    s = trainer.session
    assert len(s.dataset.items) == 9 and len(s.validation_dataset.items) == 3  # 12 demo images, a quarter held out
    held = {i.image.name for i in s.validation_dataset.items}
    assert not held & {i.image.name for i in s.dataset.items}
    reported = [(m.step, m.validation_loss) for m in rep.steps if m.validation_loss is not None]
    assert [s for s, _ in reported] == [3, 6]
    # the same weights score the same, however often (and the score at step 6 was of these weights)
    first, second = trainer.validation_loss(), trainer.validation_loss()
    assert first == second == reported[-1][1]
    from guitrainer.engine.network.lora import read_lora

    _, meta = read_lora(trainer.lora_path)
    assert (meta["ss_num_validation_images"], meta["ss_validation_split"], meta["ss_validate_every_n_steps"]) == ("3", "0.25", "3")


@pytest.mark.slow
def test_a_validation_folder_does_not_change_training(tmp_path):
    torch.set_num_threads(1)
    folder = tmp_path / "val"
    folder.mkdir()
    for src in sorted(ensure_demo_dataset().glob("0[01]_*")):  # two demo images and their captions
        shutil.copy(src, folder / src.name)
    plain, with_val = NullReporter(), NullReporter()
    Trainer(demo_cfg(tmp_path / "a", schedule__max_steps=4), plain).run()
    cfg = demo_cfg(tmp_path / "b", schedule__max_steps=4, validation__folder=str(folder), validation__every_n_steps=2)
    trainer = Trainer(cfg, with_val)
    trainer.run()
    assert len(trainer.session.validation_dataset.items) == 2
    assert [m.loss for m in plain.steps] == [m.loss for m in with_val.steps]  # scoring draws nothing from training
    assert [m.validation_loss is not None for m in with_val.steps] == [False, True, False, True]
