"""A LoRA reader written from ComfyUI's rules for Flux (``comfy/lora.py`` and ``comfy/weight_adapter/lora.py``, as
the research note describes them), not from our writer: the proof that a file loads there.

* ``model_lora_keys_unet``: every weight ``diffusion_model.<k>.weight`` of the model answers to
  ``lora_unet_<k with . -> _>`` and to the bare ``diffusion_model.<k>``;
* ``model_lora_keys_clip``: CLIP-L's ``clip_l.transformer.text_model.encoder.layers.N.<self_attn.q_proj | …>``
  answers to ``lora_te_text_model_encoder_layers_N_<self_attn_q_proj | …>``, ``lora_te1_…`` and
  ``text_encoder.text_model.encoder.layers.N.<module>``;
* ``load_lora``: for each known name x, ``x.alpha`` (``.item()``), ``x.lora_up.weight`` / ``x.lora_down.weight``;
  whatever key of the file no name consumed is "lora key not loaded";
* ``LoRAAdapter.calculate_weight``: ``alpha = alpha / down.shape[0]`` (1 without alpha);
  ``W += strength · alpha · (up.flatten(1) @ down.flatten(1)).reshape(W.shape)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

#: ComfyUI's LORA_CLIP_MAP: CLIP module -> the kohya spelling of it
LORA_CLIP_MAP = {
    "mlp.fc1": "mlp_fc1",
    "mlp.fc2": "mlp_fc2",
    "self_attn.k_proj": "self_attn_k_proj",
    "self_attn.q_proj": "self_attn_q_proj",
    "self_attn.v_proj": "self_attn_v_proj",
    "self_attn.out_proj": "self_attn_out_proj",
}


def model_lora_keys(model_keys: list[str]) -> dict[str, str]:
    """LoRA name -> model weight key, for a model whose keys are ComfyUI's (``diffusion_model.…``, ``clip_l.…``)."""
    key_map: dict[str, str] = {}
    for k in model_keys:
        if k.startswith("diffusion_model.") and k.endswith(".weight"):
            key_lora = k[len("diffusion_model."): -len(".weight")].replace(".", "_")
            key_map[f"lora_unet_{key_lora}"] = k
            key_map[k[: -len(".weight")]] = k
    for b in range(32):
        for c, kohya in LORA_CLIP_MAP.items():
            k = f"clip_l.transformer.text_model.encoder.layers.{b}.{c}.weight"
            if k in model_keys:
                key_map[f"lora_te_text_model_encoder_layers_{b}_{kohya}"] = k
                key_map[f"lora_te1_text_model_encoder_layers_{b}_{kohya}"] = k
                key_map[f"text_encoder.text_model.encoder.layers.{b}.{c}"] = k
    return key_map


@dataclass
class Patch:
    up: torch.Tensor
    down: torch.Tensor
    alpha: float | None


@dataclass
class Loaded:
    patches: dict[str, Patch] = field(default_factory=dict)
    not_loaded: list[str] = field(default_factory=list)


def load_lora(lora: Mapping[str, torch.Tensor], key_map: dict[str, str]) -> Loaded:
    """ComfyUI's ``load_lora`` for plain LoRA modules: the patches by model key, and the keys it could not use."""
    out = Loaded()
    used: set[str] = set()
    for x, target in key_map.items():
        alpha = None
        if f"{x}.alpha" in lora:
            alpha = float(lora[f"{x}.alpha"].item())
            used.add(f"{x}.alpha")
        up, down = f"{x}.lora_up.weight", f"{x}.lora_down.weight"
        if up in lora and down in lora:
            out.patches[target] = Patch(lora[up], lora[down], alpha)
            used.update((up, down))
    out.not_loaded = sorted(k for k in lora if k not in used)
    return out


def calculate_weight(weight: torch.Tensor, patch: Patch, strength: float = 1.0) -> torch.Tensor:
    """``LoRAAdapter.calculate_weight``: the patched weight (fp32 arithmetic, then the weight's dtype)."""
    scale = patch.alpha / patch.down.shape[0] if patch.alpha is not None else 1.0
    diff = torch.mm(patch.up.flatten(start_dim=1).float(), patch.down.flatten(start_dim=1).float()).reshape(weight.shape)
    return weight + ((strength * scale) * diff).to(weight.dtype)


def merge(model_sd: Mapping[str, torch.Tensor], lora: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], Loaded]:
    """The model's weights with the LoRA merged as ComfyUI merges it, and what was loaded."""
    loaded = load_lora(lora, model_lora_keys(list(model_sd)))
    merged = dict(model_sd)
    for key, patch in loaded.patches.items():
        merged[key] = calculate_weight(model_sd[key], patch)
    return merged, loaded
