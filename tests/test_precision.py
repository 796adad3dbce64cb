"""core.hardware + core.precision: the rule table on fake devices, the real probe, and its failure modes."""

from __future__ import annotations

import sys
import types

import pytest
from helpers import FAKE_DEVICES, config_with, fake_device

from guitrainer.config import OPTIMIZERS, TrainingConfig
from guitrainer.core import hardware, precision
from guitrainer.core.hardware import BitsAndBytesInfo, DeviceInfo, arch_supported
from guitrainer.core.precision import Advice, advise, save_overflow_advice
from guitrainer.presets import DEMO_PRESET

# (level, suggested value) of the worst advice about `precision.training`; None = no advice
B, F16, F32 = "bf16", "fp16", "fp32"
GOOD = None
CUDA_BF16 = {F32: ("info", B), F16: ("info", B), B: GOOD}  # Ampere and newer
CUDA_TURING = {F32: ("info", F16), F16: GOOD, B: ("error", F16)}  # sm_75 with tensor cores
PRECISION_TABLE: dict[str, dict[str, tuple[str, str | None] | None]] = {
    "cpu": {F32: GOOD, F16: ("warning", F32), B: ("warning", F32)},
    "cpu_bf16": {F32: GOOD, F16: ("warning", B), B: GOOD},
    "gtx1080": {F32: GOOD, F16: ("info", None), B: ("error", F16)},
    "gtx1660": {F32: GOOD, F16: ("warning", F32), B: ("error", F16)},
    "t4": CUDA_TURING,
    "rtx2080ti": CUDA_TURING,
    "rtx3060": CUDA_BF16,
    "rtx4090": CUDA_BF16,
    "h100": CUDA_BF16,
    "rtx5090": CUDA_BF16,
    "rtx5090_no_sm120": CUDA_BF16,
    "mps": {F32: GOOD, F16: GOOD, B: GOOD},
    "mps_old": {F32: GOOD, F16: ("error", F32), B: ("error", F32)},
}
EIGHT_BIT = ("AdamW8bit", "Lion8bit")
CUDA_OPT = dict.fromkeys(OPTIMIZERS)  # every optimizer fine on a CUDA card with CUDA bitsandbytes
OPTIMIZER_TABLE: dict[str, dict[str, tuple[str, str] | None]] = {
    **{d: CUDA_OPT for d in ("gtx1080", "gtx1660", "t4", "rtx2080ti", "rtx3060", "rtx4090", "h100", "rtx5090",
                             "rtx5090_no_sm120")},
    **{d: {"AdamW": None, "Adafactor": None, **dict.fromkeys(EIGHT_BIT, ("warning", "AdamW")),
           "PagedAdamW8bit": ("warning", "AdamW")} for d in ("cpu", "cpu_bf16")},
    **{d: {"AdamW": None, "Adafactor": None, **dict.fromkeys(EIGHT_BIT, ("error", "AdamW")),
           "PagedAdamW8bit": ("error", "AdamW")} for d in ("mps", "mps_old")},
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
    assert set(PRECISION_TABLE) == set(OPTIMIZER_TABLE) == set(FAKE_DEVICES) - {"gtx980"}


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


def test_bf16_on_turing_is_an_error_suggesting_fp16_amp():
    (a,) = [a for a in advise(fake_device("t4"), _config("bf16")) if a.topic == "precision.training"]
    assert a.level == "error" and a.code == "bf16_not_native"
    assert a.suggestion == {"precision.training": "fp16"}
    assert a.suggestion_text == "use fp16 AMP"
    assert "Tesla T4" in a.message and "7.5" in a.message


def test_gtx1660_has_no_tensor_cores_and_its_fp16_caveat():
    d = fake_device("gtx1660")
    assert d.gpu.is_gtx16 and not d.fp16_tensor_cores
    (a,) = [a for a in advise(d, _config("fp16")) if a.topic == "precision.training"]
    assert a.code == "fp16_gtx16" and "NaN" in a.message
    # fp32 on a card without tensor cores is not nagged about AMP
    assert _about(advise(d, _config("fp32")), "precision.training") is None


def test_torch_build_without_the_cards_architecture():
    d = fake_device("rtx5090_no_sm120")
    assert d.gpu.kernels_in_build is False
    errors = [a for a in advise(d, _config("bf16")) if a.code == "torch_arch_missing"]
    assert len(errors) == 1 and errors[0].level == "error"
    assert "sm_120" in errors[0].message
    assert "--index-url https://download.pytorch.org/whl/cu128" in errors[0].suggestion_text
    assert errors[0].suggestion == {}  # no setting fixes it: the Start button stays blocked
    assert not [a for a in advise(fake_device("rtx5090"), _config("bf16")) if a.level == "error"]
    assert "cu126" in precision.torch_install_hint((6, 1))  # Pascal: the cu128 wheels dropped it


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


def test_paged_optimizer_without_cuda_suggests_8bit_when_that_works():
    # a non-CUDA device where 8-bit works (here: patched status) gets AdamW8bit, not AdamW
    d = fake_device("cpu")
    original = precision.eight_bit_status
    try:
        precision.eight_bit_status = lambda device: (None, "")
        (a,) = [a for a in advise(d, _config(optimizer="PagedAdamW8bit")) if a.topic == "optimizer.name"]
    finally:
        precision.eight_bit_status = original
    assert a.code == "paged_without_cuda" and a.level == "warning"
    assert a.suggestion == {"optimizer.name": "AdamW8bit"}


def test_sdxl_vae_is_kept_fp32_under_fp16():
    d = fake_device("t4")
    sdxl = advise(d, _config("fp16", model__family="sdxl"))
    assert [a.code for a in sdxl if a.code == "sdxl_vae_fp32"] == ["sdxl_vae_fp32"]
    (a,) = [a for a in sdxl if a.code == "sdxl_vae_fp32"]
    assert a.level == "info" and a.suggestion == {}
    assert not [a for a in advise(d, _config("fp16", model__family="sd15")) if a.code == "sdxl_vae_fp32"]
    assert not [a for a in advise(fake_device("rtx4090"), _config("bf16", model__family="sdxl")) if a.code == "sdxl_vae_fp32"]


def test_mps_limits():
    d = fake_device("mps")
    assert d.kind == "mps" and d.bf16_native
    old = fake_device("mps", torch_version="2.5.1")  # fp16 yes, bf16 not before 2.6
    (a,) = [a for a in advise(old, _config("bf16")) if a.topic == "precision.training"]
    assert (a.level, a.suggestion) == ("error", {"precision.training": "fp16"})
    assert "2.6" in a.message and "macOS 14" in a.message


def test_cpu_advice_depends_on_the_model():
    d = fake_device("cpu")
    demo = [a for a in advise(d, _config("fp32")) if a.code == "cpu_training"]
    real = [a for a in advise(d, _config("fp32", model__base="/models/sd15.safetensors", model__family="sd15"))
            if a.code == "cpu_training"]
    assert demo[0].level == "info" and real[0].level == "warning"
    unused = fake_device("cpu", nvidia_gpu_unused=True)
    assert any(a.code == "torch_cpu_build" and "pip install" in a.suggestion_text for a in advise(unused, _config("fp32")))


def test_advice_sorted_and_worst():
    advice = advise(fake_device("mps_old"), _config("bf16", "AdamW8bit"))
    levels = [a.level for a in advice]
    assert levels == sorted(levels, key=precision.LEVELS.index)
    assert precision.worst(advice) == "error"
    assert precision.worst([]) is None
    assert advise(None, _config()) == []
    with pytest.raises(ValueError, match="level"):
        Advice("fatal", "x")


def test_recommended_training():
    expect = {"cpu": "fp32", "cpu_bf16": "bf16", "gtx1080": "fp16", "gtx1660": "fp32", "t4": "fp16",
              "rtx3060": "bf16", "h100": "bf16", "mps": "bf16", "mps_old": "fp32"}
    for name, value in expect.items():
        assert precision.recommended_training(fake_device(name)) == value, name


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

    assert tuple(c.value for c in precision.TRAINING_CHOICES) == PRECISIONS
    assert {c.value for c in precision.SAVE_CHOICES} == set(PRECISIONS)
    assert all(c.explanation and "\n" not in c.explanation for c in precision.TRAINING_CHOICES + precision.SAVE_CHOICES)


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
        "choose one on the Model page."
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
