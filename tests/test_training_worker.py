"""TrainingWorker and run_in_thread with a fake trainer: no torch, real threads, real queued signals."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from helpers.doubles import FakeTrainer, fake_factory

from guitrainer.config import TrainingConfig
from guitrainer.core.events import RunSummary, SampleImage, SavedFile, StepMetrics
from guitrainer.ui.workers import BaseWorker, TrainingWorker, cap_torch_threads, live_threads, run_in_thread


@pytest.fixture(autouse=True)
def _reset():
    FakeTrainer.instances.clear()
    yield


def _wait_released(qtbot, before: int) -> None:
    qtbot.waitUntil(lambda: live_threads() <= before, timeout=5000)


def _start_and_wait_for_a_step(qtbot, worker: TrainingWorker):
    """Start ``worker`` and return once its first step has reached the GUI thread."""
    steps: list[int] = []
    worker.step_finished.connect(lambda m: steps.append(m.step))
    thread = run_in_thread(worker)
    qtbot.waitUntil(lambda: bool(steps), timeout=5000)
    return thread


def test_signals_arrive_in_order_and_thread_ends(qtbot):
    before = live_threads()
    worker = TrainingWorker(TrainingConfig(), trainer_factory=fake_factory(steps=4))
    seen: list[str] = []
    payloads: list[object] = []
    for name in ("status_changed", "warning_raised", "step_finished", "checkpoint_saved", "finished", "failed"):
        getattr(worker, name).connect(lambda *a, n=name: (seen.append(n), payloads.append(a[0] if a else None)))
    signals = [worker.status_changed, worker.warning_raised] + [worker.step_finished] * 4
    signals += [worker.checkpoint_saved, worker.finished]
    with qtbot.waitSignals(signals, order="strict", timeout=5000):
        thread = run_in_thread(worker)
    assert seen == ["status_changed", "warning_raised"] + ["step_finished"] * 4 + ["checkpoint_saved", "finished"]
    steps = [p for n, p in zip(seen, payloads) if n == "step_finished"]
    assert [m.step for m in steps] == [1, 2, 3, 4]
    assert all(isinstance(m, StepMetrics) and isinstance(m.loss, float) for m in steps)
    summary = payloads[-1]
    assert isinstance(summary, RunSummary) and summary.status == "finished" and summary.steps == 4
    # the trainer ran in the worker thread, not the GUI thread
    assert FakeTrainer.instances[0].thread_name != threading.current_thread().name
    qtbot.waitUntil(lambda: live_threads() <= before, timeout=5000)
    del thread


def test_worker_copies_the_config():
    cfg = TrainingConfig()
    worker = TrainingWorker(cfg, trainer_factory=fake_factory())
    worker.config.network.rank = 99
    assert cfg.network.rank != 99


def test_stop_ends_the_run_and_the_thread(qtbot):
    before = live_threads()
    worker = TrainingWorker(TrainingConfig(), trainer_factory=fake_factory(steps=100_000, delay=0.005))
    _start_and_wait_for_a_step(qtbot, worker)
    with qtbot.waitSignal(worker.finished, timeout=5000) as blocker:
        worker.stop()
    summary = blocker.args[0]
    assert summary.status == "stopped"
    assert summary.steps < 100_000
    assert summary.state_path == "/tmp/fake_state"
    # The thread ended: the janitor drops it only after QThread.wait() returned. (No lambda on
    # thread.finished here: PySide drops a queued lambda when its sender is deleteLater'd first.)
    _wait_released(qtbot, before)


def test_pause_and_resume(qtbot):
    worker = TrainingWorker(TrainingConfig(), trainer_factory=fake_factory(steps=100_000, delay=0.005))
    steps: list[int] = []
    worker.step_finished.connect(lambda m: steps.append(m.step))
    statuses: list[str] = []
    worker.status_changed.connect(statuses.append)
    run_in_thread(worker)
    qtbot.waitUntil(lambda: len(steps) >= 3, timeout=5000)
    worker.pause()
    assert worker.paused
    qtbot.waitUntil(lambda: any(s.startswith("paused") for s in statuses), timeout=5000)
    qtbot.wait(50)  # the step in flight when pause was pressed may still arrive
    frozen = len(steps)
    qtbot.wait(250)
    assert len(steps) == frozen, "steps kept coming while paused"
    worker.resume()
    assert not worker.paused
    qtbot.waitUntil(lambda: len(steps) >= frozen + 3, timeout=5000)
    assert steps == list(range(1, len(steps) + 1))  # nothing lost, nothing repeated
    with qtbot.waitSignal(worker.finished, timeout=5000):
        worker.stop()


def test_stop_while_paused_ends_the_run(qtbot):
    worker = TrainingWorker(TrainingConfig(), trainer_factory=fake_factory(steps=100_000, delay=0.005))
    _start_and_wait_for_a_step(qtbot, worker)
    worker.pause()
    qtbot.wait(50)
    with qtbot.waitSignal(worker.finished, timeout=5000) as blocker:
        worker.stop()
    assert blocker.args[0].status == "stopped"


def test_sample_and_save_requests_reach_the_loop(qtbot):
    worker = TrainingWorker(TrainingConfig(), trainer_factory=fake_factory(steps=100_000, delay=0.005))
    _start_and_wait_for_a_step(qtbot, worker)
    with qtbot.waitSignal(worker.sample_ready, timeout=5000) as sample:
        worker.request_sample()
    assert isinstance(sample.args[0], SampleImage) and sample.args[0].prompt == "a red circle"
    with qtbot.waitSignal(worker.checkpoint_saved, timeout=5000) as saved:
        worker.request_save()
    assert isinstance(saved.args[0], SavedFile) and saved.args[0].kind == "lora"
    with qtbot.waitSignal(worker.finished, timeout=5000):
        worker.stop()
    fake = FakeTrainer.instances[0]
    assert fake.samples_made == 1 and fake.saves == 1  # each request is taken exactly once


def test_exception_arrives_as_failed_with_traceback(qtbot):
    before = live_threads()
    worker = TrainingWorker(TrainingConfig(), trainer_factory=fake_factory(steps=10, fail_at=3))
    finished: list[object] = []
    worker.finished.connect(finished.append)
    with qtbot.waitSignal(worker.failed, timeout=5000) as blocker:
        run_in_thread(worker)
    message, tb = blocker.args
    assert message == "fake failure at step 3"
    assert "Traceback" in tb and "ValueError" in tb and "FakeTrainer" not in message and "in run" in tb
    qtbot.wait(50)
    assert finished == []  # failed and finished are exclusive
    _wait_released(qtbot, before)


def test_a_trainer_that_returns_no_summary_fails(qtbot):
    class Bad:
        def run(self):
            return "done"

    worker = TrainingWorker(TrainingConfig(), trainer_factory=lambda c, r, k: Bad())
    with qtbot.waitSignal(worker.failed, timeout=5000) as blocker:
        run_in_thread(worker)
    assert "RunSummary" in blocker.args[0]


def test_run_in_thread_runs_any_worker(qtbot):
    class Square(BaseWorker):
        def __init__(self, n: int):
            super().__init__()
            self.n = n

        def work(self) -> int:
            return self.n * self.n

    worker = Square(7)
    with qtbot.waitSignal(worker.finished, timeout=5000) as blocker:
        thread = run_in_thread(worker, name="square")
    assert blocker.args == [49]
    assert thread.objectName() == "square"


def test_cap_torch_threads_only_lowers(monkeypatch):
    class FakeTorch:
        n = 8

        def get_num_threads(self):
            return self.n

        def set_num_threads(self, n):
            self.n = n

    fake = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert cap_torch_threads() == 3
    fake.n = 1
    assert cap_torch_threads() == 1


def test_ui_modules_import_without_torch_or_pyqtgraph():
    code = (
        "import sys; import guitrainer.ui.workers, guitrainer.ui.training.page, guitrainer.ui.training.log_panel, "
        "guitrainer.ui.training.sample_gallery; "
        "bad = [m for m in ('torch', 'pyqtgraph', 'diffusers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
