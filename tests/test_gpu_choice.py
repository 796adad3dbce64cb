"""``precision.gpu_index`` reaches training: the pure device choice, the trainer's set-up, the start check.

There is no CUDA here, so the trainer tests fake what torch and accelerate see (device count, names,
accelerate's device and process count) and stop the run where the base model would load.
"""

from __future__ import annotations

import threading

import pytest
import torch
from helpers import fake_device

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import DEMO_PRESET
from guitrainer.core.device.hardware import (
    AUTO_GPU,
    GpuChoice,
    GpuChoiceError,
    choose_training_gpu,
    gpu_missing_message,
)
from guitrainer.engine import session as session_module
from guitrainer.engine import trainer as trainer_module
from guitrainer.engine.models.types import ModelLoadError

TWO = ("NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 4090")
TWO_MISSING = "GPU 2 was chosen but this machine has 2 GPUs (0: NVIDIA GeForce RTX 3060, 1: NVIDIA GeForce RTX 4090)"


# --------------------------------------------------------------------------- the pure choice


@pytest.mark.parametrize(
    ("gpu_index", "device_type", "processes", "names", "expected"),
    [
        (AUTO_GPU, "cuda", 1, TWO, GpuChoice(None)),  # automatic: accelerate's device
        (AUTO_GPU, "cpu", 1, (), GpuChoice(None)),
        (0, "cuda", 1, TWO, GpuChoice(0)),
        (1, "cuda", 1, TWO, GpuChoice(1)),
        (0, "cuda", 1, TWO[:1], GpuChoice(0)),
    ],
)
def test_choice_in_a_single_process(gpu_index, device_type, processes, names, expected):
    assert choose_training_gpu(gpu_index, device_type=device_type, num_processes=processes, gpu_names=names) == expected


@pytest.mark.parametrize(("gpu_index", "names"), [(2, TWO), (5, TWO), (1, TWO[:1]), (0, ())])
def test_a_gpu_beyond_the_device_count_fails_naming_the_gpus(gpu_index, names):
    with pytest.raises(GpuChoiceError) as ei:
        choose_training_gpu(gpu_index, device_type="cuda" if names else "cpu", num_processes=1, gpu_names=names)
    assert str(ei.value) == gpu_missing_message(gpu_index, names)
    assert str(ei.value).startswith(f"GPU {gpu_index} was chosen but this machine has ")
    assert "Model & Precision page" in str(ei.value)


def test_missing_messages():
    assert gpu_missing_message(2, TWO) == TWO_MISSING + "; choose one on the Model & Precision page"
    assert "has 1 GPU (0: NVIDIA GeForce RTX 3060);" in gpu_missing_message(1, TWO[:1])
    assert "no GPU that PyTorch can use" in gpu_missing_message(0, ())


def test_multi_process_ignores_the_index_with_a_warning():
    for index in (0, 1, 7):  # even one that is not there: each rank has its own GPU
        choice = choose_training_gpu(index, device_type="cuda", num_processes=4, gpu_names=TWO)
        assert choice.index is None and f"gpu_index = {index} is ignored" in choice.warning
        assert "4-process" in choice.warning and "rank" in choice.warning
    assert choose_training_gpu(AUTO_GPU, device_type="cuda", num_processes=4, gpu_names=TWO) == GpuChoice(None)


def test_accelerate_on_another_device_ignores_the_index_with_a_warning():
    choice = choose_training_gpu(1, device_type="cpu", num_processes=1, gpu_names=TWO)  # e.g. accelerate --cpu
    assert choice.index is None and "ignored" in choice.warning and "cpu" in choice.warning


# --------------------------------------------------------------------------- the trainer's set-up


class _StopAtModel:
    """Stands in for ``load_base_model``: records what the trainer had decided, then ends the run."""

    def __init__(self) -> None:
        self.calls: list[torch.device] = []
        self.trainer: trainer_module.Trainer | None = None

    def __call__(self, *_a, **_k):
        assert self.trainer is not None
        self.calls.append(self.trainer.device)
        raise ModelLoadError("stopped by the test where the model would load")


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch sees two GPUs (names only); ``set_device`` records the device and the thread that set it."""
    seen: list[tuple[torch.device, str]] = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(TWO))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: TWO[i])
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: seen.append((torch.device(d), threading.current_thread().name)))
    return seen


def _run(monkeypatch, gpu_index: int, *, in_thread: bool = False):
    cfg = TrainingConfig()
    cfg.set("precision.training", "fp32")
    cfg.set("precision.gpu_index", gpu_index)
    stop = _StopAtModel()
    monkeypatch.setattr(session_module, "load_base_model", stop)
    trainer = trainer_module.Trainer(cfg)
    stop.trainer = trainer
    if not in_thread:
        return trainer.run(), stop
    out = []
    t = threading.Thread(target=lambda: out.append(trainer.run()), name="guitrainer-test-training")
    t.start()
    t.join(120)
    return out[0], stop


def test_trainer_fails_before_loading_the_model_for_a_missing_gpu(monkeypatch, fake_cuda):
    summary, stop = _run(monkeypatch, 2)
    assert summary.status == "failed" and stop.calls == []  # the model never started loading
    assert summary.message == TWO_MISSING + "; choose one on the Model & Precision page"
    assert any("automatic" in a for a in summary.advice)
    assert fake_cuda == []


def test_trainer_trains_on_the_chosen_cuda_device_in_its_own_thread(monkeypatch, fake_cuda):
    import accelerate

    monkeypatch.setattr(accelerate.Accelerator, "device", property(lambda self: torch.device("cuda")))
    summary, stop = _run(monkeypatch, 1, in_thread=True)
    assert stop.calls == [torch.device("cuda", 1)]
    assert fake_cuda == [(torch.device("cuda", 1), "guitrainer-test-training")]  # current device is per thread
    assert "stopped by the test" in summary.message and not summary.warnings


def test_trainer_automatic_keeps_accelerates_device(monkeypatch, fake_cuda):
    import accelerate

    monkeypatch.setattr(accelerate.Accelerator, "device", property(lambda self: torch.device("cuda")))
    _summary, stop = _run(monkeypatch, AUTO_GPU)
    assert stop.calls == [torch.device("cuda")] and fake_cuda == []


def test_trainer_ignores_the_index_under_multi_process_with_a_warning(monkeypatch, fake_cuda):
    import accelerate

    monkeypatch.setattr(accelerate.Accelerator, "num_processes", property(lambda self: 2))
    summary, stop = _run(monkeypatch, 1)
    assert len(stop.calls) == 1 and fake_cuda == []  # accelerate's device, untouched
    assert any("gpu_index = 1 is ignored" in w and "rank" in w for w in summary.warnings)


def test_trainer_on_this_machine_without_cuda(monkeypatch):
    """No fakes for torch: this CPU-only machine has no GPU 0, and automatic trains on the CPU."""
    summary, stop = _run(monkeypatch, 0)
    assert summary.status == "failed" and stop.calls == []
    assert "GPU 0 was chosen" in summary.message and "no GPU" in summary.message
    _summary, stop = _run(monkeypatch, AUTO_GPU)
    assert stop.calls == [torch.device("cpu")]


# --------------------------------------------------------------------------- the start check


def test_start_check_advises_for_the_chosen_gpu(tmp_path):
    from guitrainer.core.checks.start import check_start

    cfg = TrainingConfig()
    cfg.set("output.folder", str(tmp_path / "out"))
    cfg.set("precision.training", "bf16")
    machine = fake_device("rtx4090", "t4")
    assert not [e for e in check_start(cfg, machine).errors if "Tesla T4" in e]
    cfg.set("precision.gpu_index", 1)
    assert [e for e in check_start(cfg, machine).errors if "Tesla T4" in e and "bf16" in e]
    cfg.set("precision.gpu_index", 2)
    assert [e for e in check_start(cfg, machine).errors if "GPU 2 was chosen" in e]


def test_cli_set_reaches_the_config_and_check_reports_a_missing_gpu(capsys):
    import tomllib

    from guitrainer.cli import main

    demo = DEMO_PRESET
    rc = main(["--preset", demo, "--set", "precision.gpu_index=1", "--check"])
    out = capsys.readouterr().out
    data = tomllib.loads("\n".join(line for line in out.splitlines() if not line.startswith("#")))
    assert data["precision"]["gpu_index"] == 1
    assert rc == 1 and "# error: GPU 1 was chosen but this machine has no GPU" in out  # this machine: no CUDA
    assert main(["--preset", demo, "--set", "precision.gpu_index=-3", "--check"]) == 2
    assert "`precision.gpu_index`" in capsys.readouterr().err
