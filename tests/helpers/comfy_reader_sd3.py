"""An independent reader of SD 3 / 3.5 LoRA files, written from ComfyUI's rules, NOT from guitrainer's writer.

The rules (ComfyUI, read from its sources; the research note flux_sd3.md §2c and §1c):

* ``comfy/utils.py`` ``mmdit_to_diffusers(mmdit_config, output_prefix)``: every diffusers key of an MMDiT of
  ``depth`` (width ``depth * 64``) -> the original key, or ``(key, (dim, start, length))`` for the q/k/v slices of
  a fused ``qkv`` (``to_q`` at 0, ``to_k`` at ``offset``, ``to_v`` at ``2·offset``, the same for ``add_*_proj`` and
  ``attn2``), or ``(key, None, swap_scale_shift)`` for ``norm_out.linear`` and the last block's
  ``norm1_context.linear``; the rest a plain rename (``MMDIT_MAP_BASIC`` / ``MMDIT_MAP_BLOCK``);
* ``comfy/lora.py`` ``model_lora_keys_unet``: for every model weight ``diffusion_model.<path>.weight``, the names
  ``lora_unet_<path with _>`` (kohya) and ``diffusion_model.<path>``; for SD 3 also ``transformer.<diffusers>``,
  ``base_model.model.<diffusers>``, ``lora_transformer_<diffusers with _>`` and ``lycoris_<…>`` through
  ``mmdit_to_diffusers``;
* ``model_lora_keys_clip``: ``lora_te1_text_model_encoder_layers_<b>_<LORA_CLIP_MAP[c]>`` -> CLIP-L's
  ``clip_l.transformer.text_model.encoder.layers.<b>.<c>.weight``, ``lora_te2_…`` -> CLIP-G's when CLIP-L is there
  too, and the diffusers names ``text_encoder.…`` / ``text_encoder_2.…``;
* ``load_lora``: per name, ``<name>.alpha`` and the (up, down) pair in any of the spellings ``LoRAAdapter.load``
  knows; every other key of the file is "lora key not loaded";
* ``LoRAAdapter.calculate_weight``: ``diff = up.flatten(1) @ down.flatten(1)``, scale ``alpha / down.shape[0]``
  (1 without alpha), added to the target weight — narrowed to the slice for a tuple key, through the function
  (``swap_scale_shift``) for a three-tuple.

The model's weights it patches are built here from diffusers-layout weights with the same map (a fused tensor is
assembled from its slices), so nothing of guitrainer's converter or writer is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

Target = str | tuple[str, tuple[int, int, int]] | tuple[str, None, Callable[[torch.Tensor], torch.Tensor]]


def swap_scale_shift(weight: torch.Tensor) -> torch.Tensor:
    shift, scale = weight.chunk(2, dim=0)
    return torch.cat([scale, shift], dim=0)


MMDIT_MAP_BASIC = {
    ("context_embedder.bias", "context_embedder.bias"),
    ("context_embedder.weight", "context_embedder.weight"),
    ("t_embedder.mlp.0.bias", "time_text_embed.timestep_embedder.linear_1.bias"),
    ("t_embedder.mlp.0.weight", "time_text_embed.timestep_embedder.linear_1.weight"),
    ("t_embedder.mlp.2.bias", "time_text_embed.timestep_embedder.linear_2.bias"),
    ("t_embedder.mlp.2.weight", "time_text_embed.timestep_embedder.linear_2.weight"),
    ("x_embedder.proj.bias", "pos_embed.proj.bias"),
    ("x_embedder.proj.weight", "pos_embed.proj.weight"),
    ("y_embedder.mlp.0.bias", "time_text_embed.text_embedder.linear_1.bias"),
    ("y_embedder.mlp.0.weight", "time_text_embed.text_embedder.linear_1.weight"),
    ("y_embedder.mlp.2.bias", "time_text_embed.text_embedder.linear_2.bias"),
    ("y_embedder.mlp.2.weight", "time_text_embed.text_embedder.linear_2.weight"),
    ("pos_embed", "pos_embed.pos_embed"),
    ("final_layer.adaLN_modulation.1.bias", "norm_out.linear.bias", swap_scale_shift),
    ("final_layer.adaLN_modulation.1.weight", "norm_out.linear.weight", swap_scale_shift),
    ("final_layer.linear.bias", "proj_out.bias"),
    ("final_layer.linear.weight", "proj_out.weight"),
}

MMDIT_MAP_BLOCK = {
    ("context_block.adaLN_modulation.1.bias", "norm1_context.linear.bias"),
    ("context_block.adaLN_modulation.1.weight", "norm1_context.linear.weight"),
    ("context_block.attn.proj.bias", "attn.to_add_out.bias"),
    ("context_block.attn.proj.weight", "attn.to_add_out.weight"),
    ("context_block.mlp.fc1.bias", "ff_context.net.0.proj.bias"),
    ("context_block.mlp.fc1.weight", "ff_context.net.0.proj.weight"),
    ("context_block.mlp.fc2.bias", "ff_context.net.2.bias"),
    ("context_block.mlp.fc2.weight", "ff_context.net.2.weight"),
    ("context_block.attn.ln_q.weight", "attn.norm_added_q.weight"),
    ("context_block.attn.ln_k.weight", "attn.norm_added_k.weight"),
    ("x_block.adaLN_modulation.1.bias", "norm1.linear.bias"),
    ("x_block.adaLN_modulation.1.weight", "norm1.linear.weight"),
    ("x_block.attn.proj.bias", "attn.to_out.0.bias"),
    ("x_block.attn.proj.weight", "attn.to_out.0.weight"),
    ("x_block.attn.ln_q.weight", "attn.norm_q.weight"),
    ("x_block.attn.ln_k.weight", "attn.norm_k.weight"),
    ("x_block.attn2.proj.bias", "attn2.to_out.0.bias"),
    ("x_block.attn2.proj.weight", "attn2.to_out.0.weight"),
    ("x_block.attn2.ln_q.weight", "attn2.norm_q.weight"),
    ("x_block.attn2.ln_k.weight", "attn2.norm_k.weight"),
    ("x_block.mlp.fc1.bias", "ff.net.0.proj.bias"),
    ("x_block.mlp.fc1.weight", "ff.net.0.proj.weight"),
    ("x_block.mlp.fc2.bias", "ff.net.2.bias"),
    ("x_block.mlp.fc2.weight", "ff.net.2.weight"),
}

LORA_CLIP_MAP = {
    "mlp.fc1": "mlp_fc1",
    "mlp.fc2": "mlp_fc2",
    "self_attn.k_proj": "self_attn_k_proj",
    "self_attn.q_proj": "self_attn_q_proj",
    "self_attn.v_proj": "self_attn_v_proj",
    "self_attn.out_proj": "self_attn_out_proj",
}


def mmdit_to_diffusers(depth: int, num_blocks: int | None = None, output_prefix: str = "") -> dict[str, Target]:
    """ComfyUI's map: diffusers key -> original key / slice / function, for an MMDiT of ``depth``."""
    key_map: dict[str, Target] = {}
    num_blocks = depth if num_blocks is None else num_blocks
    offset = depth * 64
    for i in range(num_blocks):
        block_from = f"transformer_blocks.{i}"
        block_to = f"{output_prefix}joint_blocks.{i}"
        for end in ("weight", "bias"):
            for attn, stream, names in (("attn", "x_block.attn", ("to_q", "to_k", "to_v")),
                                        ("attn", "context_block.attn", ("add_q_proj", "add_k_proj", "add_v_proj")),
                                        ("attn2", "x_block.attn2", ("to_q", "to_k", "to_v"))):
                qkv = f"{block_to}.{stream}.qkv.{end}"
                for j, name in enumerate(names):
                    key_map[f"{block_from}.{attn}.{name}.{end}"] = (qkv, (0, offset * j, offset))
        for original, diffusers in MMDIT_MAP_BLOCK:
            key_map[f"{block_from}.{diffusers}"] = f"{block_to}.{original}"
    basic = set(MMDIT_MAP_BASIC)
    for end in ("bias", "weight"):
        basic.add((f"joint_blocks.{depth - 1}.context_block.adaLN_modulation.1.{end}",
                   f"transformer_blocks.{depth - 1}.norm1_context.linear.{end}", swap_scale_shift))
    for entry in basic:
        if len(entry) > 2:
            key_map[entry[1]] = (f"{output_prefix}{entry[0]}", None, entry[2])
        else:
            key_map[entry[1]] = f"{output_prefix}{entry[0]}"
    return key_map


def original_weights(diffusers_sd: Mapping[str, torch.Tensor], depth: int, prefix: str = "diffusion_model.") -> dict[str, torch.Tensor]:
    """The model's weights under ComfyUI's own (original) keys, assembled from diffusers-layout weights with
    :func:`mmdit_to_diffusers` (keys the model does not have are skipped, as ComfyUI skips absent weights)."""
    key_map = mmdit_to_diffusers(depth, output_prefix=prefix)
    fused: dict[str, list[tuple[int, torch.Tensor]]] = {}
    out: dict[str, torch.Tensor] = {}
    for d_key, target in key_map.items():
        if d_key not in diffusers_sd:
            continue
        value = diffusers_sd[d_key].detach().float()
        if isinstance(target, str):
            out[target] = value.clone()
        elif target[1] is None:
            out[target[0]] = target[2](value)  # swap_scale_shift is its own inverse
        else:
            fused.setdefault(target[0], []).append((target[1][1], value))
    for key, pieces in fused.items():
        out[key] = torch.cat([v for _, v in sorted(pieces, key=lambda p: p[0])], dim=0)
    return out


def unet_key_map(model_keys: list[str], depth: int) -> dict[str, Target]:
    """``model_lora_keys_unet`` for an SD 3 model whose weights are ``model_keys`` (``diffusion_model.`` prefix)."""
    key_map: dict[str, Target] = {}
    for k in model_keys:
        if k.startswith("diffusion_model.") and k.endswith(".weight"):
            key_lora = k[len("diffusion_model."):-len(".weight")].replace(".", "_")
            key_map[f"lora_unet_{key_lora}"] = k
            key_map[k[:-len(".weight")]] = k  # the generic format
    for k, to in mmdit_to_diffusers(depth, output_prefix="diffusion_model.").items():
        if k.endswith(".weight"):
            stem = k[:-len(".weight")]
            key_map[f"transformer.{stem}"] = to
            key_map[f"base_model.model.{stem}"] = to
            key_map[f"lora_transformer_{stem.replace('.', '_')}"] = to
            key_map[f"lycoris_{stem.replace('.', '_')}"] = to
    return key_map


def clip_key_map(model_keys: list[str]) -> dict[str, Target]:
    """``model_lora_keys_clip`` for SD 3's CLIP-L and CLIP-G (keys ``clip_l.transformer.text_model…``)."""
    key_map: dict[str, Target] = {}
    sdk = set(model_keys)
    clip_l_present = False
    for b in range(32):
        for c, kohya in LORA_CLIP_MAP.items():
            k = f"clip_l.transformer.text_model.encoder.layers.{b}.{c}.weight"
            if k in sdk:
                key_map[f"lora_te_text_model_encoder_layers_{b}_{kohya}"] = k
                key_map[f"lora_te1_text_model_encoder_layers_{b}_{kohya}"] = k
                key_map[f"text_encoder.text_model.encoder.layers.{b}.{c}"] = k
                clip_l_present = True
            k = f"clip_g.transformer.text_model.encoder.layers.{b}.{c}.weight"
            if k in sdk:
                if clip_l_present:
                    key_map[f"lora_te2_text_model_encoder_layers_{b}_{kohya}"] = k
                    key_map[f"text_encoder_2.text_model.encoder.layers.{b}.{c}"] = k
                else:
                    key_map[f"lora_te_text_model_encoder_layers_{b}_{kohya}"] = k
    return key_map


_PAIRS = (
    ("{}.lora_up.weight", "{}.lora_down.weight"),
    ("{}_lora.up.weight", "{}_lora.down.weight"),
    ("{}.lora_B.weight", "{}.lora_A.weight"),
    ("{}.lora.up.weight", "{}.lora.down.weight"),
    ("{}.lora_linear_layer.up.weight", "{}.lora_linear_layer.down.weight"),
)


def load_lora(lora: Mapping[str, torch.Tensor], key_map: Mapping[str, Target]) -> tuple[dict[Any, tuple], list[str]]:
    """(patches: target -> (up, down, alpha), keys of the file not loaded), as ``comfy/lora.py`` ``load_lora``."""
    patches: dict[Any, tuple] = {}
    loaded: set[str] = set()
    for name, target in key_map.items():
        alpha = None
        if f"{name}.alpha" in lora:
            alpha = float(lora[f"{name}.alpha"].item())
            loaded.add(f"{name}.alpha")
        for up_name, down_name in _PAIRS:
            up_key, down_key = up_name.format(name), down_name.format(name)
            if up_key in lora:
                patches[target] = (lora[up_key], lora[down_key], alpha)
                loaded.update((up_key, down_key))
                break
    return patches, [k for k in lora if k not in loaded]


def apply(weights: Mapping[str, torch.Tensor], patches: Mapping[Any, tuple], strength: float = 1.0) -> dict[str, torch.Tensor]:
    """The weights with every patch added (``calculate_weight`` in fp32, as ComfyUI's intermediate dtype)."""
    out = {k: v.detach().float().clone() for k, v in weights.items()}
    for target, (up, down, alpha) in patches.items():
        key, offset, function = (target, None, None) if isinstance(target, str) else (target + (None,))[:3]
        weight = out[key]
        if offset is not None:
            weight = weight.narrow(offset[0], offset[1], offset[2])
        scale = alpha / down.shape[0] if alpha is not None else 1.0
        diff = (up.float().flatten(1) @ down.float().flatten(1)).reshape(weight.shape)
        diff = (strength * scale) * diff
        weight += function(diff) if function is not None else diff
    return out
