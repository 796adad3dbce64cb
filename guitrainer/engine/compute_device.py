"""The torch device a job computes on outside a training run: class images, captioning, the precision lab.

A training run takes accelerate's device (and ``precision.gpu_index``, :mod:`guitrainer.engine.session`);
every other job asks here, so each uses the same GPU the Model page chose and none ignores Apple's or
Intel's GPUs.
"""

from __future__ import annotations

import torch


def compute_device(gpu_index: int = -1) -> torch.device:
    """The device for ``precision.gpu_index``: that CUDA (or ROCm) GPU when it exists, else the first; else an
    Intel GPU (XPU), else Apple's GPU (MPS), else the CPU — the order accelerate picks a training device in.

    An index past the GPUs present falls back to the first GPU: the start check refuses such an index for a
    training run with its own message, a helper job should still run.
    """
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        return torch.device("cuda", gpu_index if 0 <= gpu_index < count else 0)
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        count = xpu.device_count()
        return torch.device("xpu", gpu_index if 0 <= gpu_index < count else 0)
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
