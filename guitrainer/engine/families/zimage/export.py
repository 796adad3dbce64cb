"""Z-Image LoRA files, in the two layouts the readers take, written from our peft LoRA and read back into it, and the
file's metadata.

* ``"diffusers"`` — ``diffusion_model.<diffusers module>.lora_A.weight`` / ``.lora_B.weight`` / ``.alpha``
  (``layers.0.attention.to_q``…): what ai-toolkit writes, what diffusers' ``ZImageLoraLoaderMixin`` reads
  (``_convert_non_diffusers_z_image_lora_to_diffusers`` strips ``diffusion_model.`` and folds the alpha in) and what
  ComfyUI reads (``model_lora_keys_unet``'s Lumina2 branch maps ``diffusion_model.<diffusers name>`` through
  ``z_image_to_diffusers``: ``to_q/k/v`` onto row slices of its fused ``attention.qkv``). The one file every reader
  takes; the Z-Image preset writes it.
* ``"kohya"`` — ``lora_unet_<original module>`` (``lora_unet_layers_0_attention_qkv``, ``…_attention_out``,
  ``…_feed_forward_w1``) with ``lora_down`` / ``lora_up`` / ``alpha``: ComfyUI's own names for its original-layout
  model (the generic loop of ``model_lora_keys_unet``), what musubi-tuner's ``convert_z_image_lora_to_comfy.py``
  makes. q, k and v are written as one block-diagonal LoRA of ``attention.qkv`` whose alpha makes every reader's
  merge the trained delta (:mod:`guitrainer.engine.families.flux1.export` explains it). diffusers does not split a
  fused qkv LoRA: it reads the ``"diffusers"`` layout only.
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
from guitrainer.engine.families.zimage.convert import BLOCK_LISTS

IMPLEMENTATION = "https://github.com/Tongyi-MAI/Z-Image"  # musubi-tuner's and OneTrainer's modelspec


def pieces_of(denoiser: nn.Module) -> tuple[Piece, ...]:
    """The original layout's Linears of every block (the LoRA's modules, in kohya's file), from the built model."""
    pieces: list[Piece] = []
    modules = dict(unwrapped(denoiser).named_modules())
    for blocks in BLOCK_LISTS:
        for i in range(len(modules.get(blocks, ()))):
            b = f"{blocks}.{i}"
            q, k, v = (modules[f"{b}.attention.to_{x}"].out_features for x in "qkv")
            pieces.append(Piece(f"{b}.attention.qkv", tuple(f"{b}.attention.to_{x}" for x in "qkv"), (q, k, v)))
            pieces.append(Piece(f"{b}.attention.out", (f"{b}.attention.to_out.0",)))
            for name in ("feed_forward.w1", "feed_forward.w2", "feed_forward.w3", "adaLN_modulation.0"):
                if f"{b}.{name}" in modules:
                    pieces.append(Piece(f"{b}.{name}", (f"{b}.{name}",)))
    return tuple(pieces)


def kohya_state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA under ComfyUI's original names (``"kohya"``; see the module docstring)."""
    return flux_export.kohya_state_dict(denoiser, (), alpha, to_cpu=to_cpu, pieces=pieces_of(denoiser))


def diffusers_state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA as ``diffusion_model.<diffusers module>.lora_A/B.weight`` + ``.alpha`` (``"diffusers"``)."""
    return diffusers_lora.state_dict(denoiser, alpha, to_cpu=to_cpu)


def load_lora_file(path: Path, network: NetworkConfig, denoiser: nn.Module, skipped: list[str]) -> int:
    """Continue from LoRA: a Z-Image file of either layout into the injected LoRA (modules matching none go to
    ``skipped``). Plain LoRA only."""
    return diffusers_lora.load_lora_file(path, network, denoiser, skipped, label="Z-Image",
                                         kohya_pieces=pieces_of(denoiser))


def metadata(config: TrainingConfig, settings: flow_matching.FlowSettings) -> dict[str, str]:
    """Z-Image's part of the file's metadata, under the names musubi-tuner (kohya's Z-Image trainer) writes."""
    values: dict[str, Any] = {
        "ss_base_model_version": "z_image",  # musubi-tuner dataset/architectures.py ARCHITECTURE_Z_IMAGE_FULL
        "ss_network_module": "networks.lora_zimage",
        "modelspec.architecture": "Z-Image/lora",
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
