"""Test doubles for the engine's reporter and for the trainer the UI's worker runs (no torch)."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from guitrainer.config import TrainingConfig
from guitrainer.core.events import (
    Control,
    NullReporter,
    Reporter,
    RunSummary,
    SampleImage,
    SavedFile,
    StepMetrics,
)


class StopAt(NullReporter):
    """Records everything and asks the run to stop after step ``n``."""

    def __init__(self, control: Control, n: int):
        super().__init__()
        self.control, self.n = control, n

    def on_step(self, metrics: StepMetrics) -> None:
        super().on_step(metrics)
        if metrics.step == self.n:
            self.control.request_stop()


class HashingReporter(NullReporter):
    """Records the sha256 of each saved LoRA file at the moment it is reported."""

    def __init__(self) -> None:
        super().__init__()
        self.hashes: dict[str, str] = {}

    def on_saved(self, saved: SavedFile) -> None:
        super().on_saved(saved)
        if saved.kind == "lora":
            self.hashes[saved.path] = hashlib.sha256(Path(saved.path).read_bytes()).hexdigest()


class FakeTrainer:
    """Emits ``steps`` StepMetrics with small sleeps and polls the Control like the engine does."""

    instances: list[FakeTrainer] = []

    def __init__(self, config: TrainingConfig, reporter: Reporter, control: Control, *, steps: int = 5,
                 delay: float = 0.01, fail_at: int | None = None):
        self.config, self.reporter, self.control = config, reporter, control
        self.steps, self.delay, self.fail_at = steps, delay, fail_at
        self.thread_name = ""
        self.done_steps: list[int] = []
        self.samples_made = 0
        self.saves = 0
        FakeTrainer.instances.append(self)

    def run(self) -> RunSummary:
        self.thread_name = threading.current_thread().name
        self.reporter.on_status("loading the base model")
        self.reporter.on_warning("a fake warning")
        step = 0
        while step < self.steps:
            time.sleep(self.delay)
            step += 1
            if self.fail_at == step:
                raise ValueError(f"fake failure at step {step}")
            self.reporter.on_step(StepMetrics(step=step, total_steps=self.steps, epoch=1 + step // 3, loss=1.0 / step,
                                              lr=1e-4, grad_scale=65536.0, seconds_per_step=self.delay))
            self.done_steps.append(step)
            if self.control.take_sample_request():
                self.samples_made += 1
                self.reporter.on_sample(SampleImage(path="/nonexistent.png", prompt="a red circle", step=step))
            if self.control.take_save_request():
                self.saves += 1
                self.reporter.on_saved(SavedFile(path=f"/tmp/fake-{step}.safetensors", kind="lora", step=step))
            if self.control.paused and not self.control.stop_requested:
                self.reporter.on_status(f"paused at step {step}")
                self.control.wait_while_paused(0.01)
            if self.control.stop_requested:
                self.reporter.on_saved(SavedFile(path="/tmp/fake.safetensors", kind="lora", step=step))
                return RunSummary("stopped", step, 1, 1.0 / step, lora_path="/tmp/fake.safetensors",
                                  state_path="/tmp/fake_state")
        self.reporter.on_saved(SavedFile(path="/tmp/fake.safetensors", kind="lora", step=step))
        return RunSummary("finished", step, 1, 1.0 / step, lora_path="/tmp/fake.safetensors")


def fake_factory(**kw):
    def make(config, reporter, control):
        return FakeTrainer(config, reporter, control, **kw)

    return make
