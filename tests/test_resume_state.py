"""Resumable states on the demo model: numbering per run, a finished run resumed, damaged states refused."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
from guitrainer.core.events import NullReporter
from guitrainer.core.runs import state as run_state
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains the demo model


def demo_cfg(out: Path, **settings: object) -> TrainingConfig:
    cfg = PresetStore().get(DEFAULT_PRESET).config()
    cfg.output.folder = str(out)
    cfg.precision.save = "fp32"
    cfg.schedule.max_steps = 2
    for key, value in settings.items():
        cfg.set(key.replace("__", "."), value)
    return cfg


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two runs with the same name into one folder."""
    out = tmp_path_factory.mktemp("out")
    first = Trainer(demo_cfg(out)).run()
    first_info = (Path(first.state_path) / run_state.STATE_FILE).read_bytes()
    second = Trainer(demo_cfg(out, schedule__max_steps=3)).run()
    return out, first, first_info, second


def test_a_second_run_with_the_same_name_keeps_the_first_runs_state(two_runs):
    out, first, first_info, second = two_runs
    assert first.status == second.status == "finished"
    assert Path(first.lora_path).name == "demo_lora.safetensors" and Path(second.lora_path).name == "demo_lora_2.safetensors"
    assert Path(first.state_path) == out / "demo_lora_state"
    assert Path(second.state_path) == out / "demo_lora_2_state"  # the LoRA's numbering rule
    assert (Path(first.state_path) / run_state.STATE_FILE).read_bytes() == first_info  # untouched
    assert json.loads(first_info)["global_step"] == 2
    assert run_state.saved_step(second.state_path) == 3
    assert run_state.find_state(demo_cfg(out)) == second.state_path  # the latest


def test_resuming_a_finished_run_says_complete_and_writes_nothing(two_runs):
    out, first, first_info, _second = two_runs
    before = sorted(p.name for p in out.iterdir())
    rep = NullReporter()
    summary = Trainer(demo_cfg(out, schedule__resume_from=first.state_path), rep).run()
    assert summary.status == "complete", summary.message
    assert summary.steps == 2 and summary.lora_path is None and summary.state_path == first.state_path
    assert "already complete" in summary.message and "2 steps" in summary.message
    assert any("epochs" in a for a in summary.advice)
    assert not rep.steps and not rep.saved
    assert sorted(p.name for p in out.iterdir()) == before  # no other copy
    assert (Path(first.state_path) / run_state.STATE_FILE).read_bytes() == first_info


def test_a_resumed_run_with_steps_left_continues_in_its_own_state(two_runs):
    out, first, _info, _second = two_runs
    summary = Trainer(demo_cfg(out, schedule__resume_from=first.state_path, schedule__max_steps=3)).run()
    assert summary.status == "finished" and summary.steps == 3
    assert summary.state_path == first.state_path and run_state.saved_step(first.state_path) == 3


class _Payload:
    """A pickle that is not plain tensors (it would run code through __reduce__ if loaded unsafely)."""

    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("truncated_json", "damaged"),
        ("pickle_optimizer", "refused"),
        ("truncated_weights", "damaged"),
        ("missing_rng", "missing"),
    ],
)
def test_a_damaged_state_is_refused_in_plain_words(tmp_path, damage, words):
    done = Trainer(demo_cfg(tmp_path / "a", schedule__max_steps=1)).run()
    state = Path(done.state_path)
    if damage == "truncated_json":
        f = state / run_state.STATE_FILE
        f.write_bytes(f.read_bytes()[:40])
    elif damage == "pickle_optimizer":
        (state / run_state.OPTIMIZER_FILE).write_bytes(pickle.dumps({"state": _Payload()}))
    elif damage == "truncated_weights":
        f = state / run_state.WEIGHTS_FILE
        f.write_bytes(f.read_bytes()[:100])
    else:
        (state / run_state.RNG_FILE).unlink()
    summary = Trainer(demo_cfg(tmp_path / "a", schedule__resume_from=str(state), schedule__max_steps=3)).run()
    assert summary.status == "failed" and words in summary.message
    shown = summary.message + " ".join(summary.advice)
    assert "weights_only" not in shown and "Weights only" not in shown and "pwned" not in shown
