"""A run whose output folder goes bad keeps its work: another folder chosen mid-run (Control.redirect_output)
takes the next saves, Save now works while paused, and engine-caught failures carry advice and details."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

from guitrainer.core.events import Control, NullReporter

pytestmark = pytest.mark.slow  # every test here trains the demo model

sys.path.insert(0, str(Path(__file__).parent))
from helpers import demo_cfg  # noqa: E402


class _RedirectOnFailure(NullReporter):
    """Like the Output page: on "not saved", choose another folder (through the Control) and press Save now."""

    def __init__(self, control: Control, good: Path):
        super().__init__()
        self.control, self.good, self.redirected = control, good, 0

    def on_warning(self, text: str) -> None:
        super().on_warning(text)
        if "was not saved" in text and not self.redirected:
            self.redirected += 1
            self.control.redirect_output(str(self.good))
            self.control.request_save()


def test_a_new_folder_chosen_mid_run_takes_the_next_saves(tmp_path):
    from guitrainer.engine.trainer import Trainer

    torch.set_num_threads(1)
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the output folder should be")
    control = Control()
    rep = _RedirectOnFailure(control, tmp_path / "good")
    cfg = demo_cfg(blocker, schedule__max_steps=4, schedule__batch_size=6, output__save_every_n_epochs=1)  # 2 steps an epoch
    summary = Trainer(cfg, rep, control).run()
    assert summary.status == "finished", summary.message
    assert rep.redirected == 1
    saved = [Path(s.path) for s in rep.saved if s.kind == "lora"]
    assert [p.parent for p in saved] == [tmp_path / "good"] * 2  # Save now, then the final LoRA
    assert [p.name for p in saved] == ["demo_lora-step000002.safetensors", "demo_lora.safetensors"]
    assert Path(summary.lora_path) == saved[-1] and blocker.read_text().startswith("a file")
    failed = [w for w in rep.warnings if "was not saved" in w]
    assert failed and "choose another output folder" in failed[0] and str(blocker) in failed[0]
    assert summary.state_path and Path(summary.state_path).parent == tmp_path / "good"
    assert any(s.startswith("saving into") for s in rep.statuses)


class _PauseAt(NullReporter):
    def __init__(self, control: Control, step: int):
        super().__init__()
        self.control, self.step = control, step
        self.paused = threading.Event()
        self.saved_event = threading.Event()

    def on_step(self, metrics) -> None:
        super().on_step(metrics)
        if metrics.step == self.step:
            self.control.pause()

    def on_status(self, text: str) -> None:
        super().on_status(text)
        if text.startswith("paused"):
            self.paused.set()

    def on_saved(self, saved) -> None:
        super().on_saved(saved)
        self.saved_event.set()


def test_save_now_while_paused_saves_at_once_into_the_new_folder(tmp_path):
    from guitrainer.engine.trainer import Trainer

    torch.set_num_threads(1)
    control = Control()
    rep = _PauseAt(control, 2)
    cfg = demo_cfg(tmp_path / "first", schedule__max_steps=4)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(Trainer(cfg, rep, control).run()))
    thread.start()
    try:
        assert rep.paused.wait(60), "the run never paused"
        control.redirect_output(str(tmp_path / "second"))
        control.request_save()
        assert rep.saved_event.wait(30), "Save now did nothing while paused"
        assert [s.step for s in rep.steps] == [1, 2]  # still paused: no step ran meanwhile
        assert control.paused
    finally:
        control.resume()
        thread.join(60)
    summary = result[0]
    assert summary.status == "finished" and summary.steps == 4
    loras = [Path(s.path) for s in rep.saved if s.kind == "lora"]
    assert loras[0] == tmp_path / "second" / "demo_lora-step000002.safetensors" and loras[0].is_file()
    assert Path(summary.lora_path).parent == tmp_path / "second"
    assert not (tmp_path / "first").exists() or not list((tmp_path / "first").glob("*.safetensors"))


def test_engine_caught_failures_carry_advice_and_details(tmp_path):
    from guitrainer.engine.trainer import DATASET_ADVICE, MODEL_ADVICE, Trainer

    torch.set_num_threads(1)
    missing = tmp_path / "no_such_model.safetensors"
    summary = Trainer(demo_cfg(tmp_path / "out", model__base=str(missing), model__family="sd15"), NullReporter()).run()
    assert summary.status == "failed" and str(missing) in summary.message
    assert summary.advice == MODEL_ADVICE
    assert "Traceback" in summary.details and "ModelLoadError" in summary.details

    empty = tmp_path / "empty"
    empty.mkdir()
    summary = Trainer(demo_cfg(tmp_path / "out", dataset__folders=[str(empty)]), NullReporter()).run()
    assert summary.status == "failed" and summary.advice == DATASET_ADVICE
    assert "DatasetError" in summary.details
