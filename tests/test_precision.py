"""core.hardware + core.precision: the rule table on fake devices, the real probe, and its failure modes."""

from __future__ import annotations

import sys
import types

import pytest
from helpers import FAKE_DEVICES, config_with, fake_device
from helpers.devices import MAC_DEVICES

from guitrainer.config import OPTIMIZERS, TrainingConfig, precision_choices
from guitrainer.config.presets import DEMO_PRESET
from guitrainer.core.device import hardware
from guitrainer.core.device.hardware import BitsAndBytesInfo, DeviceInfo, arch_supported
from guitrainer.core.precision import advice, rules
from guitrainer.core.precision.advice import Advice
from guitrainer.core.precision.advisor import advise, save_overflow_advice

# (level, suggested value) of the worst advice about `precision.training`; None = no advice.
# Each row is reasoned from a cited fact, not read off the code's output:
#   [bf16]  NVIDIA bf16 from compute capability 8.0 (A100 whitepaper); before it torch emulates bf16 very slowly.
#           Jetson AGX Orin is Ampere, 8.7 (NVIDIA CUDA GPUs list); B200 is 10.0.
#   [tc]    fp16 tensor cores from 7.0 (V100 whitepaper), except TU116/TU117 (GTX 16, MX 450/550, T400-T1200).
#   [p61]   CC 6.1 runs fp16 at 2 results/clock/SM against 128 for fp32 (CUDA Programming Guide throughput table);
#           6.0 (P100) at 128 (full rate); Maxwell 5.2 has no fp16 arithmetic.
#   [tu11x] TU116/TU117 give NaN losses / black images in fp16 (pytorch/pytorch#58123, AUTOMATIC1111 #28).
#   [rdna]  AMD matrix cores (bf16) in CDNA (gfx908/90a/94x) and RDNA3 (gfx11); RDNA2 (gfx103x) and Vega 20 (gfx906,
#           MI50) have packed fp16 math only (AMD ISA guides); ROCm's is_bf16_supported() is True everywhere.
#   [rocm]  ROCm code objects are per gfx target (no "same major" rule as CUDA's): PyTorch 2.13's ROCm wheels have
#           gfx1030 but none of gfx1031-gfx1036 (unslothai/unsloth PR #9829, read from the build scripts).
#   [mi100] CDNA 1 multiplies bf16 at half its fp16 rate: 92.3 against 184.6 TFLOPS (AMD MI100 specifications).
#   [xmx]   Intel Arc A- and B-series, desktop and laptop (A770M, A370M), the Arc Pro parts (same DG2 / BMG silicon:
#           intel/compute-runtime devices_base.inl), Arrow Lake-H's 140T have XMX; Meteor Lake's iGPU (device
#           0x7D55, named "Intel(R) Arc(TM) Graphics" like Arrow Lake-H's 0x7D51) has none (Xe-LPG).
#   [mps]   MPS fp16 autocast from torch 2.5, GradScaler from 2.8 (the trainer always scales fp16); bf16 autocast
#           from torch 2.6 on macOS 14; emulated on M1 / M2 (M1 Pro: bf16 2.30 TFLOPS against fp32 4.28), native
#           but no faster on M3+ (M4 Max: bf16 13.18, fp32 13.78, fp16 14.82; zzc0721/torch-performance-test-data
#           #191, #65): fp16 is the faster half format on every Apple GPU. torch 2.10+ needs macOS 14 for MPS at all
#           (pytorch/pytorch#164943, PR #163515), so a Mac on macOS 13 with torch 2.13 trains on its CPU.
#   [cpu]   measured with bench/precision_lab.py (bench/RESULTS.md, "Precision lab"): the demo model trains fastest
#           in fp32 on an AVX512-BF16 EPYC (0.069 s/step, bf16 AMP 0.127, fp16 AMP 0.279) and on an AMX Xeon (issue
#           27: fp32 0.354, bf16 AMP 0.558); a mid-size UNet (the sd15 family) trains 1.6-2.3x faster in bf16 AMP on
#           the same EPYC. A CPU without bf16 instructions converts bf16 in software. AMX-FP16 (Granite Rapids) runs
#           fp16 matrix multiplies in hardware. Arm BF16 is not measured here: the rules keep fp32 and say so.
B, F16, F32 = "bf16", "fp16", "fp32"
GOOD = None
CUDA_BF16 = {F32: ("info", B), F16: ("info", B), B: GOOD}  # [bf16]: bf16 native, so bf16 is best
CUDA_TC = {F32: ("info", F16), F16: GOOD, B: ("error", F16)}  # [tc] + [bf16]: tensor cores, no bf16
NO_TC_TURING = {F32: GOOD, F16: ("warning", F32), B: ("error", F32)}  # [tu11x]: fp16 unsafe, so fp32 everywhere
SLOW_FP16 = {F32: GOOD, F16: ("warning", F32), B: ("error", F32)}  # [p61]: fp16 slower than fp32, no bf16
PACKED_FP16 = {F32: ("info", F16), F16: ("info", None), B: ("warning", F16)}  # [rdna] / [xmx]: no matrix units
#: the demo model on a CPU ([cpu]): fp32 everywhere; fp16 slow; bf16 slower (info where bf16 instructions exist,
#: a warning where bf16 is converted in software)
CPU_DEMO = {F32: GOOD, F16: ("warning", F32), B: ("info", F32)}
CPU_NO_BF16 = {F32: GOOD, F16: ("warning", F32), B: ("warning", F32)}
APPLE_FP16 = {F32: ("info", F16), F16: GOOD, B: ("warning", F16)}  # [mps] M1 / M2: bf16 emulated
PRECISION_TABLE: dict[str, dict[str, tuple[str, str | None] | None]] = {
    "cpu": CPU_NO_BF16,  # no bf16 instructions at all
    "cpu_bf16": CPU_DEMO,  # [cpu] AVX512-BF16 EPYC, demo model
    "cpu_amx": CPU_DEMO,  # [cpu] Sapphire Rapids, demo model: measured fp32 fastest there too
    "cpu_gnr": {**CPU_DEMO, F16: ("info", F32)},  # [cpu] Granite Rapids: AMX-FP16, so fp16 is no longer "slow"
    "cpu_arm_bf16": CPU_DEMO,  # [cpu] Arm BF16: not measured, fp32 kept
    "gtx980": SLOW_FP16,  # [p61] Maxwell 5.2
    "gtx1080": SLOW_FP16,  # [p61] consumer Pascal 6.1
    "gtx1080_cu130": SLOW_FP16,  # the same card; the build problem is a separate, device-level error
    "p100": {F32: ("info", F16), F16: ("info", None), B: ("error", F16)},  # [p61] full-rate fp16, no tensor cores
    "v100": CUDA_TC,  # [tc] Volta
    "v100_cu130": CUDA_TC,  # the same card under a build without sm_70
    "gtx1660": NO_TC_TURING,  # [tu11x] TU116 (by name and by its 22 SMs)
    "t1000": NO_TC_TURING,  # [tu11x] TU117 Quadro T1000
    "mx450": NO_TC_TURING,  # [tu11x] TU117 laptop part
    "tu117_unnamed": NO_TC_TURING,  # [tu11x] an unknown name, 16 SMs: decided from the SM count
    "t4": CUDA_TC,  # [tc] TU104, 40 SMs: tensor cores
    "rtx2080ti": CUDA_TC,
    "rtx3060": CUDA_BF16,
    "rtx4090": CUDA_BF16,
    "h100": CUDA_BF16,
    "b200": CUDA_BF16,
    "b200_cu126": CUDA_BF16,
    "rtx5090": CUDA_BF16,
    "rtx5090_cu126": CUDA_BF16,
    "jetson_orin": CUDA_BF16,  # [bf16] Ampere 8.7
    "t4_cpu_torch": CPU_NO_BF16,  # a CPU-only torch: the CPU trains (the fake CPU has no bf16)
    "rtx3060_cpu_torch": CPU_NO_BF16,
    "rtx4090_cpu_torch": CPU_NO_BF16,
    "rx6800": PACKED_FP16,  # [rdna] RDNA2, gfx1030
    "rx6700xt": PACKED_FP16,  # [rdna] RDNA2, gfx1031 (its missing kernels are a device-level error)
    "rx7900": CUDA_BF16,  # [rdna] RDNA3 WMMA
    "mi250": CUDA_BF16,  # [rdna] CDNA 2
    "mi100": {F32: ("info", F16), F16: GOOD, B: ("info", F16)},  # [mi100] matrix cores, bf16 at half fp16's rate
    "mi50": PACKED_FP16,  # [rdna] Vega 20: packed fp16, no matrix cores
    **dict.fromkeys(("arc_a770", "arc_a770m", "arc_a370m", "arc_pro_a60", "arc_pro_b60", "arc_140t", "arl_arc_igpu"),
                    CUDA_BF16),  # [xmx]
    "mtl_arc_igpu": PACKED_FP16,  # [xmx] Meteor Lake: no XMX, fp16 at full rate
    "mps": APPLE_FP16,  # [mps] M2, torch 2.13, macOS 14
    "m1": APPLE_FP16,  # [mps] M1: the same
    "m3": {F32: ("info", F16), F16: GOOD, B: ("info", F16)},  # [mps] M3: native bf16, still not faster than fp16
    "m2_macos13": {F32: ("info", F16), F16: GOOD, B: ("error", F16)},  # [mps] torch 2.8: fp16 AMP yes, bf16 no
    "m2_macos13_torch213": CPU_DEMO,  # [mps] no MPS: its CPU trains (Apple M2: Arm BF16, not measured)
    "m2_torch27": {F32: GOOD, F16: ("error", F32), B: ("warning", F32)},  # [mps] no GradScaler before 2.8
    "mps_old": {F32: GOOD, F16: ("error", F32), B: ("error", F32)},  # [mps] torch 2.4, macOS 13: neither
}
#: the same CPUs training a full-size model (model.family = "sd15"): bf16 where bf16 instructions exist [cpu]
CPU_SD15_TABLE: dict[str, dict[str, tuple[str, str | None] | None]] = {
    "cpu": CPU_NO_BF16,
    "cpu_bf16": {F32: ("info", B), F16: ("warning", B), B: GOOD},
    "cpu_amx": {F32: ("info", B), F16: ("warning", B), B: GOOD},
    "cpu_gnr": {F32: ("info", B), F16: ("info", B), B: GOOD},  # AMX-FP16: fp16 an option, bf16 the rules' pick
    "cpu_arm_bf16": CPU_DEMO,  # not measured: fp32 kept, bf16 an info
}
EIGHT_BIT = ("AdamW8bit", "Lion8bit")
#: pure-PyTorch optimizers from their own packages (issue 20): no device or bitsandbytes constraint
PURE_TORCH = dict.fromkeys(("Prodigy", "AdamWScheduleFree", "DAdaptAdam", "CAME"))
CUDA_OPT = dict.fromkeys(OPTIMIZERS)  # every optimizer fine on a GPU with a matching bitsandbytes 0.50.2
BNB_REFUSED = {"AdamW": None, "Adafactor": None, **dict.fromkeys(EIGHT_BIT, ("error", "AdamW")),
               "PagedAdamW8bit": ("error", "AdamW"), **PURE_TORCH}
BNB_WARNED = {"AdamW": None, "Adafactor": None, **dict.fromkeys(EIGHT_BIT, ("warning", "AdamW")),
              "PagedAdamW8bit": ("warning", "AdamW"), **PURE_TORCH}
CPUS = ("cpu", "cpu_bf16", "cpu_amx", "cpu_gnr", "cpu_arm_bf16", "t4_cpu_torch", "rtx3060_cpu_torch",
        "rtx4090_cpu_torch", "m2_macos13_torch213")
# [bnb] bitsandbytes 0.50.2 (the fakes' version): 8-bit kernels need CUDA compute capability 6.0; its ROCm libraries
# have gfx90a / gfx942 / gfx950 / gfx110x / gfx115x / gfx120x, and gfx908 and gfx103x only in the ROCm 7.14 library,
# which it loads only under a torch built on ROCm 7.14 (bitsandbytes installation docs and cextension.py at 0.50.0;
# the fakes run PyTorch's rocm7.2 build); no build has gfx906. Paged optimizers page on CUDA and ROCm, and on Intel
# GPUs from 0.50.0 (PR #1898). The PyPI wheels do not run on Jetson's L4T runtime (installation docs, Jetson note).
# CPU 8-bit kernels from 0.50.0 (backends/cpu/ops.py), slow there.
OPTIMIZER_TABLE: dict[str, dict[str, tuple[str, str] | None]] = {
    **{d: CUDA_OPT for d in ("gtx1080", "gtx1080_cu130", "p100", "v100", "v100_cu130", "gtx1660", "t1000", "mx450",
                             "tu117_unnamed", "t4", "rtx2080ti", "rtx3060", "rtx4090", "h100", "b200", "b200_cu126",
                             "rtx5090", "rtx5090_cu126", "rx7900", "mi250")},
    "gtx980": BNB_REFUSED,  # [bnb] compute capability 5.2
    "jetson_orin": BNB_WARNED,  # [bnb] the PyPI wheel does not run on L4T; a JetPack build might be installed
    **{d: BNB_REFUSED for d in ("rx6800", "rx6700xt", "mi100", "mi50")},  # [bnb] no kernels in the rocm7.2 library
    **{d: CUDA_OPT for d in FAKE_DEVICES if d.startswith(("arc_", "mtl_", "arl_"))},  # [bnb] XPU, paged from 0.50
    **{d: BNB_WARNED for d in CPUS},  # [bnb] works on the CPU, slowly
    **{d: BNB_REFUSED for d in MAC_DEVICES if d != "m2_macos13_torch213"},  # no MPS 8-bit kernels in bitsandbytes
}


def _config(training: str = "fp16", optimizer: str = "AdamW", **sets: object) -> TrainingConfig:
    return config_with(precision__training=training, optimizer__name=optimizer, **sets)


def _about(advice: list[Advice], topic: str) -> tuple[str, str | None] | None:
    """(level, suggested value) of the most severe advice on ``topic``."""
    mine = [a for a in advice if a.topic == topic]
    if not mine:
        return None
    a = mine[0]  # advise() sorts most severe first
    return a.level, a.suggestion.get(topic)


def test_tables_cover_every_fake_device():
    assert set(PRECISION_TABLE) == set(OPTIMIZER_TABLE) == set(FAKE_DEVICES)
    assert len(FAKE_DEVICES) >= 45


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("training", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("device_name", sorted(PRECISION_TABLE))
def test_rule_table(device_name, training, optimizer):
    device = fake_device(device_name)
    advice = advise(device, _config(training, optimizer))
    assert _about(advice, "precision.training") == PRECISION_TABLE[device_name][training]
    assert _about(advice, "optimizer.name") == OPTIMIZER_TABLE[device_name][optimizer]
    for a in advice:  # every suggestion is a valid config change that the picker can apply
        if a.suggestion:
            cfg = _config(training, optimizer)
            for path, value in a.suggestion.items():
                cfg.set(path, value)
            assert a.suggestion_text.startswith(("use ", "save as ", "turn "))
    # applying a training-precision suggestion clears the error about it (no error -> error loops)
    about = _about(advice, "precision.training")
    if about and about[1]:
        after = advise(device, _config(about[1], optimizer))
        assert (_about(after, "precision.training") or ("info",))[0] != "error"


@pytest.mark.parametrize("training", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("device_name", sorted(CPU_SD15_TABLE))
def test_cpu_rule_table_for_a_full_size_model(device_name, training):
    """[cpu] the model's size decides on a CPU: the same CPUs as the demo rows, training an SD 1.5 model."""
    cfg = _config(training, model__family="sd15", model__base="/models/sd15.safetensors")
    assert _about(advise(fake_device(device_name), cfg), "precision.training") == CPU_SD15_TABLE[device_name][training]


def test_bf16_on_turing_is_an_error_suggesting_fp16_amp():
    (a,) = [a for a in advise(fake_device("t4"), _config("bf16")) if a.topic == "precision.training"]
    assert a.level == "error" and a.code == "bf16_not_native"
    assert a.suggestion == {"precision.training": "fp16"}
    assert a.suggestion_text == "use fp16 AMP"
    assert "Tesla T4" in a.message and "7.5" in a.message


def test_gtx1660_has_no_tensor_cores_and_its_fp16_caveat():
    d = fake_device("gtx1660")
    assert d.gpu.turing_without_tensor_cores and not d.fp16_tensor_cores
    (a,) = [a for a in advise(d, _config("fp16")) if a.topic == "precision.training"]
    assert a.code == "fp16_gtx16" and "NaN" in a.message
    # fp32 on a card without tensor cores is not nagged about AMP
    assert _about(advise(d, _config("fp32")), "precision.training") is None


def test_torch_build_without_the_cards_architecture():
    d = fake_device("rtx5090_cu126")  # 2.13.0+cu126 stops at sm_90; the RTX 5090 is sm_120
    assert d.gpu.kernels_in_build is False
    errors = [a for a in advise(d, _config("bf16")) if a.code == "torch_arch_missing"]
    assert len(errors) == 1 and errors[0].level == "error"
    assert "sm_120" in errors[0].message
    # cu130 publishes sm_120 (RELEASE.md support matrix, 2.12-2.14), pinned to its exact build
    assert errors[0].suggestion_text.endswith('"torch==2.13.0+cu130" --index-url https://download.pytorch.org/whl/cu130')
    assert errors[0].suggestion == {}  # no setting fixes it: the Start button stays blocked
    assert not [a for a in advise(fake_device("rtx5090"), _config("bf16")) if a.level == "error"]
    assert "cu126" in rules.torch_install_hint((6, 1))  # Pascal: only the cu126 wheels have sm_60, which 6.1 runs


@pytest.mark.parametrize(
    ("cap", "archs", "ok"),
    [
        ((12, 0), ("sm_80", "sm_86", "sm_90"), False),
        ((12, 0), ("sm_90", "sm_120"), True),
        ((8, 9), ("sm_80", "sm_86"), True),  # same major, newer minor runs the sm_86 cubin
        ((9, 0), ("sm_80", "sm_86"), False),
        ((10, 0), ("sm_90", "compute_90"), True),  # PTX JIT
        ((9, 0), ("sm_90a",), True),
        ((9, 1), ("sm_90a",), False),
    ],
)
def test_arch_supported(cap, archs, ok):
    assert arch_supported(cap, archs) is ok


def test_eight_bit_optimizers_need_bitsandbytes_and_sm60():
    no_bnb = fake_device("rtx3060", bitsandbytes=False)
    (a,) = [a for a in advise(no_bnb, _config(optimizer="AdamW8bit")) if a.topic == "optimizer.name"]
    assert (a.level, a.suggestion) == ("error", {"optimizer.name": "AdamW"})
    cpu_bnb = fake_device("rtx3060", bitsandbytes=BitsAndBytesInfo(True, "0.50.2", "cpu"))
    assert _about(advise(cpu_bnb, _config(optimizer="Lion8bit")), "optimizer.name") == ("error", "AdamW")
    maxwell = fake_device("gtx980")
    (a,) = [a for a in advise(maxwell, _config(optimizer="AdamW8bit")) if a.topic == "optimizer.name"]
    assert a.level == "error" and "6.0" in a.message and a.suggestion == {"optimizer.name": "AdamW"}
    assert _about(advise(maxwell, _config(optimizer="AdamW")), "optimizer.name") is None


def test_paged_optimizer_without_cuda_suggests_8bit_when_that_works(monkeypatch):
    # a non-CUDA device where 8-bit works (here: patched status) gets AdamW8bit, not AdamW
    from guitrainer.core.precision import rules as precision_rules

    d = fake_device("cpu")
    monkeypatch.setattr(precision_rules, "eight_bit_status", lambda device: (None, ""))
    (a,) = [a for a in advise(d, _config(optimizer="PagedAdamW8bit")) if a.topic == "optimizer.name"]
    assert a.code == "paged_without_cuda" and a.level == "warning"
    assert a.suggestion == {"optimizer.name": "AdamW8bit"}


def test_sdxl_vae_is_kept_fp32_under_fp16(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # no fp16-fixed VAE on this "computer": nothing to set
    d = fake_device("t4")
    sdxl = advise(d, _config("fp16", model__family="sdxl"))
    assert [a.code for a in sdxl if a.code == "sdxl_vae_fp32"] == ["sdxl_vae_fp32"]
    (a,) = [a for a in sdxl if a.code == "sdxl_vae_fp32"]
    assert a.level == "info" and a.suggestion == {}
    assert not [a for a in advise(d, _config("fp16", model__family="sd15")) if a.code == "sdxl_vae_fp32"]
    assert not [a for a in advise(fake_device("rtx4090"), _config("bf16", model__family="sdxl")) if a.code == "sdxl_vae_fp32"]


def test_mps_limits():
    d = fake_device("mps")  # an M2: bf16 runs but is emulated; an M3 has it in hardware
    assert d.kind == "mps" and not d.bf16_native and fake_device("m3").bf16_native
    old = fake_device("mps", torch_version="2.5.1")  # bf16 not before 2.6; fp16 AMP's GradScaler not before 2.8
    (a,) = [a for a in advise(old, _config("bf16")) if a.topic == "precision.training"]
    assert (a.level, a.suggestion) == ("error", {"precision.training": "fp32"})
    assert "2.6" in a.message and "macOS 14" in a.message
    (f,) = [a for a in advise(old, _config("fp16")) if a.topic == "precision.training"]
    assert f.level == "error" and "2.8" in f.message
    ventura = fake_device("m2_macos13")  # torch 2.13 on macOS 13: fp16 AMP yes, bf16 no
    (b,) = [a for a in advise(ventura, _config("bf16")) if a.topic == "precision.training"]
    assert (b.level, b.suggestion) == ("error", {"precision.training": "fp16"})


def test_cpu_advice_depends_on_the_model():
    d = fake_device("cpu")
    demo = [a for a in advise(d, _config("fp32")) if a.code == "cpu_training"]
    real = [a for a in advise(d, _config("fp32", model__base="/models/sd15.safetensors", model__family="sd15"))
            if a.code == "cpu_training"]
    assert demo[0].level == "info" and real[0].level == "warning"
    unused = fake_device("cpu", nvidia_gpu_unused=True)
    assert any(a.code == "torch_cpu_build" and "pip install" in a.suggestion_text for a in advise(unused, _config("fp32")))


def test_advice_sorted_and_worst():
    found = advise(fake_device("mps_old"), _config("bf16", "AdamW8bit"))
    levels = [a.level for a in found]
    assert levels == sorted(levels, key=advice.LEVELS.index)
    assert advice.worst(found) == "error"
    assert advice.worst([]) is None
    assert advise(None, _config()) == []
    with pytest.raises(ValueError, match="level"):
        Advice("fatal", "x")


def test_recommended_training():
    # [cpu] a full-size model (family unknown) in bf16 where bf16 instructions exist, the demo model in fp32;
    # [p61] consumer Pascal runs fp16 at 1/64 rate; P100 at full rate; [tu11x]; [mps] fp16 AMP with torch 2.8+ on
    # every Apple GPU, M3 included (its native bf16 is no faster); [rdna]; [mi100]; [xmx]
    expect = {"cpu": "fp32", "cpu_bf16": "bf16", "cpu_amx": "bf16", "cpu_arm_bf16": "fp32", "gtx1080": "fp32",
              "p100": "fp16", "gtx1660": "fp32", "t1000": "fp32", "t4": "fp16", "rtx3060": "bf16", "h100": "bf16",
              "mps": "fp16", "m3": "fp16", "mps_old": "fp32", "rx6800": "fp16", "rx7900": "bf16", "mi100": "fp16",
              "arc_a770": "bf16", "arc_a370m": "bf16", "mtl_arc_igpu": "fp16"}
    for name, value in expect.items():
        assert rules.recommended_training(fake_device(name)) == value, name
    for name in ("cpu_bf16", "cpu_amx", "cpu_gnr"):
        assert rules.recommended_training(fake_device(name), "demo") == "fp32", name


def test_save_overflow_advice():
    assert save_overflow_advice([]) is None
    a = save_overflow_advice(["lora_unet_a.lora_up.weight", "b", "c", "d"])
    assert a.level == "error" and a.suggestion == {"precision.save": "bf16"}
    assert "bf16" in a.suggestion_text and "fp32" in a.suggestion_text
    assert "4 tensors" in a.message and "1 more" in a.message and "lora_unet_a" in a.message
    b = save_overflow_advice({"x": 70000.0, "y": 1.5e5})
    assert "150000" in b.message.replace(",", "") or "1.5e+05" in b.message


def test_choice_constants_match_config():
    from guitrainer.config import PRECISIONS

    assert tuple(c.value for c in precision_choices.TRAINING_CHOICES) == PRECISIONS
    assert {c.value for c in precision_choices.SAVE_CHOICES} == set(PRECISIONS)
    assert all(c.explanation and "\n" not in c.explanation for c in precision_choices.TRAINING_CHOICES + precision_choices.SAVE_CHOICES)


# --------------------------------------------------------------------------- the real probe


def test_probe_on_this_machine_is_a_cpu_device_without_errors():
    info = hardware.probe()
    assert isinstance(info, DeviceInfo)
    assert info.torch_ok and info.kind == "cpu" and info.gpus == ()
    assert info.cpu.cores >= 1 and info.cpu.name
    assert "torch" not in dict(info.unknown)
    assert info.summary().startswith("CPU: ")
    assert hardware.probe() is info  # cached
    assert not [a for a in advise(info, _config("fp32")) if a.level == "error"]
    labels = [label for label, _ in info.facts()]
    assert labels[:1] == ["Device"] and "bf16 native" in labels and "bitsandbytes" in labels


def test_probe_survives_torch_raising(monkeypatch):
    broken = types.ModuleType("torch")
    broken.__version__ = "9.9.9"
    broken.version = types.SimpleNamespace(cuda="12.8", hip=None)

    def boom() -> bool:
        raise RuntimeError("CUDA driver initialization failed")

    broken.cuda = types.SimpleNamespace(is_available=boom)
    monkeypatch.setitem(sys.modules, "torch", broken)
    info = hardware.collect()
    assert info.kind == "cpu" and info.torch_version == "9.9.9"
    assert "CUDA driver initialization failed" in dict(info.unknown)["cuda"]

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    info = hardware.collect()
    assert not info.torch_ok and "ModuleNotFoundError" in dict(info.unknown)["torch"]
    (a,) = [a for a in advise(info, _config()) if a.level == "error"]
    assert a.code == "torch_missing"
    assert "torch unavailable" in info.summary()


def _fake_torch(monkeypatch, *, hip: str | None = None, cuda_props=(), xpu_props=(), arch_list=()):
    """A torch module that reports the given CUDA / ROCm device properties (and ``get_arch_list()``), or Intel XPU
    ones."""
    fake = types.ModuleType("torch")
    fake.__version__ = "2.13.0"
    fake.version = types.SimpleNamespace(cuda=None if hip else ("12.8" if cuda_props else None), hip=hip)
    fake.cuda = types.SimpleNamespace(
        is_available=lambda: bool(cuda_props),
        device_count=lambda: len(cuda_props),
        get_arch_list=lambda: list(arch_list),
        get_device_properties=lambda i: cuda_props[i],
        is_bf16_supported=lambda **kw: True,  # what ROCm says for every HIP device: never trusted
        mem_get_info=lambda i: (1 << 30, 2 << 30),
    )
    fake.xpu = types.SimpleNamespace(
        is_available=lambda: bool(xpu_props),
        device_count=lambda: len(xpu_props),
        get_device_properties=lambda i: xpu_props[i],
    )
    fake.backends = types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_probe_reads_rocm_gfx_names_and_ignores_is_bf16_supported(monkeypatch):
    props = [
        types.SimpleNamespace(name="AMD Radeon RX 6800 XT", major=10, minor=3, total_memory=16 << 30,
                              multi_processor_count=72, gcnArchName="gfx1030"),
        types.SimpleNamespace(name="AMD Radeon RX 7900 XTX", major=11, minor=0, total_memory=24 << 30,
                              multi_processor_count=96, gcnArchName="gfx1100"),
    ]
    _fake_torch(monkeypatch, hip="7.1", cuda_props=props)
    info = hardware.collect()
    rdna2, rdna3 = info.gpus
    assert (rdna2.vendor, rdna2.arch, rdna2.bf16_native, rdna2.tensor_cores) == ("amd", "gfx1030", False, False)
    assert (rdna3.arch, rdna3.bf16_native, rdna3.tensor_cores) == ("gfx1100", True, True)
    assert "ROCm 7.1" in info.summary() and "gfx1030 (RDNA2)" in info.summary()


def test_probe_finds_intel_xpu_devices(monkeypatch):
    props = [types.SimpleNamespace(name="Intel(R) Arc(TM) A770 Graphics", total_memory=16 << 30, gpu_subslice_count=32)]
    _fake_torch(monkeypatch, xpu_props=props)
    info = hardware.collect()
    assert info.kind == "xpu" and info.gpu.vendor == "intel" and info.gpu.bf16_native
    assert info.gpu.total_memory == 16 << 30 and "Intel XPU" in info.summary()
    assert rules.recommended_training(info) == "bf16"


def test_intel_xmx_from_what_the_device_reports_the_name_only_as_a_fallback(monkeypatch):
    """[xmx] torch's XPU property has_subgroup_matrix_multiply_accumulate True is proof (DPAS); False is not, since
    the query fails closed (pytorch/pytorch#196074: False on an Arc B580 with XMX); then the device id (torch 2.9+),
    then the name. Meteor Lake (0x7D55) and Arrow Lake-H (0x7D51) share the name "Intel(R) Arc(TM) Graphics"."""

    def xpu(name, reported=None, device_id=None):
        p = types.SimpleNamespace(name=name, total_memory=8 << 30, gpu_subslice_count=8)
        if reported is not None:
            p.has_subgroup_matrix_multiply_accumulate = reported
        if device_id is not None:
            p.device_id = device_id
        return p

    props = [
        xpu("Intel(R) Arc(TM) Graphics", reported=True),  # an iGPU that says it has the instructions: it has
        xpu("Intel(R) Arc(TM) A370M Graphics", reported=False),  # fail-closed flag: the laptop A370M by its name
        xpu("Intel(R) Arc(TM) Graphics", reported=False, device_id=0x7D55),  # Meteor Lake: no XMX
        xpu("Intel(R) Arc(TM) Graphics", reported=False, device_id=0x7D51),  # Arrow Lake-H: XMX
        xpu("Intel(R) Arc(TM) Graphics", reported=False),  # older torch: no device id, cannot be told
        xpu("Intel(R) Iris(R) Xe Graphics", reported=False),
    ]
    _fake_torch(monkeypatch, xpu_props=props)
    info = hardware.collect()
    assert [g.tensor_cores for g in info.gpus] == [True, True, False, True, False, False]
    assert [g.xmx_source for g in info.gpus][:4] == ["reported by the device", "from its name", "from its device id",
                                                      "from its device id"]
    assert info.gpus[4].xmx_source.startswith("unknown") and "xpu 4 XMX" in dict(info.unknown)
    assert "Meteor Lake" in dict(info.unknown)["xpu 4 XMX"]
    facts = dict(info.select(4).facts())
    assert facts["XMX matrix engines"].startswith("unknown (")
    (bf16,) = [a for a in advise(info.select(4), _config("bf16", precision__gpu_index=4)) if a.topic == "precision.training"]
    assert "could not be told" in bf16.message  # it does not claim the chip has none


def test_rocm_build_without_the_cards_gfx_target_is_an_error_with_the_override(monkeypatch):
    """[rocm] a ROCm wheel's get_arch_list() names gfx targets; PyTorch's own have gfx1030 but no gfx1031
    (unslothai/unsloth PR #9829), and a missing target stops the first kernel with "invalid device function"
    (pytorch/pytorch#132570, RX 6700 XT). HSA_OVERRIDE_GFX_VERSION=10.3.0 runs gfx1030 code on it (ROCm/rocALUTION#197)."""
    props = [
        types.SimpleNamespace(name="AMD Radeon RX 6700 XT", major=10, minor=3, total_memory=12 << 30,
                              multi_processor_count=40, gcnArchName="gfx1031"),
        types.SimpleNamespace(name="AMD Radeon RX 6800 XT", major=10, minor=3, total_memory=16 << 30,
                              multi_processor_count=72, gcnArchName="gfx1030:xnack-"),
    ]
    _fake_torch(monkeypatch, hip="7.2", cuda_props=props, arch_list=["gfx900", "gfx906", "gfx1030", "gfx1100"])
    info = hardware.collect()
    rx6700, rx6800 = info.gpus
    assert rx6700.kernels_in_build is False and rx6800.kernels_in_build is True
    (a,) = [a for a in advise(info, _config()) if a.code == "torch_arch_missing"]
    assert a.level == "error" and "gfx1031" in a.message and "invalid device function" in a.message
    assert a.suggestion_text == "HSA_OVERRIDE_GFX_VERSION=10.3.0 python -m guitrainer"
    assert not [a for a in advise(info, _config(precision__gpu_index=1)) if a.code == "torch_arch_missing"]
    # no override for a chip whose neighbour's code is not in the build: a build for it is the answer
    (b,) = [a for a in advise(fake_device("rx6700xt", arch_list=("gfx1100",)), _config()) if a.code == "torch_arch_missing"]
    assert "HSA_OVERRIDE" not in b.suggestion_text

def test_probe_reads_amx_from_cpu_flags(monkeypatch, tmp_path):
    text = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: sse avx512_bf16 amx_bf16 amx_tile\n"
    real_path = hardware.Path

    def fake(p="", *a):
        return real_path(tmp_path / "cpuinfo") if str(p) == "/proc/cpuinfo" else real_path(p, *a)

    (tmp_path / "cpuinfo").write_text(text, encoding="utf-8")
    monkeypatch.setattr(hardware, "Path", fake)
    cpu = hardware._cpu_info([])
    assert cpu.amx and "amx_bf16" in cpu.bf16_flags


def test_probe_survives_bitsandbytes_raising(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    info = hardware._bitsandbytes_info()
    assert not info.available and "not installed" in info.reason


def test_selecting_a_gpu():
    d = fake_device("rtx4090", "rtx3060")
    assert d.gpu.name.endswith("4090") and len(d.gpus) == 2
    d1 = d.select(1)
    assert d1.gpu.name.endswith("3060") and d1.gpu.index == 1 and d1.capability == (8, 6)
    assert "[GPU 1 of 2]" in d1.summary()
    with pytest.raises(IndexError):
        d.select(2)
    with pytest.raises(KeyError):
        fake_device("rtx9999")


def test_gpu_index_selects_the_gpu_the_advice_is_about():
    d = fake_device("rtx4090", "t4")
    assert d.for_gpu_index(-1) is d and d.for_gpu_index(0) is d  # automatic is the first GPU
    assert d.for_gpu_index(1).gpu.name == "Tesla T4"
    assert d.select(1).for_gpu_index(-1).gpu.index == 0  # automatic is GPU 0 whatever was selected before
    assert d.for_gpu_index(5).gpu.index == 0 and not d.gpu_index_valid(5) and d.gpu_index_valid(-1)
    cpu = fake_device("cpu")
    assert cpu.for_gpu_index(3) is cpu
    assert _about(advise(d, _config("bf16")), "precision.training") is None  # RTX 4090: bf16 is fine
    assert _about(advise(d, _config("bf16", precision__gpu_index=1)), "precision.training") == ("error", F16)
    (a,) = [a for a in advise(d, _config("bf16", precision__gpu_index=1)) if a.level == "error"]
    assert "Tesla T4" in a.message
    assert _about(advise(d, _config("bf16", precision__gpu_index=0)), "precision.training") is None


def test_a_missing_gpu_is_an_error_with_a_fix():
    d = fake_device("rtx3060", "rtx4090")
    (a,) = [a for a in advise(d, _config(precision__gpu_index=2)) if a.code == "gpu_missing"]
    assert a.level == "error" and a.topic == "precision.gpu_index" and a.suggestion == {"precision.gpu_index": -1}
    assert a.message == (
        "GPU 2 was chosen but this machine has 2 GPUs (0: NVIDIA GeForce RTX 3060, 1: NVIDIA GeForce RTX 4090); "
        "choose one on the Model & Precision page."
    )
    assert not [a for a in advise(d, _config(precision__gpu_index=1)) if a.code == "gpu_missing"]
    (one,) = [a for a in advise(fake_device("rtx3060"), _config(precision__gpu_index=1)) if a.level == "error"]
    assert "this machine has 1 GPU (0: NVIDIA GeForce RTX 3060)" in one.message
    (cpu,) = [a for a in advise(fake_device("cpu"), _config("fp32", precision__gpu_index=0)) if a.level == "error"]
    assert cpu.code == "gpu_missing" and "no GPU that PyTorch can use" in cpu.message
    assert not [a for a in advise(fake_device("cpu"), _config("fp32")) if a.level == "error"]


def test_cli_check_prints_the_same_advice(capsys):
    from guitrainer.cli import build_parser, main, resolve_config

    argv = ["--preset", DEMO_PRESET, "--set", "precision.training=fp16", "--check"]
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0
    assert "# device: " + hardware.probe().summary() in out.splitlines()
    expected = advise(hardware.probe(), resolve_config(build_parser().parse_args(argv)))
    assert any(a.code == "fp16_on_cpu" for a in expected)
    for a in expected:
        line = f"# {a.level}: {a.message}" + (f" (suggested: {a.suggestion_text})" if a.suggestion_text else "")
        assert line in out.splitlines()


def test_probe_matches_torch_on_a_gpu():
    """Runs only where CUDA exists (skips cleanly here): the probe's facts agree with torch's own."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    info = hardware.collect()
    assert info.kind == "cuda" and len(info.gpus) == torch.cuda.device_count()
    g = info.gpu
    assert g.capability == torch.cuda.get_device_capability(0)
    assert g.total_memory == torch.cuda.get_device_properties(0).total_memory
    assert g.free_memory is not None and 0 < g.free_memory <= g.total_memory
    assert g.bf16_native == (g.capability >= (8, 0))
    assert g.kernels_in_build is True  # torch ran on it, so its build has the kernels
    assert info.cuda_version == torch.version.cuda


# --------------------------------------------------------------------------- issue 17: device classes


def test_gpu_facts_are_decided_from_what_the_device_reports():
    # [tu11x] the same compute capability 7.5 with and without tensor cores: by SM count or product name
    assert not fake_device("tu117_unnamed").gpu.tensor_cores and fake_device("t4").gpu.tensor_cores
    assert not fake_device("t1000").gpu.tensor_cores and not fake_device("mx450").gpu.tensor_cores
    # [p61] the one Pascal with full-rate fp16
    assert fake_device("p100").gpu.fp16_fast and not fake_device("gtx1080").gpu.fp16_fast
    # [rdna] the gfx name is shown, not a meaningless "sm_103"
    rx = fake_device("rx6800")
    assert rx.gpu.arch == "gfx1030" and "gfx1030 (RDNA2)" in rx.summary()
    (a,) = [a for a in advise(rx, _config("bf16")) if a.topic == "precision.training"]
    assert "gfx1030" in a.message and "RDNA3" in a.message
    assert fake_device("arc_a770").kind == "xpu"


def test_pascal_fp16_says_what_it_still_buys():
    (a,) = [a for a in advise(fake_device("gtx1080"), _config("fp16")) if a.topic == "precision.training"]
    assert a.code == "fp16_slow_pascal" and "memory" in a.message and a.suggestion == {"precision.training": "fp32"}


def test_install_hint_gives_the_build_that_supports_the_card_and_says_older():
    (a,) = [a for a in advise(fake_device("gtx1080_cu130"), _config("fp32")) if a.code == "torch_arch_missing"]
    assert "older than this PyTorch build" in a.message  # cu130 has nothing below sm_75
    assert a.suggestion_text.endswith("/whl/cu126") and "2.13.0+cu126" in a.suggestion_text
    assert "RFC pytorch/pytorch#190385" in a.message  # where the end of the cu126 builds is announced
    (b,) = [a for a in advise(fake_device("rtx5090_cu126"), _config("fp32")) if a.code == "torch_arch_missing"]
    assert "newer than this PyTorch build" in b.message and b.suggestion_text.endswith("/whl/cu130")


@pytest.mark.parametrize(
    ("device", "version", "backend", "level"),
    [
        ("cpu", "0.49.2", "cpu", "error"),  # [bnb] CPU 8-bit optimizer kernels from 0.50
        ("cpu", "0.50.0", "cpu", "warning"),
        ("rx7900", "0.48.2", "rocm", "error"),  # ROCm wheels from 0.49
        ("rx7900", "0.49.1", "rocm", None),
        ("rtx5090", "0.45.2", "cuda", "error"),  # sm_120 kernels from 0.45.3
        ("rtx5090", "0.45.3", "cuda", None),
        ("arc_a770", "0.47.0", "xpu", "error"),  # XPU 8-bit optimizers from 0.48
        ("arc_a770", "0.48.0", "xpu", None),
        ("rtx3060", "0.43.0", "cuda", None),  # Ampere: any version
    ],
)
def test_eight_bit_status_follows_the_bitsandbytes_version(device, version, backend, level):
    d = fake_device(device, bitsandbytes=BitsAndBytesInfo(True, version, backend))
    assert rules.eight_bit_status(d)[0] == level


@pytest.mark.parametrize(
    ("device", "version", "hip", "level"),
    [
        # [bnb] bitsandbytes loads the ROCm library matching torch's HIP version; its 0.49 libraries have gfx90a,
        # gfx942, gfx1100, gfx1101 (+ gfx950, gfx115x, gfx120x from ROCm 6.4 / 7.0); 0.50's add gfx1102 / gfx1103 /
        # gfx1152 / gfx1153, and only its ROCm 7.14 library has gfx908 and gfx1030-gfx1036; none has gfx906
        ("rx7900", "0.49.2", "7.2", None),
        ("mi250", "0.49.2", "6.3", None),
        ("rx6800", "0.49.2", "7.2", "error"),  # RDNA2: no 0.49 library has it
        ("rx6800", "0.50.2", "7.2", "error"),  # PyTorch's rocm7.2 wheels load the 7.2 library: no gfx1030
        ("rx6800", "0.50.2", "7.14", None),  # a torch built on ROCm 7.14 (AMD's wheels) loads the one that has it
        ("rx6700xt", "0.50.2", "7.14", None),  # gfx1031 too
        ("mi100", "0.50.2", "7.2", "error"),
        ("mi100", "0.50.2", "7.14", None),
        ("mi50", "0.50.2", "7.14", "error"),  # gfx906: in no published build
        ("rx7900", "0.48.2", "7.2", "error"),  # no ROCm in the PyPI wheels before 0.49
    ],
)
def test_eight_bit_status_checks_the_rocm_architecture(device, version, hip, level):
    d = fake_device(device, bitsandbytes=BitsAndBytesInfo(True, version, "rocm"), hip_version=hip)
    got, reason = rules.eight_bit_status(d)
    assert got == level, reason
    if device == "rx6800" and level == "error" and version.startswith("0.50"):
        assert "7.14" in reason  # it says which library has the kernels


def test_paged_optimizers_page_on_intel_gpus_from_bitsandbytes_050():
    """[bnb] PR #1898 "Enable Paged Optimizer Support for XPU", first released in 0.50.0."""
    paged = _config(optimizer="PagedAdamW8bit")
    assert _about(advise(fake_device("arc_a770"), paged), "optimizer.name") is None  # 0.50.2
    old = fake_device("arc_a770", bitsandbytes=BitsAndBytesInfo(True, "0.49.2", "xpu"))
    (a,) = [a for a in advise(old, paged) if a.topic == "optimizer.name"]
    assert (a.level, a.suggestion) == ("warning", {"optimizer.name": "AdamW8bit"}) and "0.50" in a.message
    (c,) = [a for a in advise(fake_device("cpu"), paged) if a.topic == "optimizer.name"]
    assert c.code == "paged_without_cuda"  # nothing to page to from a CPU


def test_mps_needs_macos_14_from_torch_210():
    """[mps] torch 2.10+ on macOS 13 finds no MPS device (pytorch/pytorch#164943): the Mac trains on its CPU, and
    the advice says why; torch 2.8 still runs MPS there."""
    d = fake_device("m2_macos13_torch213")
    assert d.kind == "cpu" and not d.mps.usable and "macOS 14" in d.mps.unsupported
    (a,) = [a for a in advise(d, _config("fp32")) if a.code == "mps_needs_macos14"]
    assert a.level == "warning" and "macOS" in a.message
    assert "not usable" in dict(d.facts())["Apple GPU (MPS)"]
    assert fake_device("m2_macos13").kind == "mps"


def test_probe_reads_amx_fp16_from_torch(monkeypatch):
    """AMX-FP16 never shows in /proc/cpuinfo (Linux cpufeatures.h gives X86_FEATURE_AMX_FP16 no name): torch's CPUID
    helper reports it."""
    _fake_torch(monkeypatch)
    sys.modules["torch"].cpu = types.SimpleNamespace(_is_amx_fp16_supported=lambda: True)
    assert hardware.collect().cpu.amx_fp16 is True
    assert "AMX-FP16 (fp16 matrix tiles)" in dict(fake_device("cpu_gnr").facts())


def test_sdxl_vae_note_states_the_estimators_cost_and_the_fp16_fixed_vae():
    from guitrainer.base import units
    from guitrainer.core.memory import estimate

    cfg = _config("fp16", model__family="sdxl", dataset__resolution=1024, precision__cache_latents=False,
                  precision__gradient_checkpointing=True)
    (a,) = [a for a in advise(fake_device("t4"), cfg) if a.code == "sdxl_vae_fp32"]
    cost = estimate.sdxl_vae_fp32_cost(cfg)
    assert cost > 1 << 30  # weights 83.7 M x 2 more bytes, plus the VAE encoder's activations at 1024 px
    assert units.format_bytes(cost) in a.message and "sdxl-vae-fp16-fix" in a.message


def test_fp8_base_weights_advice():
    fp8 = dict(precision__base_weights="fp8", precision__gradient_checkpointing=True)
    (mps,) = [a for a in advise(fake_device("m3"), _config("bf16", **fp8)) if a.topic == "precision.base_weights"]
    assert mps.level == "error" and mps.suggestion == {"precision.base_weights": "auto"}
    old = [a for a in advise(fake_device("rtx3060", torch_version="2.0.1"), _config("bf16", **fp8))
           if a.topic == "precision.base_weights"]
    assert [a.code for a in old] == ["fp8_old_torch"]
    ok = [a for a in advise(fake_device("rtx3060"), _config("bf16", **fp8)) if a.topic == "precision.base_weights"]
    assert [a.level for a in ok] == ["info"] and "half of their memory" in ok[0].message
    # fp32 training: 4 bytes -> 1 saves three quarters; a GPU's AMP is the faster way to use fp8 weights, a CPU's
    # is not (the lab measured fp32 + fp8 fastest on a CPU), so only the GPU is told
    gpu = [a for a in advise(fake_device("rtx3060"), _config("fp32", **fp8)) if a.topic == "precision.base_weights"]
    assert [a.code for a in gpu] == ["fp8_with_fp32", "fp8_caveat"] and "three quarters" in gpu[1].message
    cpu = [a for a in advise(fake_device("cpu"), _config("fp32", **fp8)) if a.topic == "precision.base_weights"]
    assert [a.code for a in cpu] == ["fp8_caveat"]
    # [tu11x] / [p61]: where fp32 is the best the card does, fp16 / bf16 AMP is not "the faster way" to use fp8
    for name in ("gtx1660", "gtx1080", "t1000"):
        codes = [a.code for a in advise(fake_device(name), _config("fp32", **fp8)) if a.topic == "precision.base_weights"]
        assert codes == ["fp8_caveat"], name
    # the caveat says what fp8 storage costs in speed, as measured in bench/RESULTS.md ("Precision lab", fp8 rows)
    assert "slower" in ok[0].message and "our bench" in ok[0].message
    # Intel GPUs: float8 operators only from torch 2.10 (pytorch/pytorch#169571; intel/torch-xpu-ops#1939)
    (xpu,) = [a for a in advise(fake_device("arc_a770", torch_version="2.9.1+xpu"), _config("bf16", **fp8))
              if a.topic == "precision.base_weights"]
    assert xpu.level == "error" and xpu.code == "fp8_xpu_old_torch" and "2.10" in xpu.message
    assert [a.level for a in advise(fake_device("arc_a770"), _config("bf16", **fp8))
            if a.topic == "precision.base_weights"] == ["info"]
    # without checkpointing the widened copies are kept for the backward pass (tracked: more memory than without fp8)
    bare = [a for a in advise(fake_device("rtx3060"), _config("bf16", precision__base_weights="fp8",
                                                               precision__gradient_checkpointing=False))
            if a.topic == "precision.base_weights"]
    assert bare[0].code == "fp8_without_checkpointing" and bare[0].suggestion == {"precision.gradient_checkpointing": True}


def test_bf16_lora_weights_advice():
    big = _config("bf16", precision__lora_weights="bf16", network__rank=256, network__alpha=256.0)
    assert not [a for a in advise(fake_device("rtx4090"), big) if a.topic == "precision.lora_weights"]
    small = _config("bf16", precision__lora_weights="bf16")
    assert [a.code for a in advise(fake_device("rtx4090"), small) if a.topic == "precision.lora_weights"] == [
        "bf16_lora_small"]
    on_turing = [a.code for a in advise(fake_device("t4"), _config("fp16", precision__lora_weights="bf16"))
                 if a.topic == "precision.lora_weights"]
    assert on_turing == ["bf16_lora_emulated", "bf16_lora_fp16"]


@pytest.mark.parametrize("device_name", sorted(PRECISION_TABLE))
def test_the_picker_notes_and_the_advice_agree(device_name, tmp_path):
    """The choice marked "recommended here" is one the advice does not talk the user out of, and a choice the
    advice refuses is marked "not supported here" (one decision, shown in two places)."""
    from guitrainer.core.precision.choice_notes import choice_notes
    from guitrainer.core.precision.measurements import MeasurementStore

    store = MeasurementStore(tmp_path / "none.json")
    device = fake_device(device_name)
    for family in ("demo", "sd15"):
        cfg = _config("fp32", model__family=family, model__base="/models/m.safetensors")
        notes = choice_notes(device, cfg, store)
        (recommended,) = [v for v, n in notes.items() if n.kind == "recommended"]
        trial = _config(recommended, model__family=family, model__base="/models/m.safetensors")
        about = [a for a in advise(device, trial, store) if a.topic == "precision.training"]
        assert not [a for a in about if a.suggestion.get("precision.training", recommended) != recommended], about
        for value, note in notes.items():
            refused = _about(advise(device, _config(value, model__family=family, model__base="/m"), store),
                             "precision.training")
            assert (note.kind == "error") == (refused is not None and refused[0] == "error"), (value, note)
