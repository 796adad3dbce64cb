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
    source: how ``tensor_cores`` was decided where the device may not say (Intel XPU; "unknown: why" when it
        could not be told, and then ``tensor_cores`` is False, the cautious reading).
    bf16_full_rate: bf16 matrix math at fp16's rate (False: native bf16, but fp16 is the faster half format).
    """

    bf16_native: bool
    tensor_cores: bool
    fp16_fast: bool
    source: str = ""
    bf16_full_rate: bool = True  # how the matrix units were decided where that can differ (Intel: reported, device id, name)


def gpu_traits(vendor: Vendor, capability: tuple[int, int], name: str, sm_count: int = 0, gfx_arch: str = "", *,
               xmx_reported: bool | None = None, device_id: int | None = None) -> GpuTraits:
    """The mixed-precision traits of one GPU (see the functions below for each rule and its source).

    ``xmx_reported`` and ``device_id`` are what an Intel GPU reports (:func:`intel_xmx`); other vendors ignore them.
    """
    if vendor == "amd":
        return GpuTraits(amd_matrix_cores(gfx_arch), amd_matrix_cores(gfx_arch), amd_fp16_fast(gfx_arch),
                         bf16_full_rate=amd_bf16_full_rate(gfx_arch))
    if vendor == "intel":
        xmx, how = intel_xmx(name, xmx_reported, device_id)
        return GpuTraits(bool(xmx), bool(xmx), True, how if xmx is not None else f"unknown: {how}")
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


def amd_bf16_full_rate(gfx_arch: str) -> bool:
    """bf16 matrix math at the fp16 rate: every AMD matrix-core chip except CDNA 1 (gfx908, Instinct MI100), whose
    MFMA units multiply bf16 at half the fp16 rate. Source: AMD Instinct MI100 specifications: "FP16/FP16 Matrix
    TFLOPs (Peak) 184.6", "bFLOAT16 TFLOPs (Peak) 92.3" (as tabulated by Notebookcheck, MI100 announcement)."""
    return amd_gfx_base(gfx_arch) != "gfx908"


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

#: Intel GPUs with XMX engines, by the name the driver reports: discrete Arc A- and B-series, desktop and laptop
#: (A770, A770M, A370M, B580), the Arc Pro parts (Pro A60, Pro A60M, Pro B60), Lunar Lake's Arc 130V / 140V and Arrow
#: Lake-H's Arc 130T / 140T, the Data Center GPUs (Max, Flex). Sources: Intel Arc A-series (desktop and mobile: "16
#: 1024-bit matrix engines" per Xe core) and B-series product briefs; the Arc Pro A/B parts are the same DG2 / BMG
#: silicon (intel/compute-runtime shared/source/dll/devices/devices_base.inl, Dg2HwConfig / BmgHwConfig); Arrow
#: Lake-H's Xe-LPG+ "now incorporate[s] XMX engines" (Notebookcheck, Arc 130T / 140T).
_INTEL_XMX = re.compile(
    r"\bArc\S*\s+(?:Pro\s+)?(?:[AB]\d{2,3}[A-Z]*|\d{3}[VT])\b|Data Center GPU|\bGPU Max\b|\bFlex\b", re.IGNORECASE
)
#: the name Linux's compute-runtime gives Meteor Lake (no XMX), Arrow Lake-H and Lunar Lake (XMX) alike, so only the
#: device id tells them apart (devices_base.inl: MTL 0x7D55, ARL 0x7D51, LNL 0x64A0 all "Intel(R) Arc(TM) Graphics").
#: Meteor Lake's Xe-LPG has no XMX (Intel Core Ultra Series 1 graphics; Hot Hardware: "Xe-LPG doesn't include the
#: XMX matrix math accelerators").
INTEL_SHARED_NAME = re.compile(r"^Intel\(R\) Arc\(TM\) Graphics$", re.IGNORECASE)
INTEL_XMX_BY_DEVICE_ID = {0x7D55: False, 0x7D51: True, 0x64A0: True}


def intel_xmx(name: str, reported: bool | None = None, device_id: int | None = None) -> tuple[bool | None, str]:
    """Whether an Intel GPU has XMX matrix engines (fast bf16 / fp16), and how that was decided.

    From what the device reports first: torch's XPU property ``has_subgroup_matrix_multiply_accumulate`` (torch 2.5+)
    True is proof (the DPAS instructions XMX runs). False is not: the flag comes from an offline-compiler query that
    reports False when it cannot run (pytorch/pytorch#196074: all four flags False on an Arc B580 with working XMX),
    so then the device id (torch 2.9+, :data:`INTEL_XMX_BY_DEVICE_ID`) decides, and the name (:data:`_INTEL_XMX`)
    only as the last fallback. Returns ``(xmx, how)``: ``how`` is "reported by the device", "from its device id",
    "from its name" or, with ``xmx`` None, why it cannot be told.
    """
    if reported:
        return True, "reported by the device"
    if device_id is not None and device_id in INTEL_XMX_BY_DEVICE_ID:
        return INTEL_XMX_BY_DEVICE_ID[device_id], "from its device id"
    if _INTEL_XMX.search(name):
        return True, "from its name"
    if INTEL_SHARED_NAME.match(name.strip()):
        return None, ("the name is shared by Meteor Lake (no XMX), Arrow Lake-H and Lunar Lake (XMX), and this torch "
                      "reports no device id (torch 2.9+)")
    return False, "from its name"


# --------------------------------------------------------------------------- Apple


def apple_chip_generation(chip: str) -> int:
    """``"Apple M2 Pro"`` -> 2; 0 when the name is not an Apple M-series chip."""
    m = re.search(r"\bM(\d+)\b", chip)
    return int(m.group(1)) if m and "apple" in chip.lower() else 0


def apple_bf16_native(chip: str) -> bool:
    """Apple GPUs compute bf16 natively from M3 (Apple family 9); M1 and M2 convert it in software.

    Source: Metal Shading Language 3.1 (macOS 14) added the ``bfloat`` type; GPUs before the Apple9 family (M3)
    convert it through fp32. Measured: an M1 Pro multiplies bf16 matrices at 2.30 TFLOPS against 4.28 in fp32 and
    4.75 in fp16 (torch 2.7 MPS; zzc0721/torch-performance-test-data#191). Native is not faster, though: an M4 Max
    does 13.18 TFLOPS in bf16 against 13.78 in fp32 and 14.82 in fp16 (torch 2.8; same data set, #65), so on
    Apple GPUs bf16 saves memory, not time, and the precision lab decides.
    """
    return apple_chip_generation(chip) >= 3
