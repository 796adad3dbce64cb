"""engine.compute_device: every job outside a training run computes on the GPU the Model page chose.

The machines here have no GPU, so torch's availability answers are replaced: what is checked is the choice
made from them (which device, which index), the same decision a real CUDA, XPU or MPS machine gets.
"""

from __future__ import annotations

import types

import pytest
import torch

from guitrainer.engine import compute_device as cd


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch, "xpu", types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0), raising=False)


def _cuda(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_without_a_gpu_the_cpu(no_gpu):
    assert cd.compute_device() == torch.device("cpu")
    assert cd.compute_device(3) == torch.device("cpu")


def test_the_chosen_cuda_gpu_and_the_first_when_automatic_or_gone(no_gpu, monkeypatch):
    _cuda(monkeypatch, 2)
    assert cd.compute_device(1) == torch.device("cuda", 1)
    assert cd.compute_device(-1) == torch.device("cuda", 0)
    assert cd.compute_device(5) == torch.device("cuda", 0)  # the start check refuses it for training; a job runs


def test_intel_and_apple_gpus_are_used_not_the_cpu(no_gpu, monkeypatch):
    monkeypatch.setattr(torch, "xpu", types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2), raising=False)
    assert cd.compute_device(1) == torch.device("xpu", 1)
    monkeypatch.setattr(torch, "xpu", types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0), raising=False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert cd.compute_device(0) == torch.device("mps")


def test_the_wd14_tagger_runs_on_the_chosen_gpu(tmp_path, monkeypatch):
    """ONNX Runtime is asked for CUDA on the device ``gpu_index`` names, and for its own default without one."""
    import onnxruntime as ort
    from helpers.taggers import build_tiny_tagger

    from guitrainer.engine import captioners as cap

    folder = build_tiny_tagger(tmp_path / "tagger")
    asked: list[object] = []

    class Session:
        def __init__(self, path, providers):
            asked.append(providers)
            raise RuntimeError("no CUDA here")

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "InferenceSession", Session)
    for index in (1, -1):
        with pytest.raises(cap.CaptionerError):
            cap.WDTagger(folder, gpu_index=index)
    assert asked == [
        [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"],
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
    ]


def test_class_images_and_blip_ask_for_the_chosen_gpu(monkeypatch):
    """Class images and BLIP captioning take their device from compute_device(precision.gpu_index)."""
    import inspect

    from guitrainer.engine import captioners, class_images

    asked: list[int] = []

    def fake(gpu_index: int = -1) -> torch.device:
        asked.append(gpu_index)
        raise LookupError("stop here")

    monkeypatch.setattr(cd, "compute_device", fake)
    with pytest.raises(LookupError):
        class_images._class_pipeline(None, object(), None, 64, gpu_index=2)
    with pytest.raises(LookupError):
        captioners.BlipCaptioner.__init__(object.__new__(captioners.BlipCaptioner), "unused", gpu_index=1)
    assert asked == [2, 1]
    assert "gpu_index" in inspect.signature(class_images.generate_class_images).parameters
