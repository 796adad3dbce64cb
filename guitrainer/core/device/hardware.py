"""The device probe: looks at this machine (CUDA, ROCm, Intel XPU, MPS, CPU) and returns a DeviceInfo.

Pure Python at import time: torch and bitsandbytes are imported lazily *inside* :func:`collect`
(the GUI calls it from a worker thread after the window is shown). :func:`probe` caches the result,
because importing torch and bitsandbytes takes a few seconds.

Nothing here raises: a fact that cannot be found becomes "unknown", and the reason is kept in
:attr:`DeviceInfo.unknown` so the UI and ``guitrainer-train --check`` can say why.

The facts live in :mod:`guitrainer.core.device.info` and the GPU choice in :mod:`guitrainer.core.device.gpu_choice`;
both are re-exported here; each GPU's traits come from :mod:`guitrainer.core.device.gpu_traits`. Tests build fake
machines with ``tests/helpers/devices.py``'s ``fake_device``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import platform
import re
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any

from guitrainer.base.units import format_bytes
from guitrainer.core.device.builds import arch_supported, rocm_arch_supported
from guitrainer.core.device.gpu_choice import (
    AUTO_GPU,
    GpuChoice,
    GpuChoiceError,
    choose_training_gpu,
    gpu_missing_message,
)
from guitrainer.core.device.gpu_traits import Vendor, amd_gfx_base, gpu_traits
from guitrainer.core.device.info import (
    BitsAndBytesInfo,
    CpuInfo,
    DeviceInfo,
    DeviceKind,
    GpuInfo,
    MpsInfo,
    version_tuple,
)

log = logging.getLogger(__name__)

__all__ = [
    "AUTO_GPU",
    "BitsAndBytesInfo",
    "CpuInfo",
    "DeviceInfo",
    "DeviceKind",
    "GpuChoice",
    "GpuChoiceError",
    "GpuInfo",
    "MpsInfo",
    "arch_supported",
    "cached",
    "choose_training_gpu",
    "collect",
    "format_bytes",
    "gpu_missing_message",
    "make_gpu_info",
    "mps_capabilities",
    "probe",
    "version_tuple",
]

# --------------------------------------------------------------------------- probing


def collect() -> DeviceInfo:
    """Look at the machine now (uncached; imports torch and bitsandbytes). Never raises."""
    unknown: list[tuple[str, str]] = []
    try:
        cpu = _cpu_info(unknown)
    except Exception as e:  # noqa: BLE001 - a fact we could not find, never a crash
        unknown.append(("cpu", _reason(e)))
        cpu = CpuInfo(name=platform.machine() or "unknown", cores=os.cpu_count() or 1)
    facts: dict[str, Any] = {}
    try:
        facts = _torch_facts(unknown)
    except Exception as e:  # noqa: BLE001
        log.warning("device probe: torch failed: %s", e)
        unknown.append(("torch", _reason(e)))
    amx_fp16 = facts.pop("amx_fp16", None)
    if amx_fp16 is not None:
        cpu = dataclasses.replace(cpu, amx_fp16=amx_fp16)
    try:
        bnb = _bitsandbytes_info()
    except Exception as e:  # noqa: BLE001
        bnb = BitsAndBytesInfo(False, reason=_reason(e))
    if not bnb.available:
        unknown.append(("bitsandbytes", bnb.reason))
    return DeviceInfo(cpu=cpu, bitsandbytes=bnb, unknown=tuple(unknown), **facts)


_cache: DeviceInfo | None = None
_cache_lock = threading.Lock()


def probe(device_index: int | None = None, *, refresh: bool = False) -> DeviceInfo:
    """The machine's DeviceInfo (cached after the first call; ``refresh`` looks again).

    Thread-safe; call it from a worker thread in the GUI (it imports torch). ``device_index``
    selects that GPU (out of range: the first one, with a logged warning).
    """
    global _cache
    with _cache_lock:
        if _cache is None or refresh:
            _cache = collect()
        info = _cache
    if device_index is not None:
        try:
            info = info.select(device_index)
        except IndexError as e:
            log.warning("%s; using GPU 0", e)
    return info


def cached() -> DeviceInfo | None:
    """The cached probe result, if a probe has finished (never probes)."""
    return _cache


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def cpu_name() -> str:
    """This computer's CPU as the system names it ("AMD EPYC 9R45", "Apple M3"); its architecture if unnamed."""
    import platform

    return _cpu_info([]).name or platform.processor() or platform.machine()


def _cpu_info(unknown: list[tuple[str, str]]) -> CpuInfo:
    name = ""
    bf16: bool | None = None
    amx: bool | None = None
    flags_found: tuple[str, ...] = ()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        if m:
            name = m.group(1).strip()
        fm = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.MULTILINE)
        if fm:
            flags = set(fm.group(1).split())
            flags_found = tuple(f for f in ("avx512_bf16", "amx_bf16", "amx_tile", "bf16") if f in flags)
            bf16 = bool(flags_found)
            amx = "amx_bf16" in flags and "amx_tile" in flags
        else:
            unknown.append(("cpu bf16", "/proc/cpuinfo lists no CPU flags"))
    elif platform.system() == "Darwin":
        name, bf16 = _mac_cpu()
        amx = False  # Apple's own matrix unit is not what PyTorch's CPU bf16 path uses
        if bf16:
            flags_found = ("FEAT_BF16",)
        elif bf16 is None:
            unknown.append(("cpu bf16", "sysctl hw.optional.arm.FEAT_BF16 could not be read"))
    else:
        unknown.append(("cpu bf16", f"no CPU flag check on {platform.system() or 'this system'}"))
    if not name:
        name = platform.processor() or platform.machine() or "unknown CPU"
    return CpuInfo(name=name, cores=os.cpu_count() or 1, bf16_native=bf16, bf16_flags=flags_found, amx=amx)


def _mac_cpu() -> tuple[str, bool | None]:
    import subprocess

    def sysctl(key: str) -> str:
        out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=2)
        return out.stdout.strip() if out.returncode == 0 else ""

    name = sysctl("machdep.cpu.brand_string")
    feat = sysctl("hw.optional.arm.FEAT_BF16")
    return name, (feat == "1") if feat else None


def _nvidia_driver_present() -> bool:
    """An NVIDIA driver on this machine (Linux /proc entry or nvidia-smi on PATH)."""
    try:
        gpus = Path("/proc/driver/nvidia/gpus")
        return (gpus.is_dir() and any(gpus.iterdir())) or shutil.which("nvidia-smi") is not None
    except OSError:
        return False


def _torch_facts(unknown: list[tuple[str, str]]) -> dict[str, Any]:
    import torch  # lazy: only the probe needs it

    out: dict[str, Any] = {"torch_version": str(torch.__version__), "machine": platform.machine()}
    # CPUID through torch's cpuinfo: Linux does not list AMX-FP16 in /proc/cpuinfo (CpuInfo.amx_fp16); an older
    # torch without the helper leaves it unknown
    with contextlib.suppress(Exception):
        out["amx_fp16"] = bool(torch.cpu._is_amx_fp16_supported())
    out["cuda_version"] = getattr(torch.version, "cuda", None)
    out["hip_version"] = getattr(torch.version, "hip", None)
    if out["hip_version"]:
        out["hsa_override"] = os.environ.get("HSA_OVERRIDE_GFX_VERSION", "")
    gpus: list[GpuInfo] = []
    try:
        cuda_ok = bool(torch.cuda.is_available())
    except Exception as e:  # noqa: BLE001
        unknown.append(("cuda", _reason(e)))
        cuda_ok = False
    if cuda_ok:
        try:
            out["arch_list"] = tuple(torch.cuda.get_arch_list())
        except Exception as e:  # noqa: BLE001
            unknown.append(("cuda arch list", _reason(e)))
        for i in range(torch.cuda.device_count()):
            try:
                gpus.append(_gpu_info(torch, i, out.get("arch_list", ()), bool(out["hip_version"]), unknown))
            except Exception as e:  # noqa: BLE001
                unknown.append((f"gpu {i}", _reason(e)))
    elif not out["cuda_version"] and not out["hip_version"]:
        gpus.extend(_xpu_gpus(torch, unknown))
        if not gpus and _nvidia_driver_present():
            out["nvidia_gpu_unused"] = True
            out["unused_nvidia_capability"] = _nvidia_smi_capability()
    out["gpus"] = tuple(gpus)
    out["mps"] = _mps_info(torch, unknown)
    return out


def _gpu_info(torch: Any, i: int, arch_list: tuple[str, ...], hip: bool, unknown: list[tuple[str, str]]) -> GpuInfo:
    """One CUDA or ROCm device. Its traits come from what it reports (compute capability, name, SM count,
    gfx architecture), never from ``torch.cuda.is_bf16_supported()``, which is True through emulation on older
    NVIDIA cards and on every HIP device (:mod:`guitrainer.core.device.gpu_traits`)."""
    props = torch.cuda.get_device_properties(i)
    cap = (int(props.major), int(props.minor))
    name = str(props.name)
    free = _free_memory(torch, i, unknown)
    sm_count = int(getattr(props, "multi_processor_count", 0) or 0)
    gfx = amd_gfx_base(str(getattr(props, "gcnArchName", "") or "")) if hip else ""
    if hip and not gfx:
        unknown.append((f"gpu {i} architecture", "torch reports no gcnArchName"))
    # ROCm's get_arch_list() names gfx targets, CUDA's sm_ / compute_ ones: each is checked by its own rule
    kernels = rocm_arch_supported(gfx, arch_list) if hip else (arch_supported(cap, arch_list) if arch_list else None)
    return make_gpu_info(i, name, cap, int(props.total_memory), free, "amd" if hip else "nvidia",
                         kernels_in_build=kernels, sm_count=sm_count, gfx_arch=gfx)


def make_gpu_info(index: int, name: str, capability: tuple[int, int], total_memory: int, free_memory: int | None,
                  vendor: Vendor = "nvidia", *, kernels_in_build: bool | None = True, sm_count: int = 0,
                  gfx_arch: str = "", xmx_reported: bool | None = None, device_id: int | None = None) -> GpuInfo:
    """A GpuInfo with its traits decided by :func:`~guitrainer.core.device.gpu_traits.gpu_traits` (probe and tests)."""
    t = gpu_traits(vendor, capability, name, sm_count, gfx_arch, xmx_reported=xmx_reported, device_id=device_id)
    return GpuInfo(index, name, capability, total_memory, free_memory, t.bf16_native, t.tensor_cores,
                   kernels_in_build, vendor, t.fp16_fast, sm_count, gfx_arch, t.source, t.bf16_full_rate)


def _xpu_gpus(torch: Any, unknown: list[tuple[str, str]]) -> tuple[GpuInfo, ...]:
    """Intel GPUs through ``torch.xpu`` (Arc, Data Center GPU Max / Flex, Core Ultra graphics).

    XMX is decided from what the device reports (``has_subgroup_matrix_multiply_accumulate``, torch 2.5+; the
    ``device_id``, torch 2.9+), the name only as a fallback (:func:`~guitrainer.core.device.gpu_traits.intel_xmx`).
    """
    xpu = getattr(torch, "xpu", None)
    try:
        if xpu is None or not xpu.is_available():
            return ()
        count = int(xpu.device_count())
    except Exception as e:  # noqa: BLE001
        unknown.append(("xpu", _reason(e)))
        return ()
    out: list[GpuInfo] = []
    for i in range(count):
        try:
            props = xpu.get_device_properties(i)
            name = str(getattr(props, "name", f"Intel GPU {i}"))
            total = int(getattr(props, "total_memory", 0) or 0)
            units = int(getattr(props, "gpu_subslice_count", 0) or getattr(props, "max_compute_units", 0) or 0)
            reported = getattr(props, "has_subgroup_matrix_multiply_accumulate", None)
            device_id = getattr(props, "device_id", None)
            gpu = make_gpu_info(i, name, (0, 0), total, None, "intel", kernels_in_build=None, sm_count=units,
                                xmx_reported=bool(reported) if reported is not None else None,
                                device_id=int(device_id) if isinstance(device_id, int) else None)
            if gpu.xmx_source.startswith("unknown"):
                unknown.append((f"xpu {i} XMX", gpu.xmx_source.removeprefix("unknown: ")))
            out.append(gpu)
        except Exception as e:  # noqa: BLE001
            unknown.append((f"xpu {i}", _reason(e)))
    return tuple(out)


def _nvidia_smi_capability() -> tuple[int, int] | None:
    """The first NVIDIA GPU's compute capability from ``nvidia-smi`` (what a CPU-only torch cannot see), or None."""
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"\s*(\d+)\.(\d+)", out.stdout or "")
    return (int(m.group(1)), int(m.group(2))) if out.returncode == 0 and m else None


def _free_memory(torch: Any, i: int, unknown: list[tuple[str, str]]) -> int | None:
    """Free memory from NVML when installed (no CUDA context), else torch (creates one)."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)
    except Exception:  # noqa: BLE001 - fall back to torch below
        pass
    try:
        free, _total = torch.cuda.mem_get_info(i)
        return int(free)
    except Exception as e:  # noqa: BLE001
        unknown.append((f"gpu {i} free memory", _reason(e)))
        return None


def _mps_info(torch: Any, unknown: list[tuple[str, str]]) -> MpsInfo | None:
    if platform.system() != "Darwin":
        return None
    try:
        available = bool(torch.backends.mps.is_available())
    except Exception as e:  # noqa: BLE001
        unknown.append(("mps", _reason(e)))
        return None
    macos = platform.mac_ver()[0]
    chip, _bf16 = _mac_cpu()
    return mps_capabilities(available, str(torch.__version__), macos, chip)


#: the first torch whose MPS backend needs macOS 14: its release notes list "Delete [Ventura|Sonoma]Ops header"
#: (pytorch/pytorch PR #162921; PR #163515: "PyTorch needs MacOS-14 or newer to use MPS"), and torch 2.10 on macOS
#: 13.7.4 finds no MPS device (pytorch/pytorch#164943)
TORCH_MPS_MACOS14 = (2, 10)


def mps_capabilities(available: bool, torch_version: str, macos_version: str, chip: str = "") -> MpsInfo:
    """What MPS supports for training.

    fp16 autocast from torch 2.5 and bf16 autocast from torch 2.6 on macOS 14+ (PyTorch release notes 2.5 / 2.6:
    "MPS autocast"); ``torch.amp.GradScaler("mps")`` from torch 2.8 (PyTorch 2.8 release notes), and the
    trainer always scales fp16 losses. From torch 2.10 MPS needs macOS 14 at all (:data:`TORCH_MPS_MACOS14`).
    bf16 runs natively only on M3 and newer (``MpsInfo.bf16_native``), which makes it no faster (see
    :func:`~guitrainer.core.device.gpu_traits.apple_bf16_native`).
    """
    tv, mv = version_tuple(torch_version), version_tuple(macos_version)
    unsupported = ""
    if tv >= TORCH_MPS_MACOS14 and mv and mv < (14,):
        unsupported = (f"PyTorch {torch_version} runs on Apple GPUs only from macOS 14; this is macOS {macos_version} "
                       "(PyTorch 2.10 dropped macOS 13)")
    return MpsInfo(
        available=available,
        macos_version=macos_version,
        fp16_autocast=available and tv >= (2, 5),
        bf16=available and tv >= (2, 6) and mv >= (14,),
        grad_scaler=available and tv >= (2, 8),
        chip=chip,
        unsupported=unsupported,
    )


def _bitsandbytes_info() -> BitsAndBytesInfo:
    """Import bitsandbytes defensively and report its native backend."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bnb_logger = logging.getLogger("bitsandbytes")
            old_level = bnb_logger.level
            bnb_logger.setLevel(logging.ERROR)
            try:
                import bitsandbytes as bnb  # lazy
            finally:
                bnb_logger.setLevel(old_level)
    except ImportError as e:
        return BitsAndBytesInfo(False, reason=f"not installed ({e})")
    except Exception as e:  # noqa: BLE001 - a broken install must not crash the probe
        return BitsAndBytesInfo(False, reason=f"failed to import: {_reason(e)}")
    version = str(getattr(bnb, "__version__", "?"))
    backend = "none"
    try:
        from bitsandbytes import cextension

        lib = getattr(cextension, "lib", None)
        mock = lib is None or "Mock" in type(lib).__name__ or "ErrorHandler" in type(lib).__name__
        name = str(getattr(cextension, "BNB_BACKEND", "")).lower()
        if "Cuda" in type(lib).__name__ and name in ("", "cpu"):
            name = "cuda"
        backend = name or ("cuda" if getattr(bnb, "COMPILED_WITH_CUDA", False) else "cpu")
        if mock and backend != "cpu":
            return BitsAndBytesInfo(True, version, "cpu", reason=f"its {backend} library did not load")
    except Exception as e:  # noqa: BLE001
        return BitsAndBytesInfo(True, version, "none", reason=f"backend unknown: {_reason(e)}")
    return BitsAndBytesInfo(True, version, backend)


def main() -> None:
    """``python -m guitrainer.core.device.hardware``: print what the probe finds."""
    info = probe()
    print(info.summary())
    for label, value in info.facts():
        print(f"  {label}: {value}")
    for fact, reason in info.unknown:
        print(f"  unknown {fact}: {reason}")


if __name__ == "__main__":
    main()
