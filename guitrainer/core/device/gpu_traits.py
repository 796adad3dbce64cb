"""What a GPU can do for mixed precision, from what it reports (vendor, compute capability, name, SM count,
gfx architecture): one function per fact, each naming its source. Pure Python; the probe and the tests'
fake devices both call :func:`gpu_traits`, so a fake device is only as right as these rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Vendor = Literal["nvidia", "amd", "intel"]


@dataclass(frozen=True)
class GpuTraits:
    """Attributes:
    bf16_native: bf16 arithmetic in hardware, not torch's emulation.
    tensor_cores: matrix units for fp16 (NVIDIA tensor cores, AMD matrix cores / WMMA, Intel XMX).
    fp16_fast: fp16 arithmetic at least as fast as fp32 (AMP then saves time, not only memory).
    """

    bf16_native: bool
    tensor_cores: bool
    fp16_fast: bool


def gpu_traits(vendor: Vendor, capability: tuple[int, int], name: str, sm_count: int = 0, gfx_arch: str = "") -> GpuTraits:
    """The mixed-precision traits of one GPU (see the functions below for each rule and its source)."""
    if vendor == "amd":
        return GpuTraits(amd_matrix_cores(gfx_arch), amd_matrix_cores(gfx_arch), amd_fp16_fast(gfx_arch))
    if vendor == "intel":
        xmx = intel_xmx(name)
        return GpuTraits(xmx, xmx, True)
    return GpuTraits(
        nvidia_bf16_native(capability),
        nvidia_tensor_cores(capability, name, sm_count),
        nvidia_fp16_fast(capability),
    )


# --------------------------------------------------------------------------- NVIDIA


def nvidia_bf16_native(capability: tuple[int, int]) -> bool:
    """bf16 tensor-core and arithmetic support starts with Ampere, compute capability 8.0.

    Source: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), "BF16 ... new in A100"; CUDA C++
    Programming Guide, ``__nv_bfloat16`` arithmetic requires sm_80. ``torch.cuda.is_bf16_supported()`` is
    True on older cards too, through emulation, so it is not used.
    """
    return capability >= (8, 0)


#: Turing parts without tensor cores: TU116 (GTX 1650 Super / 1660 / 1660 Ti / 1660 Super) and TU117
#: (GTX 1650, GTX 1630, MX450 / MX550, Quadro T400 / T500 / T550 / T600 / T1000 / T1200).
#: Source: NVIDIA Turing TU116/TU117 specifications (the GTX 16 launch materials: "Turing shaders without
#: RT and Tensor cores"); TechPowerUp GPU Database entries for each part.
_TU11X_NAME = re.compile(r"GTX\s*16\d\d|\bMX\s*[45]\d0\b|\bT(?:400|500|550|600|1000|1200)\b", re.IGNORECASE)
#: the largest TU116 has 24 SMs (GTX 1660 Ti); the smallest Turing chip with tensor cores, TU106, has 30
#: (RTX 2060 mobile). Source: NVIDIA Turing architecture whitepaper, TU106 configuration; TechPowerUp.
TU11X_MAX_SMS = 24


def nvidia_tensor_cores(capability: tuple[int, int], name: str, sm_count: int = 0) -> bool:
    """fp16 tensor cores from Volta (7.0), except the Turing TU116 / TU117 chips.

    Decided from what the device reports: a compute capability 7.5 part with at most :data:`TU11X_MAX_SMS`
    SMs, or one whose name is a TU116/TU117 product (:data:`_TU11X_NAME`: GTX 16xx, MX 450/550, T-series
    Quadro), has none. Source: NVIDIA Volta V100 whitepaper (tensor cores new in sm_70); Turing whitepaper.
    """
    if capability < (7, 0):
        return False
    if capability == (7, 5):
        if 0 < sm_count <= TU11X_MAX_SMS:
            return False
        if _TU11X_NAME.search(name):
            return False
    return True


def nvidia_fp16_fast(capability: tuple[int, int]) -> bool:
    """fp16 arithmetic at full (or double) rate: sm_53, sm_60, sm_62 and every part from sm_70.

    Consumer Pascal (6.1: GTX 10xx, Quadro P-series, Tesla P4/P40) runs fp16 at 1/64 of its fp32 rate, and
    Maxwell 5.0/5.2 has no fp16 arithmetic at all; P100 (6.0) and the Jetson chips (5.3, 6.2) run it at twice
    the fp32 rate. Source: CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table (results per
    clock per SM: 16-bit floating-point add/multiply = 2 for 6.1 against 128 for 32-bit; 128 for 6.0).
    """
    return capability in ((5, 3), (6, 0), (6, 2)) or capability >= (7, 0)


# --------------------------------------------------------------------------- AMD (ROCm)


def amd_gfx_base(gcn_arch_name: str) -> str:
    """``"gfx90a:sramecc+:xnack-"`` -> ``"gfx90a"``; ``""`` stays ``""``."""
    return gcn_arch_name.split(":")[0].strip().lower()


def amd_matrix_cores(gfx_arch: str) -> bool:
    """Matrix cores with bf16 / fp16: CDNA (gfx908 MI100, gfx90a MI200, gfx94x MI300, gfx95x MI350), RDNA3
    (gfx11xx, WMMA) and RDNA4 (gfx12xx); not RDNA1/RDNA2 (gfx10xx) nor GCN/Vega (gfx9 before gfx908).

    Source: AMD CDNA / CDNA 2 / CDNA 3 instruction set architecture guides (MFMA instructions, bf16 inputs);
    AMD RDNA3 ISA guide ("WMMA" instructions, new in RDNA3); the RDNA2 ISA guide has neither. ROCm's
    ``torch.cuda.is_bf16_supported()`` is True on every HIP device, so it is not used.
    """
    base = amd_gfx_base(gfx_arch)
    if base in ("gfx908", "gfx90a") or re.fullmatch(r"gfx9[45][0-9a-f]", base):
        return True
    return base.startswith(("gfx11", "gfx12"))


def amd_fp16_fast(gfx_arch: str) -> bool:
    """Packed fp16 math (twice the fp32 rate) from Vega (gfx9) on, RDNA included.

    Source: AMD Vega ISA ("Rapid Packed Math": V_PK_* 16-bit instructions), kept in the RDNA1-4 ISAs.
    """
    return bool(re.match(r"gfx(9|1[0-9])", amd_gfx_base(gfx_arch)))


def amd_generation(gfx_arch: str) -> str:
    """A user-facing family for a gfx name: "RDNA2", "RDNA3", "CDNA 2", ... ("" when unknown)."""
    base = amd_gfx_base(gfx_arch)
    table = (
        (r"gfx12", "RDNA4"), (r"gfx11", "RDNA3"), (r"gfx103", "RDNA2"), (r"gfx101", "RDNA1"),
        (r"gfx95", "CDNA 4"), (r"gfx94", "CDNA 3"), (r"gfx90a", "CDNA 2"), (r"gfx908", "CDNA"), (r"gfx9", "Vega"),
    )
    return next((label for prefix, label in table if base.startswith(prefix)), "")


# --------------------------------------------------------------------------- Intel (XPU)

#: discrete Arc (A/B series), Lunar Lake's Arc 1xxV and the Data Center GPUs (Max, Flex) have XMX engines;
#: the Arc-branded iGPU of Meteor Lake ("Intel(R) Arc(TM) Graphics", no model number) and Iris Xe do not.
#: Source: Intel Arc A-series / B-series and Data Center GPU Max product briefs ("Xe Matrix Extensions");
#: Intel Core Ultra (Series 1) graphics specifications (no XMX).
_INTEL_XMX = re.compile(r"\bArc\S*\s+(?:[AB]\d{3}|\d{3}V)\b|Data Center GPU|\bGPU Max\b|\bFlex\b", re.IGNORECASE)


def intel_xmx(name: str) -> bool:
    """Whether an Intel GPU has XMX matrix engines (fast bf16 / fp16); see :data:`_INTEL_XMX`."""
    return bool(_INTEL_XMX.search(name))


# --------------------------------------------------------------------------- Apple


def apple_chip_generation(chip: str) -> int:
    """``"Apple M2 Pro"`` -> 2; 0 when the name is not an Apple M-series chip."""
    m = re.search(r"\bM(\d+)\b", chip)
    return int(m.group(1)) if m and "apple" in chip.lower() else 0


def apple_bf16_native(chip: str) -> bool:
    """Apple GPUs compute bf16 natively from M3 (Apple family 9); M1 and M2 convert it in software.

    Source: Metal Shading Language 3.1 (macOS 14) added the ``bfloat`` type; GPUs before the Apple9 family
    (M3) have no bf16 ALUs and convert through fp32, which the issue that asked for this rule (17) reports
    from the peers' bug trackers as much slower than fp16 on M1 and M2.
    """
    return apple_chip_generation(chip) >= 3
