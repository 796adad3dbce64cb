"""The precision settings' choices: each value, the name the user sees, and one line of explanation.

The config's ``choice_labels`` for these fields, the precision picker and the advice's suggestions are built
from these tables, so a name exists once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PrecisionChoice:
    value: str
    label: str
    explanation: str  # one line, for the picker


TRAINING_CHOICES: tuple[PrecisionChoice, ...] = (
    PrecisionChoice("fp32", "fp32", "Full precision everywhere: slowest and uses the most memory, but no surprises."),
    PrecisionChoice(
        "fp16", "fp16 AMP", "Half precision with a loss scaler: fast and light with tensor cores (NVIDIA RTX 20 and up), "
        "AMD cards, Apple GPUs with PyTorch 2.8+."
    ),
    PrecisionChoice(
        "bf16", "bf16 AMP", "Half precision with fp32's range, no scaler needed: NVIDIA RTX 30 and newer, AMD RDNA3 / "
        "Instinct, Intel Arc; CPUs with AVX512-BF16 or AMX on full-size models."
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
    PrecisionChoice(
        "int8", "int8: less memory, closer", "The UNet's or transformer's Linear weights in 8 bits with a scale per "
        "row (bitsandbytes' LLM.int8()): the memory of fp8 with about a quarter of its rounding error, somewhat "
        "slower. LLM.int8() (Dettmers et al. 2022) lost nothing on language models; on Flux, diffusers' "
        "quantisation comparison (2025) found 8-bit images hard to tell from bf16."
    ),
    PrecisionChoice(
        "nf4", "nf4: least memory", "The Linear weights in 4-bit NormalFloat with double quantisation, QLoRA-style: "
        "about a quarter of bf16, slower (dequantised at every use). QLoRA (Dettmers et al. 2023) matched 16-bit "
        "LoRA on language models; on Flux diffusers' comparison found 4-bit images more visibly different than "
        "8-bit, and its QLoRA guide trained Flux.1 dev in 9 GB instead of 26. For cards that fit nothing else."
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
