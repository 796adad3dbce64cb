"""One run, one label, on the demo model: a later run with the same name writes none of an earlier run's files
(samples, LoRA, state, TensorBoard events), deleting it removes only its own, and a stopped run resumed writes
on into its own names (issue 27, items 2 and 9)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from guitrainer.core.events import Control, NullReporter
from guitrainer.core.runs.checks import remove_paths
from guitrainer.core.runs.store import RunStore
from guitrainer.engine.recording import recording
from guitrainer.engine.trainer import Trainer
from tests.helpers.configs import demo_cfg
from tests.helpers.doubles import StopAt

pytestmark = pytest.mark.slow

SAMPLING = {"sampling__every_n_steps": 2, "sampling__steps": 2, "schedule__max_steps": 4}


def _recorded_run(db: Path, cfg, reporter=None, control: Control | None = None):
    rep = reporter or NullReporter()
    with recording(rep, cfg, source="test", store_path=db) as rec:
        trainer = Trainer(cfg, rec.reporter, control)
        rec.attach(trainer)
        summary = trainer.run()
        rec.finish(summary)
    return summary, rep, rec.run_id


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_later_run_of_the_same_name_writes_none_of_the_earlier_runs_files(tmp_path):
    out, db = tmp_path / "out", tmp_path / "runs.sqlite3"
    first, first_rep, first_id = _recorded_run(db, demo_cfg(out, output__tensorboard=True, **SAMPLING))
    assert first.status == "finished", first.message
    earlier = _tree(out)
    # the same name and folder; another seed, so its pictures differ from the first run's
    second, second_rep, second_id = _recorded_run(db, demo_cfg(out, output__tensorboard=True, sampling__seed=7, **SAMPLING))
    assert second.status == "finished", second.message

    first_samples = [Path(s.path) for s in first_rep.samples]
    second_samples = [Path(s.path) for s in second_rep.samples]
    assert [p.name for p in first_samples] == ["demo_lora_step000002_0.png", "demo_lora_step000004_0.png"]
    assert [p.name for p in second_samples] == ["demo_lora_2_step000002_0.png", "demo_lora_2_step000004_0.png"]
    assert second_samples[0].read_bytes() != first_samples[0].read_bytes()  # the pictures do differ
    now = _tree(out)
    assert {k: now[k] for k in earlier} == earlier  # every byte the first run wrote is still there, unchanged
    # the second run's files all carry one label: LoRA, state, samples, TensorBoard folder
    assert Path(second.lora_path).name == "demo_lora_2.safetensors"
    assert Path(second.state_path).name == "demo_lora_2_state"
    logs = sorted(p.name for p in (out / "logs").iterdir())  # one TensorBoard folder per run, each with its label
    assert len(logs) == 2 and re.fullmatch(r"demo_lora_\d{14}", logs[0]) and re.fullmatch(r"demo_lora_2_\d{14}", logs[1])

    from safetensors import safe_open

    with safe_open(second.lora_path, "pt") as f:
        assert f.metadata()["ss_output_name"] == "demo_lora_2"  # as kohya's: the file's own name
    with RunStore(db) as store:
        assert [store.run_row(i).name for i in (first_id, second_id)] == ["demo_lora", "demo_lora_2"]  # Runs page
        own = store.files_of(second_id)
        assert sorted(p.name for p in own) == sorted(
            ["demo_lora_2.safetensors", "demo_lora_2_state", *(p.name for p in second_samples), logs[1]]
        )
        assert remove_paths(own) == []  # "Delete…" with "also delete files" on the second run
        store.delete_run(second_id)
        assert all(p.exists() for p in store.files_of(first_id))
    assert _tree(out) == earlier  # exactly the first run's files are left


def test_a_stopped_run_resumed_writes_on_into_its_own_names(tmp_path):
    out = tmp_path / "out"
    assert Trainer(demo_cfg(out, schedule__max_steps=2)).run().status == "finished"  # an earlier run: demo_lora
    control = Control()
    stopped = Trainer(demo_cfg(out, schedule__max_steps=6), StopAt(control, 3), control).run()
    assert stopped.status == "stopped" and stopped.steps == 3
    assert (Path(stopped.lora_path).name, Path(stopped.state_path).name) == ("demo_lora_2.safetensors", "demo_lora_2_state")
    before = sorted(p.name for p in out.iterdir())
    at_stop = Path(stopped.lora_path).read_bytes()

    rep = NullReporter()
    resumed = Trainer(demo_cfg(out, schedule__max_steps=6, schedule__resume_from=stopped.state_path), rep).run()
    assert resumed.status == "finished" and resumed.steps == 6, resumed.message
    assert resumed.lora_path == stopped.lora_path and resumed.state_path == stopped.state_path  # one run, one number
    # before: the resumed run wrote demo_lora_3.safetensors beside demo_lora_2_state
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "demo_lora_2-step000003.safetensors"])
    kept = out / "demo_lora_2-step000003.safetensors"  # the LoRA saved at the stop, kept under its step's name
    assert kept.read_bytes() == at_stop and Path(resumed.lora_path).read_bytes() != at_stop
    assert [(s.kind, Path(s.path).name, s.step) for s in rep.saved if s.kind == "lora"] == [
        ("lora", kept.name, 3), ("lora", "demo_lora_2.safetensors", 6)
    ]
    # and the next run takes the next label for all its files
    third = Trainer(demo_cfg(out, schedule__max_steps=1)).run()
    assert (Path(third.lora_path).name, Path(third.state_path).name) == ("demo_lora_3.safetensors", "demo_lora_3_state")


def test_a_file_the_run_did_not_write_is_never_written_over(tmp_path):
    """A LoRA put where a resumed run's final LoRA goes (by hand, say) stays; the run names its LoRA by its step."""
    out = tmp_path / "out"
    control = Control()
    stopped = Trainer(demo_cfg(out, schedule__max_steps=4), StopAt(control, 2), control).run()
    mine = Path(stopped.lora_path)
    mine.write_bytes(b"the user's own file now")
    resumed = Trainer(demo_cfg(out, schedule__max_steps=4, schedule__resume_from=stopped.state_path)).run()
    assert resumed.status == "finished", resumed.message
    assert Path(resumed.lora_path).name == "demo_lora-step000004.safetensors"
    assert mine.read_bytes() == b"the user's own file now"
