"""What a model family's published precision facts say about the chosen training precision.

A family whose authors released and train it in bf16 and whose activations are known to overflow fp16 (Flux:
diffusers PR #9097 and ComfyUI PR #8495 clamp its blocks to ±65504 in fp16; T5-XXL overflows in fp16,
transformers #9295) is warned about under fp16 AMP: the GradScaler skips every step whose gradients hold an
inf, and the blocks' clamps only keep inference from black images. Without bf16 on the card the advice says
what that costs and which way out exists; the facts and their sources live in ``core/families/<name>.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

from guitrainer.base.units import format_bytes
from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.families.registry import facts
from guitrainer.core.memory.specs import config_family
from guitrainer.core.precision.advice import Advice

TOPIC = "precision.training"


def _bf16_here(device: DeviceInfo) -> bool:
    gpu = device.gpu
    if gpu is not None:
        return bool(gpu.bf16_native)
    return device.kind != "mps"  # CPUs compute bf16 (slowly without bf16 instructions); Apple: fp16 is the fast half


def rule_family_precision(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """fp16 AMP on a family that overflows fp16; fp32 on a family released in bf16 (twice the weights' memory)."""
    known = facts(config_family(cfg))
    p = known.precision
    if p.recommended != "bf16":
        return
    label = known.label
    source = f" ({p.sources[0]})" if p.sources else ""
    if cfg.precision.training == "fp16" and p.fp16_overflows:
        if _bf16_here(device):
            yield Advice(
                "warning",
                f"{label} in fp16 AMP: {p.fp16_overflows} This device has bf16: use bf16 AMP.",
                {TOPIC: "bf16"}, suggestion_text="use bf16 AMP", code="family_fp16_overflows", topic=TOPIC,
            )
        else:
            yield Advice(
                "warning",
                f"{label} in fp16 AMP on a card without bf16: {p.fp16_overflows} Expect the GradScaler to skip "
                "steps (the Numerics tab names the block that overflowed); fp32 avoids it but needs twice the "
                "weights' memory, or store the frozen weights in fp8 and train in fp32.",
                code="family_fp16_no_bf16", topic=TOPIC,
            )
    if cfg.precision.training == "fp32" and known.spec is not None and device.gpu is not None:
        extra = format_bytes(2 * known.spec.denoiser)
        yield Advice(
            "info",
            f"{label} was released in {p.released}{source}; fp32 training holds its weights in 4 bytes each, "
            f"about {extra} more than bf16 for the transformer alone.",
            {TOPIC: "bf16"} if _bf16_here(device) else {},
            suggestion_text="use bf16 AMP" if _bf16_here(device) else "",
            code="family_released_bf16", topic=TOPIC,
        )
