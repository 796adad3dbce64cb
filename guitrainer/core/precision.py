"""Precision choices and the rules that check them against the machine (DESIGN.md §4).

``advise(device, config)`` turns device facts (:class:`guitrainer.core.hardware.DeviceInfo`) and the
current :class:`~guitrainer.config.TrainingConfig` into a list of :class:`Advice`: a level, a sentence an
artist understands, and a suggested change (config path -> value) that the UI applies with one click.

Pure Python: no torch, no Qt. Each rule is a small function in :data:`RULES`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from guitrainer.core.hardware import DeviceInfo

if TYPE_CHECKING:  # annotations only: core never imports the config at run time (config imports core)
    from guitrainer.config import TrainingConfig

log = logging.getLogger(__name__)

Level = Literal["info", "warning", "error"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info")  # most severe first
FP16_MAX = 65504.0


@dataclass(frozen=True)
class PrecisionChoice:
    value: str
    label: str
    explanation: str  # one line, for the picker


TRAINING_CHOICES: tuple[PrecisionChoice, ...] = (
    PrecisionChoice("fp32", "fp32", "Full precision everywhere: slowest and uses the most memory, but no surprises."),
    PrecisionChoice(
        "fp16", "fp16 AMP", "Half precision with a loss scaler: fast and light on any NVIDIA card from 2018 (RTX 20 and up)."
    ),
    PrecisionChoice(
        "bf16", "bf16 AMP", "Half precision with fp32's range, no scaler needed: RTX 30 series and newer, Apple M-series."
    ),
)

SAVE_CHOICES: tuple[PrecisionChoice, ...] = (
    PrecisionChoice("fp32", "fp32", "Exact and twice the size; rarely needed."),
    PrecisionChoice("fp16", "fp16", "What most tools expect, half the size of fp32; checked for overflow when saved."),
    PrecisionChoice("bf16", "bf16", "Same size as fp16 and never overflows; a few older tools cannot load it."),
)


#: user-facing names of the values precision advice suggests; the config's ``choice_labels`` for these
#: fields are built from the same tables, so a name exists once
CHOICE_LABELS: dict[str, dict[str, str]] = {
    "precision.training": {c.value: c.label for c in TRAINING_CHOICES},
    "precision.save": {c.value: c.label for c in SAVE_CHOICES},
}


def choice_label(path: str, value: Any) -> str:
    """User-facing name of a suggested value, e.g. ("precision.training", "fp16") -> "fp16 AMP"."""
    return str(CHOICE_LABELS.get(path, {}).get(value, value))


def describe_suggestion(suggestion: Mapping[str, Any]) -> str:
    """``{"precision.training": "fp16"}`` -> ``"use fp16 AMP"``; ``{"precision.save": "bf16"}`` -> ``"save as bf16"``;
    ``{"precision.gradient_checkpointing": True}`` -> ``"turn on gradient checkpointing"``."""
    parts = []
    for path, value in suggestion.items():
        if path == "precision.save":
            parts.append(f"save as {choice_label(path, value)}")
        elif isinstance(value, bool):
            parts.append(f"turn {'on' if value else 'off'} {path.rpartition('.')[2].replace('_', ' ')}")
        else:
            parts.append(f"use {choice_label(path, value)}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Advice:
    """One finding about the config on this device.

    Attributes:
        level: "info", "warning" or "error" (an error means training would fail or be wrong).
        message: plain words for an artist.
        suggestion: config path -> value that fixes it (empty when no setting can).
        suggestion_text: the suggestion in words ("use fp16 AMP"), or an instruction such as an install command.
        code: stable identifier of the rule, e.g. "bf16_not_native" (for tests and logs).
        topic: what it is about: a config path ("precision.training", "optimizer.name") or "device".
    """

    level: Level
    message: str
    suggestion: dict[str, Any] = field(default_factory=dict, hash=False)
    suggestion_text: str = ""
    code: str = ""
    topic: str = ""

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"`level` must be one of {LEVELS}, got {self.level!r}")
        if self.suggestion and not self.suggestion_text:
            object.__setattr__(self, "suggestion_text", describe_suggestion(self.suggestion))


def _severity(a: Advice) -> int:
    return LEVELS.index(a.level)


def worst(advice: Iterable[Advice]) -> Level | None:
    """The most severe level among ``advice``, or None when there is none."""
    levels = [a.level for a in advice]
    return min(levels, key=LEVELS.index) if levels else None


# --------------------------------------------------------------------------- helpers


def torch_install_hint(capability: tuple[int, int] | None) -> str:
    """The pip command that installs a torch build with kernels for ``capability``.

    Blackwell (sm_100 / sm_120) needs CUDA 12.8 wheels; the CUDA 12.8 wheels dropped Maxwell, Pascal
    and Volta (sm_50 - sm_70), which still have CUDA 12.6 wheels.
    """
    index = "cu126" if capability is not None and capability < (7, 5) else "cu128"
    return f"pip install --upgrade torch torchvision --index-url https://download.pytorch.org/whl/{index}"


def recommended_training(device: DeviceInfo | None) -> str:
    """The training precision this device does best: bf16 where native, fp16 with tensor cores or MPS, else fp32."""
    if device is None:
        return "fp16"
    if device.kind == "cuda":
        if device.bf16_native:
            return "bf16"
        gpu = device.gpu
        return "fp16" if gpu is not None and not gpu.is_gtx16 else "fp32"
    if device.kind == "mps":
        mps = device.mps
        if mps is not None and mps.bf16:
            return "bf16"
        return "fp16" if mps is not None and mps.fp16_autocast else "fp32"
    return "bf16" if device.cpu.bf16_native else "fp32"


def training_choice_level(device: DeviceInfo | None, value: str) -> Level | None:
    """The worst level the training-precision rules give ``value`` on ``device`` (None: no objection)."""
    if device is None:
        return None
    return worst(_training_precision_advice(device, value))


def eight_bit_status(device: DeviceInfo) -> tuple[Level | None, str]:
    """Whether bitsandbytes' 8-bit optimizers work here: (None, "") when they do, else (level, reason)."""
    bnb = device.bitsandbytes
    if not bnb.available:
        return "error", f"bitsandbytes is not usable here ({bnb.reason or 'not installed'})"
    if device.kind == "mps":
        return "error", "bitsandbytes has no 8-bit optimizers for Apple GPUs"
    if device.kind == "cpu":
        return "warning", "on the CPU 8-bit optimizers run through bitsandbytes' slow fallback, and a CPU rarely runs out of memory"
    gpu = device.gpu
    if gpu is not None and gpu.capability < (6, 0):
        return "error", f"bitsandbytes' 8-bit optimizers need a GPU of compute capability 6.0 or newer; this one is {gpu.capability[0]}.{gpu.capability[1]}"
    if bnb.backend not in ("cuda", "rocm"):
        return "error", f"this bitsandbytes has no GPU support (backend: {bnb.backend}{', ' + bnb.reason if bnb.reason else ''})"
    return None, ""


# --------------------------------------------------------------------------- rules


def _rule_torch(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """torch missing, a build without the card's architecture, or a CPU build next to an NVIDIA GPU."""
    if not device.torch_ok:
        reason = dict(device.unknown).get("torch", "it could not be imported")
        yield Advice(
            "error",
            f"PyTorch is not available ({reason}), so nothing can be trained.",
            suggestion_text=torch_install_hint(None),
            code="torch_missing",
            topic="device",
        )
        return
    gpu = device.gpu
    if gpu is not None and gpu.kernels_in_build is False:
        yield Advice(
            "error",
            f"Your {gpu.name} ({gpu.arch}) is newer than this PyTorch build (torch {device.torch_version}, "
            f"CUDA {device.cuda_version or '?'}) knows: training would stop with \"no kernel image is available\". "
            "Install a PyTorch built for this card.",
            suggestion_text=torch_install_hint(gpu.capability),
            code="torch_arch_missing",
            topic="device",
        )
    if device.kind == "cpu" and device.nvidia_gpu_unused:
        yield Advice(
            "warning",
            "An NVIDIA graphics card seems to be installed, but this PyTorch is a CPU-only build, so training runs "
            "on the CPU. Install the CUDA build of PyTorch to use the card.",
            suggestion_text=torch_install_hint(None),
            code="torch_cpu_build",
            topic="device",
        )


def _rule_gpu_index(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """``precision.gpu_index`` names a GPU this machine does not have: the trainer would refuse to start."""
    from guitrainer.core.hardware import gpu_missing_message

    index = cfg.precision.gpu_index
    if not device.torch_ok or device.gpu_index_valid(index):
        return
    yield Advice(
        "error",
        gpu_missing_message(index, [g.name for g in device.gpus]) + ".",
        {"precision.gpu_index": -1},
        suggestion_text="train on the first GPU (automatic)" if device.gpus else "automatic (no GPU)",
        code="gpu_missing",
        topic="precision.gpu_index",
    )


def _rule_cpu_training(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    if device.kind != "cpu" or not device.torch_ok:
        return
    if cfg.model.base.strip() == "demo" or cfg.model.family == "demo":
        yield Advice(
            "info",
            "No GPU found: training runs on the CPU. That is fine for the built-in demo model.",
            code="cpu_training",
            topic="device",
        )
    else:
        yield Advice(
            "warning",
            "No GPU found: training a real Stable Diffusion model on the CPU takes many hours or days.",
            code="cpu_training",
            topic="device",
        )


def _rule_training_precision(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    return _training_precision_advice(device, cfg.precision.training)


def _training_precision_advice(device: DeviceInfo, choice: str) -> Iterable[Advice]:
    """What the rules say about training in ``choice`` on ``device``."""
    best = recommended_training(device)
    if device.kind == "cuda":
        yield from _cuda_precision_advice(device, choice, best)
    elif device.kind == "mps":
        yield from _mps_precision_advice(device, choice)
    else:
        yield from _cpu_precision_advice(device, choice, best)


def _cuda_precision_advice(device: DeviceInfo, choice: str, best: str) -> Iterable[Advice]:
    topic = "precision.training"
    gpu = device.gpu
    assert gpu is not None
    cap = f"{gpu.capability[0]}.{gpu.capability[1]}"
    if choice == "bf16" and not gpu.bf16_native:
        yield Advice(
            "error",
            f"Your {gpu.name} (compute capability {cap}) has no bf16 hardware; bf16 needs an RTX 30-series "
            "or newer card (8.0+). PyTorch would emulate it very slowly. fp16 AMP does the same job here.",
            {topic: "fp16"},
            code="bf16_not_native",
            topic=topic,
        )
    elif choice == "fp16" and gpu.is_gtx16:
        yield Advice(
            "warning",
            f"GTX 16-series cards ({gpu.name}) have no tensor cores and are known to produce NaN losses or black "
            "samples in fp16. If that happens, train in fp32 (it needs more memory).",
            {topic: "fp32"},
            code="fp16_gtx16",
            topic=topic,
        )
    elif choice == "fp16" and not gpu.tensor_cores:
        yield Advice(
            "info",
            f"Your {gpu.name} has no tensor cores: fp16 AMP saves memory but will not be much faster than fp32.",
            code="fp16_no_tensor_cores",
            topic=topic,
        )
    elif choice == "fp16" and gpu.bf16_native:
        yield Advice(
            "info",
            f"Your {gpu.name} does bf16 natively: bf16 AMP is as fast, needs no loss scaler and never overflows.",
            {topic: "bf16"},
            code="bf16_better",
            topic=topic,
        )
    elif choice == "fp32" and gpu.tensor_cores:
        yield Advice(
            "info",
            f"Your {gpu.name} has tensor cores: {choice_label(topic, best)} is about twice as fast as fp32 "
            "and uses much less memory, with the same results in practice.",
            {topic: best},
            code="fp32_slow",
            topic=topic,
        )


def _mps_precision_advice(device: DeviceInfo, choice: str) -> Iterable[Advice]:
    topic = "precision.training"
    mps = device.mps
    assert mps is not None
    if choice == "fp16" and not mps.fp16_autocast:
        yield Advice(
            "error",
            f"fp16 AMP on Apple GPUs needs PyTorch 2.5 or newer; this is {device.torch_version}. "
            "Use fp32, or update PyTorch.",
            {topic: "fp32"},
            code="mps_fp16_old_torch",
            topic=topic,
        )
    elif choice == "bf16" and not mps.bf16:
        fallback = "fp16" if mps.fp16_autocast else "fp32"
        yield Advice(
            "error",
            f"bf16 on Apple GPUs needs PyTorch 2.6+ and macOS 14+; this is PyTorch {device.torch_version} on "
            f"macOS {mps.macos_version or '?'}.",
            {topic: fallback},
            code="mps_bf16_unsupported",
            topic=topic,
        )


def _cpu_precision_advice(device: DeviceInfo, choice: str, best: str) -> Iterable[Advice]:
    topic = "precision.training"
    if choice == "fp16":
        yield Advice(
            "warning",
            "fp16 on the CPU works but is slow: CPUs have no fast fp16 math. "
            + ("This CPU does bf16 natively, so bf16 AMP is the better choice." if best == "bf16" else "fp32 is faster here."),
            {topic: best},
            code="fp16_on_cpu",
            topic=topic,
        )
    elif choice == "bf16" and not device.cpu.bf16_native:
        known = device.cpu.bf16_native is not None
        yield Advice(
            "warning",
            ("This CPU has no native bf16" if known else "Could not tell whether this CPU has native bf16")
            + " (AVX512-BF16 or AMX): bf16 is emulated and slower than fp32.",
            {topic: "fp32"},
            code="bf16_on_cpu_emulated",
            topic=topic,
        )


def _rule_sdxl_vae(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    if cfg.precision.training == "fp16" and cfg.model.family == "sdxl":
        yield Advice(
            "info",
            "SDXL's VAE overflows in fp16 (black or noisy images), so it is kept in fp32 automatically"
            + (" while latents are cached, then freed." if cfg.precision.cache_latents else "; that costs about 150 MB more."),
            code="sdxl_vae_fp32",
            topic="precision.training",
        )


def _rule_optimizer(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    name = cfg.optimizer.name
    topic = "optimizer.name"
    if name not in ("AdamW8bit", "Lion8bit", "PagedAdamW8bit"):
        return
    level, reason = eight_bit_status(device)
    if name == "PagedAdamW8bit" and device.kind != "cuda":
        yield Advice(
            "error" if level == "error" else "warning",
            "Paged optimizers move their state to system memory only from a CUDA GPU, so here paging has no effect"
            + (f"; also, {reason}." if reason else "."),
            {topic: "AdamW8bit" if level is None else "AdamW"},
            code="paged_without_cuda",
            topic=topic,
        )
        return
    if level is not None:
        yield Advice(
            level,
            f"{name}: {reason}. Plain AdamW works everywhere (it uses more memory for its state).",
            {topic: "AdamW"},
            code="eight_bit_unusable" if level == "error" else "eight_bit_cpu",
            topic=topic,
        )


RULES: tuple[Callable[[DeviceInfo, TrainingConfig], Iterable[Advice]], ...] = (
    _rule_torch,
    _rule_gpu_index,
    _rule_training_precision,
    _rule_sdxl_vae,
    _rule_optimizer,
    _rule_cpu_training,
)


def advise(device: DeviceInfo | None, config: TrainingConfig) -> list[Advice]:
    """Every piece of advice for ``config`` on ``device``, most severe first ([] while the device is unknown)."""
    if device is None:
        return []
    device = device.for_gpu_index(config.precision.gpu_index)  # the GPU chosen on the Model page
    out: list[Advice] = []
    for rule in RULES:
        try:
            out.extend(rule(device, config))
        except Exception:  # a broken rule must not take the picker down; it is logged with its traceback
            log.exception("precision rule %s failed", rule.__name__)
    return sorted(out, key=_severity)


def save_overflow_advice(report: Sequence[str] | Mapping[str, float], *, max_names: int = 3) -> Advice | None:
    """Advice for an fp16 save whose export check found values beyond ±65504.

    Args:
        report: names of the overflowing tensors, or name -> largest absolute value.
        max_names: how many names to quote in the message.
    Returns:
        An error-level Advice suggesting bf16 (fp32 also works), or None when nothing overflows.
    """
    names = list(report)
    if not names:
        return None
    shown = ", ".join(names[:max_names]) + (f" and {len(names) - max_names} more" if len(names) > max_names else "")
    peak = ""
    if isinstance(report, Mapping):
        top = max(float(v) for v in report.values())
        peak = f" (largest {top:.4g})"
    return Advice(
        "error",
        f"{len(names)} tensor{'s' if len(names) != 1 else ''} of the LoRA hold values beyond fp16's ±{FP16_MAX:g}{peak}: "
        f"{shown}. Saved as fp16 they would become infinite and break the LoRA. bf16 or fp32 keep them.",
        {"precision.save": "bf16"},
        suggestion_text="save as bf16 (or fp32)",
        code="fp16_save_overflow",
        topic="precision.save",
    )
