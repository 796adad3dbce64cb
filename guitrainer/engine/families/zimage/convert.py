"""The Z-Image transformer in both layouts: the original (``layers.N.attention.qkv``…, what the released
``z_image_turbo_bf16.safetensors`` and ComfyUI use) and diffusers' (``layers.N.attention.to_q``…, what
:class:`~diffusers.ZImageTransformer2DModel` is built of), converted both ways.

The rules are diffusers' ``convert_z_image_transformer_checkpoint_to_diffusers`` (``loaders/single_file_utils.py``):
``x_embedder.`` / ``final_layer.`` are ``all_x_embedder.2-1.`` / ``all_final_layer.2-1.`` (the patch size 2, frame
patch 1 the released model has), ``attention.out`` is ``attention.to_out.0``, ``attention.q_norm`` / ``k_norm`` are
``norm_q`` / ``norm_k``, ``attention.qkv`` is [q; k; v] by rows in every block (the 30 layers and the 4 refiners),
and the original's unused ``norm_final.weight`` is dropped. diffusers splits the qkv in equal thirds; here k and v
take ``n_kv_heads · head_dim`` rows each, read from the norms' and the output's shapes, which is the same for
Z-Image (30 heads, 30 KV heads) and right for a model with grouped KV heads too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

CHECKPOINT_PREFIX = "model.diffusion_model."
#: original -> diffusers prefixes of the patch-size keyed modules (patch 2, frame patch 1)
PATCH_MODULES = {"x_embedder.": "all_x_embedder.2-1.", "final_layer.": "all_final_layer.2-1."}
#: original -> diffusers names inside an attention module
ATTENTION = {".attention.out.": ".attention.to_out.0.", ".attention.q_norm.": ".attention.norm_q.",
             ".attention.k_norm.": ".attention.norm_k."}
UNUSED = ("norm_final.weight",)
BLOCK_LISTS = ("layers", "noise_refiner", "context_refiner")
_QKV = re.compile(r"^((?:layers|noise_refiner|context_refiner)\.\d+)\.attention\.qkv\.(weight|bias)$")


def strip_prefix(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The transformer's own keys: ``model.diffusion_model.`` removed where a checkpoint has it (then only those)."""
    if any(k.startswith(CHECKPOINT_PREFIX) for k in sd):
        return {k[len(CHECKPOINT_PREFIX):]: v for k, v in sd.items() if k.startswith(CHECKPOINT_PREFIX)}
    return dict(sd)


def qkv_rows(sd: Mapping[str, torch.Tensor], block: str, *, original: bool) -> tuple[int, int, int]:
    """(q, k, v) rows of ``block``'s attention: q is the output's width, k and v share the rest."""
    out = sd[f"{block}.attention.{'out' if original else 'to_out.0'}.weight"]
    q = int(out.shape[1])
    total = int(sd[f"{block}.attention.qkv.weight"].shape[0]) if original else q + 2 * int(
        sd[f"{block}.attention.to_k.weight"].shape[0])
    kv = (total - q) // 2
    return q, kv, kv


def _rename(key: str, table: Mapping[str, str], starts: Mapping[str, str]) -> str:
    for old, new in starts.items():
        if key.startswith(old):
            key = new + key[len(old):]
    for old, new in table.items():
        key = key.replace(old, new)
    return key


def original_to_diffusers(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Original-layout weights (with or without the checkpoint prefix) in diffusers' names, the qkv split by rows
    (views, no copy)."""
    src = {k: v for k, v in strip_prefix(sd).items() if k not in UNUSED}
    out: dict[str, torch.Tensor] = {}
    for key, value in src.items():
        match = _QKV.match(key)
        if match:
            block, kind = match.groups()
            q, k, v = value.split(list(qkv_rows(src, block, original=True)), dim=0)
            for name, part in zip(("to_q", "to_k", "to_v"), (q, k, v)):
                out[f"{block}.attention.{name}.{kind}"] = part
            continue
        out[_rename(key, ATTENTION, PATCH_MODULES)] = value
    return out


def diffusers_to_original(sd: Mapping[str, torch.Tensor], *, prefix: str = "") -> dict[str, torch.Tensor]:
    """diffusers-named weights in the original layout (``prefix`` before each key), q/k/v fused into ``qkv``."""
    back_attention = {v: k for k, v in ATTENTION.items()}
    back_patch = {v: k for k, v in PATCH_MODULES.items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        match = re.match(r"^(.+)\.attention\.to_([qkv])\.(weight|bias)$", key)
        if match:
            if match.group(2) == "q":
                block, kind = match.group(1), match.group(3)
                out[f"{prefix}{block}.attention.qkv.{kind}"] = torch.cat(
                    [sd[f"{block}.attention.to_{x}.{kind}"] for x in "qkv"], dim=0)
            continue
        out[prefix + _rename(key, back_attention, back_patch)] = value
    return out
