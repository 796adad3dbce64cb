"""Fake machines: a DeviceInfo for well-known devices, built without torch.

Each GPU is described only by what its driver reports (name, compute capability, memory, SM count, gfx
architecture); its traits (bf16, tensor cores, fast fp16) come from the same rules the probe uses
(:func:`guitrainer.core.device.hardware.make_gpu_info`), so a test on a fake device tests those rules.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from guitrainer.base.units import GiB
from guitrainer.core.device.hardware import (
    BitsAndBytesInfo,
    CpuInfo,
    DeviceInfo,
    GpuInfo,
    make_gpu_info,
    mps_capabilities,
)


def _gpu(name: str, cap: tuple[int, int], gb: float, sms: int = 0, *, vendor: str = "nvidia", gfx: str = "",
         **kw: Any) -> GpuInfo:
    total = int(gb * GiB)
    return make_gpu_info(0, name, cap, total, kw.pop("free_memory", int(total * 0.9)), vendor,  # type: ignore[arg-type]
                         sm_count=sms, gfx_arch=gfx, **kw)


_CUDA_ARCHS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
_CUDA_ARCHS_NO_120 = ("sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
_CUDA_ARCHS_CU128 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")  # torch 2.8+ cu128: no sm_50-sm_70

# SM counts and compute capabilities from NVIDIA's specifications (TechPowerUp GPU Database for each part).
FAKE_GPUS: dict[str, GpuInfo] = {
    "gtx980": _gpu("NVIDIA GeForce GTX 980", (5, 2), 4, 16),
    "gtx1080": _gpu("NVIDIA GeForce GTX 1080", (6, 1), 8, 20),
    "gtx1080_cu128": _gpu("NVIDIA GeForce GTX 1080", (6, 1), 8, 20, kernels_in_build=False),
    "p100": _gpu("Tesla P100-PCIE-16GB", (6, 0), 16, 56),
    "v100": _gpu("Tesla V100-SXM2-16GB", (7, 0), 16, 80),
    "gtx1660": _gpu("NVIDIA GeForce GTX 1660 SUPER", (7, 5), 6, 22),
    "t1000": _gpu("NVIDIA T1000 8GB", (7, 5), 8, 14),
    "mx450": _gpu("NVIDIA GeForce MX450", (7, 5), 2, 14),
    "tu117_unnamed": _gpu("NVIDIA Graphics Device", (7, 5), 4, 16),  # an unknown name: the SM count decides
    "t4": _gpu("Tesla T4", (7, 5), 16, 40),
    "rtx2080ti": _gpu("NVIDIA GeForce RTX 2080 Ti", (7, 5), 11, 68),
    "rtx3060": _gpu("NVIDIA GeForce RTX 3060", (8, 6), 12, 28),
    "rtx4090": _gpu("NVIDIA GeForce RTX 4090", (8, 9), 24, 128),
    "h100": _gpu("NVIDIA H100 80GB HBM3", (9, 0), 80, 132),
    "rtx5090": _gpu("NVIDIA GeForce RTX 5090", (12, 0), 32, 170),
    "rtx5090_no_sm120": _gpu("NVIDIA GeForce RTX 5090", (12, 0), 32, 170, kernels_in_build=False),
    # ROCm reports gfx10.3 as "capability" (10, 3): a number that means nothing about matrix cores
    "rx6800": _gpu("AMD Radeon RX 6800 XT", (10, 3), 16, 72, vendor="amd", gfx="gfx1030", kernels_in_build=None),
    "rx7900": _gpu("AMD Radeon RX 7900 XTX", (11, 0), 24, 96, vendor="amd", gfx="gfx1100", kernels_in_build=None),
    "mi250": _gpu("AMD Instinct MI250X", (9, 0), 64, 110, vendor="amd", gfx="gfx90a", kernels_in_build=None),
    "arc_a770": _gpu("Intel(R) Arc(TM) A770 Graphics", (0, 0), 16, 32, vendor="intel", kernels_in_build=None),
}

MAC_DEVICES = {  # name -> (chip, torch, macOS)
    "mps": ("Apple M2", "2.13.0", "14.5"),
    "m1": ("Apple M1", "2.13.0", "14.5"),
    "m3": ("Apple M3 Max", "2.13.0", "14.5"),
    "m2_macos13": ("Apple M2 Pro", "2.13.0", "13.6"),
    "m2_torch27": ("Apple M2", "2.7.1", "14.5"),
    "mps_old": ("Apple M2", "2.4.1", "13.6"),
}
_CPUS = {  # name -> (model, flags, amx)
    "cpu": ("Fake x86-64 CPU", (), False),
    "cpu_bf16": ("AMD Ryzen 9 7950X", ("avx512_bf16",), False),  # Zen 4: AVX512-BF16, no AMX
    "cpu_amx": ("Intel(R) Xeon(R) Platinum 8480+", ("avx512_bf16", "amx_bf16", "amx_tile"), True),  # Sapphire Rapids
}

#: names :func:`fake_device` understands
FAKE_DEVICES: tuple[str, ...] = (*_CPUS, *FAKE_GPUS, *MAC_DEVICES)


def fake_device(name: str = "cpu", *more_gpus: str, bitsandbytes: BitsAndBytesInfo | None | bool = True,
                **overrides: Any) -> DeviceInfo:
    """A DeviceInfo for a well-known machine, for tests.

    Args:
        name: one of :data:`FAKE_DEVICES`.
        more_gpus: further GPU names for a multi-GPU machine (indexes follow).
        bitsandbytes: True for a working bitsandbytes 0.50.2 matching the device, False / None for none
            installed, or a :class:`BitsAndBytesInfo`.
        overrides: any DeviceInfo field (e.g. ``torch_version="2.4.1"``).
    """
    if name not in FAKE_DEVICES:
        raise KeyError(f"unknown fake device {name!r}; choose from {', '.join(FAKE_DEVICES)}")
    model, flags, amx = _CPUS.get(name, _CPUS["cpu"])
    cpu = CpuInfo(model, 8, bf16_native=bool(flags), bf16_flags=flags, amx=amx)
    gpus = [dataclasses.replace(FAKE_GPUS[g], index=i) for i, g in enumerate((name, *more_gpus)) if g in FAKE_GPUS]
    vendor = gpus[0].vendor if gpus else ""
    default_torch = {"rtx5090_no_sm120": "2.5.1+cu124", "gtx1080_cu128": "2.8.0+cu128"}.get(
        name, {"amd": "2.13.0+rocm7.1", "intel": "2.13.0+xpu", "nvidia": "2.13.0+cu128"}.get(vendor, "2.13.0+cpu"))
    mac = MAC_DEVICES.get(name)
    torch_version = overrides.pop("torch_version", mac[1] if mac else default_torch)
    fields: dict[str, Any] = {"cuda_version": "12.8", "arch_list": _CUDA_ARCHS}
    if name == "rtx5090_no_sm120":
        fields.update(cuda_version="12.4", arch_list=_CUDA_ARCHS_NO_120)
    elif name == "gtx1080_cu128":
        fields.update(arch_list=_CUDA_ARCHS_CU128)
    elif vendor == "amd":
        fields.update(cuda_version=None, hip_version="7.1", arch_list=())
    elif vendor == "intel" or not gpus:
        fields.update(cuda_version=None, arch_list=())
    mps = None
    if mac:
        mps = mps_capabilities(True, torch_version, mac[2], mac[0])
        cpu = CpuInfo(mac[0], 8, bf16_native=True, bf16_flags=("FEAT_BF16",), amx=False)
    if bitsandbytes is True:
        backend = {"amd": "rocm", "intel": "xpu", "nvidia": "cuda"}.get(vendor, "cpu")
        bnb = BitsAndBytesInfo(True, "0.50.2", backend)
    elif isinstance(bitsandbytes, BitsAndBytesInfo):
        bnb = bitsandbytes
    else:
        bnb = BitsAndBytesInfo(False, reason="not installed")
    fields.update(overrides)
    return DeviceInfo(cpu=cpu, gpus=tuple(gpus), mps=mps, bitsandbytes=bnb, torch_version=torch_version, **fields)
