"""Advice: one finding about a config on a device (a level, plain words, a one-click fix), and the names of
the precision choices it suggests. Shared by the precision rules, the VRAM hints and the pages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

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
        "fp16", "fp16 AMP", "Half precision with a loss scaler: fast and light with tensor cores (NVIDIA RTX 20 and up), "
        "AMD cards, Apple M1/M2 with PyTorch 2.8+."
    ),
    PrecisionChoice(
        "bf16", "bf16 AMP", "Half precision with fp32's range, no scaler needed: NVIDIA RTX 30 and newer, AMD RDNA3 / "
        "Instinct, Intel Arc, Apple M3 and newer."
    ),
)

SAVE_CHOICES: tuple[PrecisionChoice, ...] = (
    PrecisionChoice("fp32", "fp32", "Exact and twice the size; rarely needed."),
    PrecisionChoice("fp16", "fp16", "What most tools expect, half the size of fp32; checked for overflow when saved."),
    PrecisionChoice("bf16", "bf16", "Same size as fp16 and never overflows; a few older tools cannot load it."),
)


BASE_WEIGHT_CHOICES: tuple[PrecisionChoice, ...] = (
    PrecisionChoice("auto", "Same as training", "The frozen UNet and text encoders in the training precision (fp32, fp16 or bf16)."),
    PrecisionChoice(
        "fp8", "fp8: less memory", "Frozen weights stored in 8 bits (e4m3) and widened layer by layer: half the weight "
        "memory of fp16 / bf16 (a quarter of fp32's), a small loss of quality (kohya's --fp8_base)."
    ),
)

LORA_WEIGHT_CHOICES: tuple[PrecisionChoice, ...] = (
    PrecisionChoice("fp32", "fp32", "The trainable LoRA weights, their gradients and the optimizer state in fp32: the safe default."),
    PrecisionChoice(
        "bf16", "bf16", "Half the LoRA's training memory, for very large ranks; tiny updates can be rounded away "
        "(kohya's --full_bf16)."
    ),
)

#: user-facing names of the values precision advice suggests; the config's ``choice_labels`` for these
#: fields are built from the same tables, so a name exists once
CHOICE_LABELS: dict[str, dict[str, str]] = {
    "precision.training": {c.value: c.label for c in TRAINING_CHOICES},
    "precision.save": {c.value: c.label for c in SAVE_CHOICES},
    "precision.base_weights": {c.value: c.label for c in BASE_WEIGHT_CHOICES},
    "precision.lora_weights": {c.value: c.label for c in LORA_WEIGHT_CHOICES},
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
