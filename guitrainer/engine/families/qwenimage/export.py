"""Qwen-Image LoRA files, in the two layouts the readers take, written from our peft LoRA and read back into it, and
the file's metadata. Qwen-Image's released files, ComfyUI's model and diffusers' all use diffusers' module names, so
neither layout fuses or splits anything:

* ``"kohya"`` — ``lora_unet_<module with _>`` (``lora_unet_transformer_blocks_0_attn_to_q``) with ``lora_down`` /
  ``lora_up`` / ``alpha``: what musubi-tuner (kohya's Qwen-Image trainer, ``networks.lora_qwen_image``) writes;
  ComfyUI reads it (``model_lora_keys_unet``'s generic loop names every weight ``lora_unet_<path>``) and so does
  diffusers (``QwenImageLoraLoaderMixin``: ``_convert_non_diffusers_qwen_lora_to_diffusers`` re-dots the names and
  folds the alpha in).
* ``"diffusers"`` — ``diffusion_model.<module>.lora_A.weight`` / ``.lora_B.weight`` / ``.alpha``: what ai-toolkit and
  diffusion-pipe write; ComfyUI reads it (the generic ``diffusion_model.<path>`` spelling and its QwenImage branch)
  and so does diffusers (the same converter strips ``diffusion_model.``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.engine import flow_matching
from guitrainer.engine.families import diffusers_lora
from guitrainer.engine.families.flow_family import unwrapped
from guitrainer.engine.families.flux1 import export as flux_export
from guitrainer.engine.families.flux1.convert import Piece

IMPLEMENTATION = "https://github.com/QwenLM/Qwen-Image"  # musubi-tuner's modelspec


def pieces_of(denoiser: nn.Module) -> tuple[Piece, ...]:
    """Every Linear of the blocks as a module of its own (the LoRA's modules in kohya's file: nothing is fused)."""
    names = (diffusers_lora.own_name(n).removesuffix(".base_layer") for n, m in unwrapped(denoiser).named_modules()
             if isinstance(m, nn.Linear) and ".lora_" not in n)  # a LoRA-wrapped layer's Linear is its base_layer
    return tuple(Piece(n, (n,)) for n in dict.fromkeys(names) if n.startswith("transformer_blocks."))


def kohya_state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA as ``lora_unet_<module>`` (``"kohya"``; see the module docstring)."""
    return flux_export.kohya_state_dict(denoiser, (), alpha, to_cpu=to_cpu, pieces=pieces_of(denoiser))


def diffusers_state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA as ``diffusion_model.<diffusers module>.lora_A/B.weight`` + ``.alpha`` (``"diffusers"``)."""
    return diffusers_lora.state_dict(denoiser, alpha, to_cpu=to_cpu)


def load_lora_file(path: Path, network: NetworkConfig, denoiser: nn.Module, skipped: list[str]) -> int:
    """Continue from LoRA: a Qwen-Image file of either layout into the injected LoRA (modules matching none go to
    ``skipped``). Plain LoRA only."""
    return diffusers_lora.load_lora_file(path, network, denoiser, skipped, label="Qwen-Image",
                                         kohya_pieces=pieces_of(denoiser))


def metadata(config: TrainingConfig, settings: flow_matching.FlowSettings) -> dict[str, str]:
    """Qwen-Image's part of the file's metadata, under the names musubi-tuner (kohya's Qwen-Image trainer) writes."""
    values: dict[str, Any] = {
        "ss_base_model_version": "qwen_image",  # musubi-tuner dataset/architectures.py, ai-toolkit
        "ss_network_module": "networks.lora_qwen_image",
        "modelspec.architecture": "Qwen-Image/lora",
        "modelspec.implementation": IMPLEMENTATION,
        "ss_timestep_sampling": settings.timestep_sampling,
        "ss_discrete_flow_shift": settings.shift,
        "ss_sigmoid_scale": settings.sigmoid_scale,
        "ss_logit_mean": settings.logit_mean,
        "ss_logit_std": settings.logit_std,
        "ss_model_prediction_type": settings.model_prediction_type,
        "ss_weighting_scheme": settings.weighting_scheme,
    }
    return {k: str(v) for k, v in values.items()}
