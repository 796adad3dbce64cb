"""Advice: one finding about a config on a device (a level, plain words, a one-click fix), and how its
suggestion reads. Shared by the precision rules, the VRAM hints and the pages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from guitrainer.config.precision_choices import choice_label

Level = Literal["info", "warning", "error"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info")  # most severe first


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
        faster: the training precision this advice says is the fastest here ("" when it makes no speed claim):
            the claim a precision-lab measurement can confirm or contradict (DESIGN §5).
        basis: the device fact that claim rests on, as a clause ("This CPU has AMX (bf16 matrix tiles)"), so a
            measurement that contradicts it can say which fact it overrode.
    """

    level: Level
    message: str
    suggestion: dict[str, Any] = field(default_factory=dict, hash=False)
    suggestion_text: str = ""
    code: str = ""
    topic: str = ""
    faster: str = ""
    basis: str = ""

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
