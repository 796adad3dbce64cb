"""The Chroma LoRA file: kohya's names in BFL's layout (``lora_unet_double_blocks_0_img_attn_qkv``…), written from
our split peft LoRA and read back into it, and the file's metadata.

The layout is Flux's (:mod:`guitrainer.engine.families.flux1.export` writes and reads it: fused q/k/v and
``linear1`` as one block-diagonal LoRA whose alpha makes every reader's merge equal the trained delta) over
Chroma's table (:mod:`.convert`), which has no modulation Linears. It is what sd-scripts' ``networks/lora_flux.py``
writes for ``--model_type chroma`` and what ComfyUI reads: its ``model_lora_keys_unet`` names every weight of the
loaded model ``lora_unet_<path with _>``, and Chroma's model has BFL's paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.engine import flow_matching
from guitrainer.engine.families.chroma import convert
from guitrainer.engine.families.flux1 import export as flux_export

IMPLEMENTATION = "https://huggingface.co/lodestones/Chroma"  # sd-scripts sai_model_spec.py IMPL_CHROMA


def _pieces(denoiser: nn.Module) -> tuple[convert.Piece, ...]:
    inner = denoiser.module if isinstance(denoiser, nn.parallel.DistributedDataParallel) else denoiser
    return convert.pieces_of(inner)


def kohya_state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA in kohya's Chroma layout (detached; on the CPU unless ``to_cpu`` is False)."""
    return flux_export.kohya_state_dict(denoiser, (), alpha, to_cpu=to_cpu, pieces=_pieces(denoiser))


def load_kohya_lora(
    sd: Mapping[str, torch.Tensor], denoiser: nn.Module, *, strict: bool = True, skipped: list[str] | None = None
) -> int:
    """A kohya Chroma state dict (ours, sd-scripts') into the injected split peft LoRA."""
    return flux_export.load_kohya_lora(sd, denoiser, (), strict=strict, skipped=skipped, pieces=_pieces(denoiser))


def load_lora_file(path: Path, network: NetworkConfig, denoiser: nn.Module, skipped: list[str]) -> int:
    """Continue from LoRA: a kohya Chroma file into the injected split LoRA (modules matching none to ``skipped``)."""
    return flux_export.load_lora_file(path, network, denoiser, (), skipped, pieces=_pieces(denoiser), label="Chroma")


def metadata(config: TrainingConfig, settings: flow_matching.FlowSettings, *, apply_t5_attn_mask: bool) -> dict[str, str]:
    """Chroma's part of the file's metadata, under sd-scripts' names (its Flux trainer's keys, ``ss_model_type``
    "chroma" as ``--model_type chroma`` writes it; every value through ``str()``)."""
    values: dict[str, Any] = {
        "ss_base_model_version": "chroma",
        "ss_model_type": "chroma",
        "ss_network_module": "networks.lora_flux",
        "modelspec.architecture": "chroma/lora",
        "modelspec.implementation": IMPLEMENTATION,
        "ss_timestep_sampling": settings.timestep_sampling,
        "ss_discrete_flow_shift": settings.shift,
        "ss_sigmoid_scale": settings.sigmoid_scale,
        "ss_logit_mean": settings.logit_mean,
        "ss_logit_std": settings.logit_std,
        "ss_model_prediction_type": settings.model_prediction_type,
        "ss_weighting_scheme": settings.weighting_scheme,
        "ss_guidance_scale": 0.0,  # Chroma has no guidance input (sd-scripts: --guidance_scale 0.0 for Chroma)
        "ss_apply_t5_attn_mask": apply_t5_attn_mask,
    }
    return {k: str(v) for k, v in values.items()}



