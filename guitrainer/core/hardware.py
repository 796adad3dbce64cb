"""DeviceInfo: what this machine can do for training, as plain frozen data.

Pure Python at import time: torch and bitsandbytes are imported lazily *inside* :func:`collect`
(the GUI calls it from a worker thread after the window is shown). :func:`probe` caches the result,
because importing torch and bitsandbytes takes a few seconds.

Nothing here raises: a fact that cannot be found becomes "unknown", and the reason is kept in
:attr:`DeviceInfo.unknown` so the UI and ``guitrainer-train --check`` can say why.

Tests and other modules build fake machines with :func:`fake_device` (``FAKE_DEVICES`` lists the names).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import re
import shutil
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

GB = 1 << 30
DeviceKind = Literal["cuda", "mps", "cpu"]


def format_bytes(n: int | None) -> str:
    """``12884901888`` -> ``"12.0 GB"`` (binary gigabytes, as drivers report them)."""
    if n is None:
        return "unknown"
    if n >= GB:
        return f"{n / GB:.1f} GB"
    return f"{n / (1 << 20):.0f} MB"


def version_tuple(text: str | None) -> tuple[int, ...]:
    """``"2.13.0+cu128"`` -> ``(2, 13, 0)``; ``"14.5"`` -> ``(14, 5)``; unparsable -> ``()``."""
    if not text:
        return ()
    m = re.match(r"(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA (or ROCm) device as torch sees it."""

    index: int
    name: str
    capability: tuple[int, int]
    total_memory: int  # bytes
    free_memory: int | None = None  # bytes; None when it could not be read
    bf16_native: bool = False  # bf16 in hardware (Ampere, sm_80, and newer), not torch's emulation
    tensor_cores: bool = False  # fp16 tensor cores (Volta sm_70 and newer, except GTX 16xx)
    kernels_in_build: bool | None = True  # this torch build can run code on it (None: unknown)

    @property
    def arch(self) -> str:
        """CUDA architecture name, e.g. ``sm_86``."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def is_gtx16(self) -> bool:
        """A Turing GTX 16xx card (TU116/TU117): sm_75 without tensor cores."""
        return bool(re.search(r"GTX\s*16\d\d", self.name, re.IGNORECASE))

    def label(self) -> str:
        """``"0: NVIDIA GeForce RTX 3060 (12.0 GB)"`` for a device selector."""
        return f"{self.index}: {self.name} ({format_bytes(self.total_memory)})"


@dataclass(frozen=True)
class CpuInfo:
    name: str
    cores: int
    bf16_native: bool | None = None  # avx512_bf16 / amx_bf16 (x86), FEAT_BF16 (Apple); None: unknown
    bf16_flags: tuple[str, ...] = ()  # the flags that showed it, e.g. ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class MpsInfo:
    """Apple's Metal backend."""

    available: bool
    macos_version: str = ""
    fp16_autocast: bool = False  # torch >= 2.5
    bf16: bool = False  # torch >= 2.6 on macOS 14+


@dataclass(frozen=True)
class BitsAndBytesInfo:
    available: bool
    version: str = ""
    backend: str = "none"  # "cuda", "rocm", "cpu", "xpu", "none"; lower case
    reason: str = ""  # why it is not available, or notes

    def label(self) -> str:
        if not self.available:
            return "not available" + (f" ({self.reason})" if self.reason else "")
        names = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU only", "xpu": "Intel XPU"}
        return f"{self.version} ({names.get(self.backend, self.backend)})"


@dataclass(frozen=True)
class DeviceInfo:
    """Everything the precision rules need to know about the machine, with one device selected.

    ``selected`` indexes :attr:`gpus`; with no GPU the selected device is MPS when available, else the CPU.
    """

    cpu: CpuInfo
    gpus: tuple[GpuInfo, ...] = ()
    selected: int = 0
    mps: MpsInfo | None = None
    bitsandbytes: BitsAndBytesInfo = field(default_factory=lambda: BitsAndBytesInfo(False, reason="not checked"))
    torch_version: str = ""  # "" when torch could not be imported
    cuda_version: str | None = None  # CUDA version torch was built with; None for CPU / ROCm builds
    hip_version: str | None = None
    arch_list: tuple[str, ...] = ()  # torch.cuda.get_arch_list()
    nvidia_gpu_unused: bool = False  # an NVIDIA driver is installed but this torch is a CPU-only build
    unknown: tuple[tuple[str, str], ...] = ()  # (fact, reason) for every fact that could not be found

    # ------------------------------------------------------------------ the selected device
    @property
    def kind(self) -> DeviceKind:
        if self.gpus:
            return "cuda"
        if self.mps is not None and self.mps.available:
            return "mps"
        return "cpu"

    @property
    def gpu(self) -> GpuInfo | None:
        """The selected GPU, or None when training runs on MPS or the CPU."""
        if not self.gpus:
            return None
        return self.gpus[min(max(self.selected, 0), len(self.gpus) - 1)]

    @property
    def name(self) -> str:
        if self.gpu is not None:
            return self.gpu.name
        if self.kind == "mps":
            return "Apple GPU (MPS)"
        return f"CPU: {self.cpu.name}"

    @property
    def capability(self) -> tuple[int, int] | None:
        return self.gpu.capability if self.gpu is not None else None

    @property
    def total_memory(self) -> int | None:
        return self.gpu.total_memory if self.gpu is not None else None

    @property
    def free_memory(self) -> int | None:
        return self.gpu.free_memory if self.gpu is not None else None

    @property
    def bf16_native(self) -> bool | None:
        """Native bf16 on the selected device (None: unknown)."""
        if self.gpu is not None:
            return self.gpu.bf16_native
        if self.kind == "mps":
            return self.mps.bf16 if self.mps else False
        return self.cpu.bf16_native

    @property
    def fp16_tensor_cores(self) -> bool:
        return bool(self.gpu is not None and self.gpu.tensor_cores)

    @property
    def torch_ok(self) -> bool:
        return bool(self.torch_version)

    @property
    def torch_tuple(self) -> tuple[int, ...]:
        return version_tuple(self.torch_version)

    def select(self, index: int) -> DeviceInfo:
        """The same facts with GPU ``index`` selected; raises IndexError for a GPU that is not there."""
        if not self.gpus and index == 0:
            return self
        if not 0 <= index < len(self.gpus):
            raise IndexError(f"no GPU {index}; this machine has {len(self.gpus)}")
        return dataclasses.replace(self, selected=index)

    def for_gpu_index(self, gpu_index: int) -> DeviceInfo:
        """The facts for training with ``precision.gpu_index`` = ``gpu_index``.

        A GPU that is there is selected; automatic (:data:`AUTO_GPU`, any negative number) selects the
        first GPU, which is what accelerate trains on. A GPU that is not there also leaves the first one
        selected: the precision rules report it (``gpu_missing``) and the trainer refuses to start.
        Returns ``self`` when the selection does not change.
        """
        if not self.gpus:
            return self
        target = gpu_index if 0 <= gpu_index < len(self.gpus) else 0
        return self if target == self.selected else dataclasses.replace(self, selected=target)

    def gpu_index_valid(self, gpu_index: int) -> bool:
        """Whether ``precision.gpu_index`` = ``gpu_index`` can train here: automatic, or a GPU that is there."""
        return gpu_index < 0 or gpu_index < len(self.gpus)

    # ------------------------------------------------------------------ text
    def summary(self) -> str:
        """One line: the selected device, its key facts, torch and bitsandbytes."""
        parts: list[str] = []
        g = self.gpu
        if g is not None:
            bits = [g.arch, format_bytes(g.total_memory), "bf16 native" if g.bf16_native else "no native bf16"]
            if g.kernels_in_build is False:
                bits.append("NOT supported by this torch build")
            parts.append(f"{g.name} ({', '.join(bits)})")
            if len(self.gpus) > 1:
                parts[-1] += f" [GPU {g.index} of {len(self.gpus)}]"
        elif self.kind == "mps":
            parts.append(f"Apple GPU (MPS, macOS {self.mps.macos_version if self.mps else '?'})")
        else:
            bf = {True: "bf16 native", False: "no native bf16", None: "bf16 unknown"}[self.cpu.bf16_native]
            parts.append(f"CPU: {self.cpu.name} ({self.cpu.cores} cores, {bf})")
        if self.torch_ok:
            parts.append(f"torch {self.torch_version} ({self._torch_backend()})")
        else:
            parts.append("torch unavailable")
        parts.append(f"bitsandbytes {self.bitsandbytes.label()}")
        return " · ".join(parts)

    def _torch_backend(self) -> str:
        if self.cuda_version:
            return f"CUDA {self.cuda_version}"
        if self.hip_version:
            return f"ROCm {self.hip_version}"
        return "MPS" if self.kind == "mps" else "CPU only"

    def facts(self) -> list[tuple[str, str]]:
        """(label, value) rows describing the selected device, for the UI and ``--check``."""
        rows: list[tuple[str, str]] = []
        yes_no = {True: "yes", False: "no", None: "unknown"}
        g = self.gpu
        if g is not None:
            rows.append(("Device", g.name))
            cap = f"{g.capability[0]}.{g.capability[1]} ({g.arch})"
            if g.kernels_in_build is False:
                cap += " — not in this torch build"
            rows.append(("Compute capability", cap))
            mem = f"{format_bytes(g.total_memory)} total"
            if g.free_memory is not None:
                mem += f", {format_bytes(g.free_memory)} free"
            rows.append(("Memory", mem))
            rows.append(("bf16 native", yes_no[g.bf16_native]))
            rows.append(("fp16 tensor cores", yes_no[g.tensor_cores]))
        elif self.kind == "mps":
            mps = self.mps or MpsInfo(False)
            rows.append(("Device", f"Apple GPU (MPS), macOS {mps.macos_version or '?'}"))
            rows.append(("fp16 AMP", yes_no[mps.fp16_autocast]))
            rows.append(("bf16 AMP", yes_no[mps.bf16]))
        else:
            rows.append(("Device", f"CPU: {self.cpu.name}"))
            rows.append(("Cores", str(self.cpu.cores)))
            bf = yes_no[self.cpu.bf16_native]
            if self.cpu.bf16_flags:
                bf += f" ({', '.join(self.cpu.bf16_flags)})"
            rows.append(("bf16 native", bf))
        if self.torch_ok:
            rows.append(("torch", f"{self.torch_version} ({self._torch_backend()})"))
        else:
            rows.append(("torch", "not available"))
        rows.append(("bitsandbytes", self.bitsandbytes.label()))
        return rows


# --------------------------------------------------------------------------- the GPU to train on

#: ``precision.gpu_index`` meaning "automatic": the first GPU (accelerate's default device)
AUTO_GPU = -1


class GpuChoiceError(ValueError):
    """``precision.gpu_index`` names a GPU this machine does not have."""


def gpu_missing_message(gpu_index: int, gpu_names: Sequence[str]) -> str:
    """``"GPU 2 was chosen but this machine has 2 GPUs (0: RTX 3060, 1: RTX 4090); choose one on the Model page"``."""
    if not gpu_names:
        return (
            f"GPU {gpu_index} was chosen but this machine has no GPU that PyTorch can use; "
            "choose automatic on the Model page (or set precision.gpu_index = -1)"
        )
    listing = ", ".join(f"{i}: {name}" for i, name in enumerate(gpu_names))
    count = f"{len(gpu_names)} GPU" + ("" if len(gpu_names) == 1 else "s")
    return f"GPU {gpu_index} was chosen but this machine has {count} ({listing}); choose one on the Model page"


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


def _cpu_info(unknown: list[tuple[str, str]]) -> CpuInfo:
    name = ""
    bf16: bool | None = None
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
            flags_found = tuple(f for f in ("avx512_bf16", "amx_bf16", "bf16") if f in flags)
            bf16 = bool(flags_found)
        else:
            unknown.append(("cpu bf16", "/proc/cpuinfo lists no CPU flags"))
    elif platform.system() == "Darwin":
        name, bf16 = _mac_cpu()
        if bf16:
            flags_found = ("FEAT_BF16",)
        elif bf16 is None:
            unknown.append(("cpu bf16", "sysctl hw.optional.arm.FEAT_BF16 could not be read"))
    else:
        unknown.append(("cpu bf16", f"no CPU flag check on {platform.system() or 'this system'}"))
    if not name:
        name = platform.processor() or platform.machine() or "unknown CPU"
    return CpuInfo(name=name, cores=os.cpu_count() or 1, bf16_native=bf16, bf16_flags=flags_found)


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

    out: dict[str, Any] = {"torch_version": str(torch.__version__)}
    out["cuda_version"] = getattr(torch.version, "cuda", None)
    out["hip_version"] = getattr(torch.version, "hip", None)
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
        out["nvidia_gpu_unused"] = _nvidia_driver_present()
    out["gpus"] = tuple(gpus)
    out["mps"] = _mps_info(torch, unknown)
    return out


def _gpu_info(torch: Any, i: int, arch_list: tuple[str, ...], hip: bool, unknown: list[tuple[str, str]]) -> GpuInfo:
    props = torch.cuda.get_device_properties(i)
    cap = (int(props.major), int(props.minor))
    name = str(props.name)
    free = _free_memory(torch, i, unknown)
    kernels = None if hip or not arch_list else arch_supported(cap, arch_list)
    if hip:
        try:
            with torch.cuda.device(i):
                bf16 = bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except Exception as e:  # noqa: BLE001
            unknown.append((f"gpu {i} bf16", _reason(e)))
            bf16 = False
    else:
        bf16 = cap >= (8, 0)  # is_bf16_supported() says True on older cards through emulation
    tensor_cores = cap >= (7, 0) and not re.search(r"GTX\s*16\d\d", name, re.IGNORECASE)
    return GpuInfo(i, name, cap, int(props.total_memory), free, bf16, tensor_cores, kernels)


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
    return mps_capabilities(available, str(torch.__version__), macos)


def mps_capabilities(available: bool, torch_version: str, macos_version: str) -> MpsInfo:
    """What MPS autocast supports: fp16 from torch 2.5, bf16 from torch 2.6 on macOS 14+."""
    tv, mv = version_tuple(torch_version), version_tuple(macos_version)
    return MpsInfo(
        available=available,
        macos_version=macos_version,
        fp16_autocast=available and tv >= (2, 5),
        bf16=available and tv >= (2, 6) and mv >= (14,),
    )


def arch_supported(capability: tuple[int, int], arch_list: tuple[str, ...] | list[str]) -> bool:
    """Whether a build with ``arch_list`` (``sm_86``, ``compute_90``...) runs on ``capability``.

    A cubin runs on the same major version with an equal or higher minor; PTX (``compute_XY``)
    is JIT-compiled for any equal or newer GPU. Arch-specific variants (``sm_90a``) match exactly.
    """
    major, minor = capability
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", arch.strip())
        if not m:
            continue
        kind, a_major, a_minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if suffix:
            if (a_major, a_minor) == capability:
                return True
            continue
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


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


# --------------------------------------------------------------------------- fakes for tests


def _gpu(name: str, cap: tuple[int, int], gb: float, *, tensor_cores: bool | None = None, **kw: Any) -> GpuInfo:
    tc = cap >= (7, 0) if tensor_cores is None else tensor_cores
    total = int(gb * GB)
    return GpuInfo(0, name, cap, total, kw.pop("free_memory", int(total * 0.9)), cap >= (8, 0), tc, **kw)


_CUDA_ARCHS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
_CUDA_ARCHS_NO_120 = ("sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")

_FAKE_GPUS: dict[str, GpuInfo] = {
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
FAKE_DEVICES: tuple[str, ...] = ("cpu", "cpu_bf16", *_FAKE_GPUS, "mps", "mps_old")


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
    gpus = [dataclasses.replace(_FAKE_GPUS[g], index=i) for i, g in enumerate((name, *more_gpus)) if g in _FAKE_GPUS]
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


def main() -> None:
    """``python -m guitrainer.core.hardware``: print what the probe finds."""
    info = probe()
    print(info.summary())
    for label, value in info.facts():
        print(f"  {label}: {value}")
    for fact, reason in info.unknown:
        print(f"  unknown {fact}: {reason}")


if __name__ == "__main__":
    main()
