"""DeviceInfo: what this machine can do for training, as plain frozen data (no torch, no probing here).

:mod:`guitrainer.core.device.hardware` fills it in by looking at the machine; the precision rules
(:mod:`guitrainer.core.precision.advisor`), the VRAM estimator and the pages read it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal

from guitrainer.base.units import format_bytes
from guitrainer.core.device.builds import JETSON_CAPABILITIES
from guitrainer.core.device.gpu_traits import Vendor, amd_generation, apple_bf16_native

DeviceKind = Literal["cuda", "xpu", "mps", "cpu"]  # "cuda" covers ROCm: torch names HIP devices "cuda"


def version_tuple(text: str | None) -> tuple[int, ...]:
    """``"2.13.0+cu128"`` -> ``(2, 13, 0)``; ``"14.5"`` -> ``(14, 5)``; unparsable -> ``()``."""
    if not text:
        return ()
    m = re.match(r"(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()


# --------------------------------------------------------------------------- facts

#: the device table's AMX row: what the hardware has, not a promise that bf16 trains faster (:class:`CpuInfo`)
AMX_FACT = "AMX (bf16 matrix tiles)"
AMX_VALUES = {True: "yes (bf16 matmuls in hardware)", False: "no", None: "unknown"}


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as torch sees it: NVIDIA (CUDA), AMD (ROCm, which torch also calls "cuda") or Intel (XPU).

    ``bf16_native``, ``tensor_cores`` and ``fp16_fast`` come from :func:`guitrainer.core.device.gpu_traits.gpu_traits`.
    """

    index: int
    name: str
    capability: tuple[int, int]
    total_memory: int  # bytes
    free_memory: int | None = None  # bytes; None when it could not be read
    bf16_native: bool = False  # bf16 in hardware (Ampere, sm_80, and newer), not torch's emulation
    tensor_cores: bool = False  # fp16 matrix units (Volta sm_70 on, not TU116/TU117; AMD CDNA / RDNA3; Intel XMX)
    kernels_in_build: bool | None = True  # this torch build can run code on it (None: unknown)
    vendor: Vendor = "nvidia"
    fp16_fast: bool = True  # fp16 at least at fp32's rate (not consumer Pascal 6.1, not Maxwell 5.0/5.2)
    sm_count: int = 0  # streaming multiprocessors / compute units as reported (0: unknown)
    gfx_arch: str = ""  # AMD: the base gfx name, e.g. "gfx1030"
    xmx_source: str = ""  # Intel: how XMX was decided ("reported by the device", "from its name", "unknown: …")
    bf16_full_rate: bool = True  # bf16 matrix math at fp16's rate (False: MI100, where fp16 is twice as fast)

    @property
    def jetson(self) -> str:
        """The Jetson module this is ("Jetson Orin"), from a compute capability only Jetson has; "" otherwise."""
        return JETSON_CAPABILITIES.get(self.capability, "") if self.vendor == "nvidia" else ""

    @property
    def arch(self) -> str:
        """The architecture as its vendor names it: ``sm_86`` (NVIDIA), ``gfx1030`` (AMD), ``xpu`` (Intel)."""
        if self.vendor == "amd":
            return self.gfx_arch or "gfx?"
        if self.vendor == "intel":
            return "xpu"
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def arch_label(self) -> str:
        """``"compute capability 7.5"``, ``"gfx1030 (RDNA2)"``, ``"Intel XPU"``: for messages."""
        if self.vendor == "amd":
            gen = amd_generation(self.gfx_arch)
            return f"{self.arch} ({gen})" if gen else self.arch
        if self.vendor == "intel":
            return "Intel XPU"
        return f"compute capability {self.capability[0]}.{self.capability[1]}"

    @property
    def turing_without_tensor_cores(self) -> bool:
        """A Turing TU116 / TU117 part (GTX 16xx, MX 450/550, T-series Quadro): sm_75 without tensor cores."""
        return self.vendor == "nvidia" and self.capability == (7, 5) and not self.tensor_cores

    def label(self) -> str:
        """``"0: NVIDIA GeForce RTX 3060 (12.0 GB)"`` for a device selector."""
        return f"{self.index}: {self.name} ({format_bytes(self.total_memory)})"


@dataclass(frozen=True)
class CpuInfo:
    """The CPU and the number formats it has hardware for.

    Attributes:
        bf16_native: bf16 instructions: ``avx512_bf16`` / ``amx_bf16`` (x86), ``bf16`` (Arm: BFDOT / BFMMLA),
            ``FEAT_BF16`` (Apple); None: unknown.
        bf16_flags: the flags that showed it, e.g. ("avx512_bf16", "amx_bf16").
        amx: Intel AMX tiles with bf16 (``amx_tile`` + ``amx_bf16``, Sapphire Rapids and newer Xeons): bf16 matrix
            multiplies in hardware (the ``TDPBF16PS`` tile instruction, Intel ISA Extensions reference), which
            PyTorch's CPU autocast reaches through oneDNN. What it does not promise is that bf16 *trains* faster:
            the tiles pay off on layers large enough to fill them, and the conversions around them cost on small
            ones (issue 27: a Xeon with AMX measured the demo model fp32 0.354 s/step against bf16 AMP 0.558).
        amx_fp16: AMX-FP16 (Granite Rapids and newer): fp16 tile multiplies. Linux hides it from /proc/cpuinfo
            (its cpufeatures.h entry has no name), so the probe asks torch (``torch.cpu._is_amx_fp16_supported``,
            CPUID); None: unknown.
    """

    name: str
    cores: int
    bf16_native: bool | None = None
    bf16_flags: tuple[str, ...] = ()
    amx: bool | None = None
    amx_fp16: bool | None = None

    @property
    def arm_bf16(self) -> bool:
        """An Arm CPU with the BF16 extension (BFDOT / BFMMLA: Neoverse V1 / V2, Graviton 3 / 4, Apple M2+)."""
        return "bf16" in self.bf16_flags or "FEAT_BF16" in self.bf16_flags


@dataclass(frozen=True)
class MpsInfo:
    """Apple's Metal backend."""

    available: bool
    macos_version: str = ""
    fp16_autocast: bool = False  # torch >= 2.5
    bf16: bool = False  # torch >= 2.6 on macOS 14+ (runs; native only from M3, see bf16_native)
    grad_scaler: bool = False  # torch >= 2.8: GradScaler on MPS, which fp16 AMP training needs
    chip: str = ""  # "Apple M2 Pro"
    unsupported: str = ""  # why this torch cannot use the GPU on this macOS ("" when it can)

    @property
    def usable(self) -> bool:
        """Training can run on the Apple GPU."""
        return self.available and not self.unsupported

    @property
    def bf16_native(self) -> bool:
        """bf16 in the GPU's hardware (M3 on); M1 / M2 emulate it (:func:`~guitrainer.core.device.gpu_traits.apple_bf16_native`)."""
        return apple_bf16_native(self.chip)

    @property
    def fp16_amp(self) -> bool:
        """fp16 AMP as the trainer runs it (autocast and a GradScaler) works here."""
        return self.usable and self.fp16_autocast and self.grad_scaler


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
    arch_list: tuple[str, ...] = ()  # torch.cuda.get_arch_list(): sm_/compute_ names (CUDA), gfx names (ROCm)
    nvidia_gpu_unused: bool = False  # an NVIDIA driver is installed but this torch is a CPU-only build
    unused_nvidia_capability: tuple[int, int] | None = None  # that card's compute capability, from nvidia-smi
    machine: str = ""  # platform.machine(): "x86_64", "aarch64", "AMD64", "arm64"
    hsa_override: str = ""  # HSA_OVERRIDE_GFX_VERSION as set for this process (ROCm)
    unknown: tuple[tuple[str, str], ...] = ()  # (fact, reason) for every fact that could not be found

    # ------------------------------------------------------------------ the selected device
    @property
    def kind(self) -> DeviceKind:
        if self.gpus:
            return "xpu" if self.gpus[0].vendor == "intel" else "cuda"
        if self.mps is not None and self.mps.usable:
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
            return bool(self.mps and self.mps.bf16 and self.mps.bf16_native)
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
            bits = [g.arch_label if g.vendor == "amd" else g.arch, format_bytes(g.total_memory),
                    "bf16 native" if g.bf16_native else "no native bf16"]
            if g.kernels_in_build is False:
                bits.append("NOT supported by this torch build")
            if g.jetson:
                bits.append(g.jetson)
            parts.append(f"{g.name} ({', '.join(bits)})")
            if len(self.gpus) > 1:
                parts[-1] += f" [GPU {g.index} of {len(self.gpus)}]"
        elif self.kind == "mps":
            chip = self.mps.chip if self.mps and self.mps.chip else "Apple GPU"
            parts.append(f"{chip} (MPS, macOS {self.mps.macos_version if self.mps else '?'})")
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
        if self.kind == "xpu":
            return "Intel XPU"
        return "MPS" if self.kind == "mps" else "CPU only"

    def facts(self) -> list[tuple[str, str]]:
        """(label, value) rows describing the selected device, for the UI and ``--check``."""
        rows: list[tuple[str, str]] = []
        yes_no = {True: "yes", False: "no", None: "unknown"}
        g = self.gpu
        if g is not None:
            rows.append(("Device", g.name))
            if g.vendor == "nvidia":
                cap = f"{g.capability[0]}.{g.capability[1]} ({g.arch})"
                if g.kernels_in_build is False:
                    cap += " — not in this torch build"
                rows.append(("Compute capability", cap))
            else:
                rows.append(("Architecture", g.arch_label))
            mem = f"{format_bytes(g.total_memory)} total"
            if g.free_memory is not None:
                mem += f", {format_bytes(g.free_memory)} free"
            rows.append(("Memory", mem))
            if g.jetson:
                rows.append(("Module", f"{g.jetson} (JetPack)"))
            rows.append(("bf16 native", yes_no[g.bf16_native]))
            if g.vendor == "intel":
                xmx = "unknown" if g.xmx_source.startswith("unknown") else yes_no[g.tensor_cores]
                rows.append(("XMX matrix engines", f"{xmx} ({g.xmx_source.removeprefix('unknown: ')})"
                             if g.xmx_source else xmx))
            else:
                rows.append(("fp16 tensor cores" if g.vendor == "nvidia" else "fp16 matrix cores", yes_no[g.tensor_cores]))
            rows.append(("fp16 at full speed", yes_no[g.fp16_fast]))
        elif self.kind == "mps":
            mps = self.mps or MpsInfo(False)
            rows.append(("Device", f"{mps.chip or 'Apple GPU'} (MPS), macOS {mps.macos_version or '?'}"))
            rows.append(("fp16 AMP", yes_no[mps.fp16_amp]))
            rows.append(("bf16 AMP", yes_no[mps.bf16] + ("" if mps.bf16_native or not mps.bf16 else " (emulated: slow)")))
        else:
            rows.append(("Device", f"CPU: {self.cpu.name}"))
            rows.append(("Cores", str(self.cpu.cores)))
            bf = yes_no[self.cpu.bf16_native]
            if self.cpu.bf16_flags:
                bf += f" ({', '.join(self.cpu.bf16_flags)})"
            rows.append(("bf16 native", bf))
            if self.mps is not None and self.mps.unsupported:
                rows.append(("Apple GPU (MPS)", f"not usable: {self.mps.unsupported}"))
            rows.append((AMX_FACT, AMX_VALUES[self.cpu.amx]))
            if self.cpu.amx_fp16:
                rows.append(("AMX-FP16 (fp16 matrix tiles)", "yes"))
        if self.torch_ok:
            rows.append(("torch", f"{self.torch_version} ({self._torch_backend()})"))
        else:
            rows.append(("torch", "not available"))
        rows.append(("bitsandbytes", self.bitsandbytes.label()))
        return rows

