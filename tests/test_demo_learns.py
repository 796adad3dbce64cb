"""The Demo preset teaches the base model something a person can see, and says so with a number.

One real run of the shipped preset, as pressing Train makes it: samples from step 0 (the base model) to the last
step, the trigger prompt's last sample read as the new concept, the control prompt's still the base's shape.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from guitrainer.config.presets import DEMO_PRESET, PresetStore
from guitrainer.core.demo.progress import demo_progress
from guitrainer.core.demo.shapes import CONCEPT, CONTROL_PROMPT
from guitrainer.core.events import NullReporter
from guitrainer.core.runs.samples import first_and_last
from guitrainer.engine.trainer import Trainer


def _preset():
    return PresetStore().get(DEMO_PRESET).config()


def test_the_demo_preset_samples_the_trigger_and_a_control_from_step_zero():
    cfg = _preset()
    assert cfg.model.base == "demo" and cfg.dataset.folders == []  # the Demo dataset, drawn on first use
    assert cfg.sampling.prompts == [CONCEPT.prompt, CONTROL_PROMPT]
    assert cfg.sampling.at_start and cfg.sampling.every_n_steps > 0
    assert cfg.sampling.size == 64 and cfg.sampling.seed == 1234
    assert cfg.schedule.max_steps == 12 * cfg.schedule.epochs // cfg.schedule.batch_size  # 12 pictures, one repeat
    assert cfg.schedule.max_steps % cfg.sampling.every_n_steps == 0  # the last step has a sample: the "after"


@pytest.mark.slow
def test_the_demo_preset_run_learns_the_concept_and_keeps_the_control(tmp_path):
    cfg = _preset()
    cfg.output.folder = str(tmp_path / "out")
    rep = NullReporter()
    summary = Trainer(cfg, rep).run()
    assert summary.status == "finished", summary.message
    last = summary.steps
    assert last == cfg.schedule.max_steps
    made = sorted({(s.prompt, s.step) for s in rep.samples})
    every = cfg.sampling.every_n_steps
    assert made == sorted((p, k) for p in cfg.sampling.prompts for k in range(0, last + 1, every))
    pairs = first_and_last(rep.samples)
    got = {p.prompt: p for p in demo_progress(pairs)}
    assert got[CONCEPT.prompt].verdict == "learned", got[CONCEPT.prompt].describe()
    assert got[CONTROL_PROMPT].verdict == "kept", got[CONTROL_PROMPT].describe()
    assert got[CONCEPT.prompt].first_step == 0 and got[CONCEPT.prompt].last_step == last
    logged = [s for s in rep.statuses if s.startswith("Demo measure:")]
    assert any(f"step {last} a red bar" in s and s.endswith("learned") for s in logged), logged
    lora = load_file(summary.lora_path)
    assert any(k.startswith("lora_te") for k in lora)  # the text encoder learned the new word too
    assert any(v.ndim == 4 for v in lora.values())  # LoCon: the UNet's convolutions, where shapes are drawn


@pytest.mark.slow
def test_sampling_at_start_changes_nothing_in_the_training(tmp_path):
    """Samples at step 0 leave every RNG and module mode as they were: the run trains bit for bit as one without."""
    from helpers.configs import demo_cfg

    files = {}
    for name, at_start in (("plain", False), ("sampled", True)):
        cfg = demo_cfg(tmp_path / name, schedule__max_steps=3, sampling__at_start=at_start)
        rep = NullReporter()
        summary = Trainer(cfg, rep).run()
        assert summary.status == "finished"
        files[name] = (load_file(summary.lora_path), [m.loss for m in rep.steps], rep.samples)
    (a, la, sa), (b, lb, sb) = files["plain"], files["sampled"]
    assert sa == [] and [(s.prompt, s.step) for s in sb] == [(CONCEPT.prompt, 0)]  # step 0 only: every_n_steps is 0
    assert la == lb
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert np.isfinite(la).all()
