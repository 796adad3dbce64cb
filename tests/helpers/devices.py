"""Fake machines: a DeviceInfo for well-known devices, built without torch.

Each GPU is described only by what its driver and torch report (name, compute capability, memory, SM count, gfx
architecture, Intel's XPU properties); its traits (bf16, tensor cores, fast fp16) come from the same rules the probe
uses (:func:`guitrainer.core.device.hardware.make_gpu_info`), so a test on a fake device tests those rules. The torch
build each machine has is one PyTorch publishes (its version label and ``get_arch_list()``, quoted below with their
sources), not an invented one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from guitrainer.base.units import GiB
from guitrainer.core.device.builds import rocm_arch_supported
from guitrainer.core.device.hardware import (
    BitsAndBytesInfo,
    CpuInfo,
    DeviceInfo,
    GpuInfo,
    arch_supported,
    make_gpu_info,
    mps_capabilities,
)

#: ``torch.cuda.get_arch_list()`` of the builds PyTorch 2.13 publishes (RELEASE.md "PyTorch CUDA Support Matrix",
#: release 2.12-2.14, PRs #182849 / #197555): cu126 Maxwell 5.0 to Hopper 9.0; cu130 Turing 7.5 to Blackwell 12.0 + PTX
CU126 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
CU130 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
#: PyTorch 2.13's ROCm wheels' PYTORCH_ROCM_ARCH (.ci/docker/manywheel/build.sh; unslothai/unsloth PR #9829's table):
#: no gfx1031-gfx1036
ROCM_213 = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102",
            "gfx1150", "gfx1151", "gfx1200", "gfx1201")
#: a JetPack 6 build of torch as NVIDIA's Jetson index ships it: compiled for Xavier and Orin
JETPACK_ARCHS = ("sm_72", "sm_87")


def _gpu(name: str, cap: tuple[int, int], gb: float, sms: int = 0, *, vendor: str = "nvidia", gfx: str = "",
         **kw: Any) -> GpuInfo:
    total = int(gb * GiB)
    return make_gpu_info(0, name, cap, total, kw.pop("free_memory", int(total * 0.9)), vendor,  # type: ignore[arg-type]
                         sm_count=sms, gfx_arch=gfx, **kw)


def _intel(name: str, gb: float, units: int, *, reported: bool | None = False, device_id: int | None = None) -> GpuInfo:
    """An Intel GPU as torch's XPU properties report it; ``reported`` is ``has_subgroup_matrix_multiply_accumulate``,
    which often reads False on XMX parts (pytorch/pytorch#196074), so most profiles say False."""
    return _gpu(name, (0, 0), gb, units, vendor="intel", kernels_in_build=None, xmx_reported=reported,
                device_id=device_id)


# SM counts and compute capabilities from NVIDIA's specifications (TechPowerUp GPU Database for each part; the
# Jetson AGX Orin's 8.7 from NVIDIA's CUDA GPUs list); Intel names as the compute-runtime reports them
# (intel/compute-runtime devices_base.inl) or, for the 140T, as Windows does.
FAKE_GPUS: dict[str, GpuInfo] = {
    "gtx980": _gpu("NVIDIA GeForce GTX 980", (5, 2), 4, 16),
    "gtx1080": _gpu("NVIDIA GeForce GTX 1080", (6, 1), 8, 20),
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
    "b200": _gpu("NVIDIA B200", (10, 0), 180, 148),
    "rtx5090": _gpu("NVIDIA GeForce RTX 5090", (12, 0), 32, 170),
    "jetson_orin": _gpu("Orin", (8, 7), 64, 16),
    # ROCm reports gfx10.3 as "capability" (10, 3): a number that means nothing about matrix cores
    "rx6800": _gpu("AMD Radeon RX 6800 XT", (10, 3), 16, 72, vendor="amd", gfx="gfx1030"),
    "rx6700xt": _gpu("AMD Radeon RX 6700 XT", (10, 3), 12, 40, vendor="amd", gfx="gfx1031"),
    "rx7900": _gpu("AMD Radeon RX 7900 XTX", (11, 0), 24, 96, vendor="amd", gfx="gfx1100"),
    "mi250": _gpu("AMD Instinct MI250X", (9, 0), 64, 110, vendor="amd", gfx="gfx90a"),
    "mi100": _gpu("AMD Instinct MI100", (9, 0), 32, 120, vendor="amd", gfx="gfx908"),
    "mi50": _gpu("AMD Instinct MI50", (9, 0), 32, 60, vendor="amd", gfx="gfx906"),
    "arc_a770": _intel("Intel(R) Arc(TM) A770 Graphics", 16, 32),
    "arc_a770m": _intel("Intel(R) Arc(TM) A770M Graphics", 16, 32),
    "arc_a370m": _intel("Intel(R) Arc(TM) A370M Graphics", 4, 8),
    "arc_pro_a60": _intel("Intel(R) Arc(TM) Pro A60 Graphics", 12, 16),
    "arc_pro_b60": _intel("Intel(R) Arc(TM) Pro B60 Graphics", 24, 20, reported=True),  # the flag read True
    "arc_140t": _intel("Intel(R) Arc(TM) 140T GPU (16GB)", 16, 8),
    "mtl_arc_igpu": _intel("Intel(R) Arc(TM) Graphics", 16, 8, device_id=0x7D55),  # Meteor Lake
    "arl_arc_igpu": _intel("Intel(R) Arc(TM) Graphics", 16, 8, device_id=0x7D51),  # Arrow Lake-H, on Linux
}
#: machines whose installed torch build lacks the card's kernels: name -> (GPU, torch version, CUDA version, archs)
WRONG_BUILDS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "gtx1080_cu130": ("gtx1080", "2.13.0+cu130", "13.0", CU130),  # cu130 has nothing below sm_75
    "v100_cu130": ("v100", "2.13.0+cu130", "13.0", CU130),
    "rtx5090_cu126": ("rtx5090", "2.13.0+cu126", "12.6", CU126),  # cu126 stops at sm_90
    "b200_cu126": ("b200", "2.13.0+cu126", "12.6", CU126),
}
#: NVIDIA cards under a CPU-only torch (the PyPI default on Windows): name -> (GPU, what nvidia-smi reports)
CPU_TORCH_NVIDIA: dict[str, str] = {"t4_cpu_torch": "t4", "rtx3060_cpu_torch": "rtx3060", "rtx4090_cpu_torch": "rtx4090"}

MAC_DEVICES = {  # name -> (chip, torch, macOS)
    "mps": ("Apple M2", "2.13.0", "14.5"),
    "m1": ("Apple M1", "2.13.0", "14.5"),
    "m3": ("Apple M3 Max", "2.13.0", "14.5"),
    "m2_macos13": ("Apple M2 Pro", "2.8.0", "13.6"),  # the last torch line whose MPS runs on macOS 13
    "m2_macos13_torch213": ("Apple M2 Pro", "2.13.0", "13.6"),  # torch 2.10+ needs macOS 14 for MPS at all
    "m2_torch27": ("Apple M2", "2.7.1", "14.5"),
    "mps_old": ("Apple M2", "2.4.1", "13.6"),
}
_CPUS = {  # name -> (model, flags, amx, amx_fp16)
    "cpu": ("Fake x86-64 CPU", (), False, False),
    "cpu_bf16": ("AMD EPYC", ("avx512_bf16",), False, False),  # this bench's host: AVX512-BF16, no AMX (lscpu)
    "cpu_amx": ("Intel(R) Xeon(R) Platinum 8480+", ("avx512_bf16", "amx_bf16", "amx_tile"), True, False),  # SPR
    "cpu_gnr": ("Intel(R) Xeon(R) 6980P", ("avx512_bf16", "amx_bf16", "amx_tile"), True, True),  # Granite Rapids
    "cpu_arm_bf16": ("Neoverse-V1", ("bf16",), False, None),  # Graviton 3: Arm BF16 (BFMMLA), /proc/cpuinfo "bf16"
}

#: names :func:`fake_device` understands
FAKE_DEVICES: tuple[str, ...] = (*_CPUS, *FAKE_GPUS, *WRONG_BUILDS, *CPU_TORCH_NVIDIA, *MAC_DEVICES)


def _torch_build(gpu: GpuInfo) -> dict[str, Any]:
    """The build PyTorch 2.13 publishes for this GPU: cu130 from Turing on, cu126 before it, rocm7.2, xpu,
    JetPack's for a Jetson."""
    if gpu.vendor == "amd":
        return {"torch_version": "2.13.0+rocm7.2", "cuda_version": None, "hip_version": "7.2", "arch_list": ROCM_213}
    if gpu.vendor == "intel":
        return {"torch_version": "2.13.0+xpu", "cuda_version": None, "arch_list": ()}
    if gpu.jetson:
        return {"torch_version": "2.5.0a0+872d972e41.nv24.08", "cuda_version": "12.6", "arch_list": JETPACK_ARCHS,
                "machine": "aarch64"}
    if gpu.capability >= (7, 5):
        return {"torch_version": "2.13.0+cu130", "cuda_version": "13.0", "arch_list": CU130}
    return {"torch_version": "2.13.0+cu126", "cuda_version": "12.6", "arch_list": CU126}


def _with_kernels(gpu: GpuInfo, arch_list: tuple[str, ...]) -> GpuInfo:
    """The GPU as the probe sees it under a build with ``arch_list``."""
    if gpu.vendor == "amd":
        ok = rocm_arch_supported(gpu.gfx_arch, arch_list)
    elif gpu.vendor == "intel":
        ok = None
    else:
        ok = arch_supported(gpu.capability, arch_list)
    return dataclasses.replace(gpu, kernels_in_build=ok)


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
    model, flags, amx, amx_fp16 = _CPUS.get(name, _CPUS["cpu"])
    cpu = CpuInfo(model, 8, bf16_native=bool(flags), bf16_flags=flags, amx=amx, amx_fp16=amx_fp16)
    fields: dict[str, Any] = {"torch_version": "2.13.0+cpu", "machine": "x86_64"}
    first = WRONG_BUILDS[name][0] if name in WRONG_BUILDS else name
    names = [g for g in (first, *more_gpus) if g in FAKE_GPUS]
    gpus = [dataclasses.replace(FAKE_GPUS[g], index=i) for i, g in enumerate(names)]
    if name in WRONG_BUILDS:
        _gpu_name, torch_version, cuda, archs = WRONG_BUILDS[name]
        fields.update(torch_version=torch_version, cuda_version=cuda, arch_list=archs)
    elif gpus:
        fields.update(_torch_build(gpus[0]))
    gpus = [_with_kernels(g, fields.get("arch_list", ())) for g in gpus]
    if name in CPU_TORCH_NVIDIA:
        fields.update(nvidia_gpu_unused=True, unused_nvidia_capability=FAKE_GPUS[CPU_TORCH_NVIDIA[name]].capability)
    if name == "cpu_arm_bf16":
        fields["machine"] = "aarch64"
    mac = MAC_DEVICES.get(name)
    if mac:
        fields.update(torch_version=mac[1], machine="arm64")
    fields["torch_version"] = overrides.pop("torch_version", fields["torch_version"])
    mps = None
    if mac:
        mps = mps_capabilities(True, fields["torch_version"], mac[2], mac[0])
        cpu = CpuInfo(mac[0], 8, bf16_native=True, bf16_flags=("FEAT_BF16",), amx=False)
    vendor = gpus[0].vendor if gpus else ""
    if bitsandbytes is True:
        backend = {"amd": "rocm", "intel": "xpu", "nvidia": "cuda"}.get(vendor, "cpu")
        bnb = BitsAndBytesInfo(True, "0.50.2", backend)
    elif isinstance(bitsandbytes, BitsAndBytesInfo):
        bnb = bitsandbytes
    else:
        bnb = BitsAndBytesInfo(False, reason="not installed")
    fields.update(overrides)
    return DeviceInfo(cpu=cpu, gpus=tuple(gpus), mps=mps, bitsandbytes=bnb, **fields)
