"""Fake machines: a DeviceInfo for well-known devices, built without torch."""

from __future__ import annotations

import dataclasses
from typing import Any

from guitrainer.core.hardware import BitsAndBytesInfo, CpuInfo, DeviceInfo, GpuInfo, mps_capabilities
from guitrainer.core.units import GiB


def _gpu(name: str, cap: tuple[int, int], gb: float, *, tensor_cores: bool | None = None, **kw: Any) -> GpuInfo:
    tc = cap >= (7, 0) if tensor_cores is None else tensor_cores
    total = int(gb * GiB)
    return GpuInfo(0, name, cap, total, kw.pop("free_memory", int(total * 0.9)), cap >= (8, 0), tc, **kw)


_CUDA_ARCHS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
_CUDA_ARCHS_NO_120 = ("sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")

FAKE_GPUS: dict[str, GpuInfo] = {
    "gtx980": _gpu("NVIDIA GeForce GTX 980", (5, 2), 4),
    "gtx1080": _gpu("NVIDIA GeForce GTX 1080", (6, 1), 8),
    "gtx1660": _gpu("NVIDIA GeForce GTX 1660 SUPER", (7, 5), 6, tensor_cores=False),
    "t4": _gpu("Tesla T4", (7, 5), 16),
    "rtx2080ti": _gpu("NVIDIA GeForce RTX 2080 Ti", (7, 5), 11),
    "rtx3060": _gpu("NVIDIA GeForce RTX 3060", (8, 6), 12),
    "rtx4090": _gpu("NVIDIA GeForce RTX 4090", (8, 9), 24),
    "h100": _gpu("NVIDIA H100 80GB HBM3", (9, 0), 80),
    "rtx5090": _gpu("NVIDIA GeForce RTX 5090", (12, 0), 32),
    "rtx5090_no_sm120": _gpu("NVIDIA GeForce RTX 5090", (12, 0), 32, kernels_in_build=False),
}

#: names :func:`fake_device` understands
FAKE_DEVICES: tuple[str, ...] = ("cpu", "cpu_bf16", *FAKE_GPUS, "mps", "mps_old")


def fake_device(name: str = "cpu", *more_gpus: str, bitsandbytes: BitsAndBytesInfo | None | bool = True, **overrides: Any) -> DeviceInfo:
    """A DeviceInfo for a well-known machine, for tests and demos.

    Args:
        name: one of :data:`FAKE_DEVICES` ("cpu", "cpu_bf16", "gtx1080", "gtx1660", "t4", "rtx2080ti", "rtx3060",
            "rtx4090", "h100", "rtx5090", "rtx5090_no_sm120", "mps", "mps_old").
        more_gpus: further GPU names for a multi-GPU machine (indexes follow).
        bitsandbytes: True for a working bitsandbytes matching the device, False / None for none installed,
            or a :class:`BitsAndBytesInfo`.
        overrides: any DeviceInfo field (e.g. ``torch_version="2.4.1"``).
    """
    if name not in FAKE_DEVICES:
        raise KeyError(f"unknown fake device {name!r}; choose from {', '.join(FAKE_DEVICES)}")
    cpu = CpuInfo("Fake x86-64 CPU", 8, bf16_native=(name == "cpu_bf16"),
                  bf16_flags=("avx512_bf16",) if name == "cpu_bf16" else ())
    gpus = [dataclasses.replace(FAKE_GPUS[g], index=i) for i, g in enumerate((name, *more_gpus)) if g in FAKE_GPUS]
    default_torch = {"rtx5090_no_sm120": "2.5.1+cu124", "mps": "2.13.0", "mps_old": "2.4.1"}.get(
        name, "2.13.0+cu128" if gpus else "2.13.0+cpu"
    )
    torch_version = overrides.pop("torch_version", default_torch)
    fields: dict[str, Any] = {"cuda_version": "12.8", "arch_list": _CUDA_ARCHS}
    if name == "rtx5090_no_sm120":
        fields.update(cuda_version="12.4", arch_list=_CUDA_ARCHS_NO_120)
    mps = None
    if name.startswith("mps"):
        mps = mps_capabilities(True, torch_version, "13.6" if name == "mps_old" else "14.5")
        cpu = CpuInfo("Apple M2", 8, bf16_native=True, bf16_flags=("FEAT_BF16",))
        fields.update(cuda_version=None, arch_list=())
    elif not gpus:
        fields.update(cuda_version=None, arch_list=())
    if bitsandbytes is True:
        backend = "cuda" if gpus else "cpu"
        bnb = BitsAndBytesInfo(True, "0.50.2", backend)
    elif isinstance(bitsandbytes, BitsAndBytesInfo):
        bnb = bitsandbytes
    else:
        bnb = BitsAndBytesInfo(False, reason="not installed")
    fields.update(overrides)
    return DeviceInfo(cpu=cpu, gpus=tuple(gpus), mps=mps, bitsandbytes=bnb, torch_version=torch_version, **fields)
