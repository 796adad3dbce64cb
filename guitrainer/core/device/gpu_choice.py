"""The GPU a run trains on: ``precision.gpu_index`` against what accelerate and torch see (pure; no torch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

AUTO_GPU = -1


class GpuChoiceError(ValueError):
    """``precision.gpu_index`` names a GPU this machine does not have."""


def gpu_missing_message(gpu_index: int, gpu_names: Sequence[str]) -> str:
    """``"GPU 2 was chosen but this machine has 2 GPUs (0: RTX 3060, 1: RTX 4090); choose one on the Model page"``."""
    if not gpu_names:
        return (
            f"GPU {gpu_index} was chosen but this machine has no GPU that PyTorch can use; "
            "choose automatic on the Model & Precision page (or set precision.gpu_index = -1)"
        )
    listing = ", ".join(f"{i}: {name}" for i, name in enumerate(gpu_names))
    count = f"{len(gpu_names)} GPU" + ("" if len(gpu_names) == 1 else "s")
    return f"GPU {gpu_index} was chosen but this machine has {count} ({listing}); choose one on the Model & Precision page"


@dataclass(frozen=True)
class GpuChoice:
    """What the trainer does with ``precision.gpu_index``.

    Attributes:
        index: the CUDA device to train on (``torch.device("cuda", index)``), or None to keep accelerate's device.
        warning: why a set index is ignored ("" when it is not).
    """

    index: int | None
    warning: str = ""


def choose_training_gpu(gpu_index: int, *, device_type: str, num_processes: int, gpu_names: Sequence[str]) -> GpuChoice:
    """Decide the training GPU from ``precision.gpu_index`` and what accelerate and torch see (pure; no torch).

    Args:
        gpu_index: the config's ``precision.gpu_index``; negative means automatic (accelerate's device).
        device_type: ``accelerator.device.type`` ("cuda", "cpu", "mps", ...).
        num_processes: ``accelerator.num_processes``; above 1 (``accelerate launch``) each process already has
            its rank's GPU, so the index is ignored with a warning.
        gpu_names: the name of every CUDA device torch sees, by index (``torch.cuda.get_device_name(i)``).

    Raises:
        GpuChoiceError: the index is not below ``len(gpu_names)``; the message names it and the GPUs present.
    """
    if gpu_index < 0:
        return GpuChoice(None)
    if num_processes > 1:
        return GpuChoice(
            None,
            f"precision.gpu_index = {gpu_index} is ignored: this is a {num_processes}-process launch, "
            "and each process trains on its own rank's GPU",
        )
    if gpu_index >= len(gpu_names):
        raise GpuChoiceError(gpu_missing_message(gpu_index, gpu_names))
    if device_type != "cuda":
        return GpuChoice(None, f"precision.gpu_index = {gpu_index} is ignored: accelerate chose the {device_type} device")
    return GpuChoice(gpu_index)

