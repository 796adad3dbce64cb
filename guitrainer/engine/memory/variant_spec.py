"""The layer tables the VRAM estimator needs for network variants, recomputed from the models on ``meta``.

``core/memory/network.py`` ships the tables (no torch at run time); ``tests/test_vram_variants.py`` checks
they equal what this computes from the bundled configs.
"""

from __future__ import annotations

from typing import Any

import torch

from guitrainer.core.model.lora_format import CONV_UNET_TARGETS, TEXT_ENCODER_MLP_TARGETS
from guitrainer.engine.memory import model_spec
from guitrainer.engine.network import variants


def _tokens_seen(unet: torch.nn.Module, names: list[str], family: str) -> dict[str, int]:
    """How many positions each named layer sees in a meta forward at the spec's latent side."""
    cfg = model_spec.component_configs(family)["unet"]
    side = 32 if family == "demo" else 64
    seen: dict[str, int] = {}
    hooks = []
    for name in names:
        def hook(_m: Any, inputs: Any, _name: str = name) -> None:
            x = inputs[0]
            seen[_name] = x.shape[2] * x.shape[3] if x.dim() == 4 else x.shape[1]

        hooks.append(unet.get_submodule(name).register_forward_pre_hook(hook))
    with torch.device("meta"), torch.no_grad():
        kw: dict[str, Any] = {}
        if cfg.get("addition_embed_type") == "text_time":
            pooled = cfg["projection_class_embeddings_input_dim"] - 6 * cfg["addition_time_embed_dim"]
            kw["added_cond_kwargs"] = {"text_embeds": torch.zeros(1, pooled), "time_ids": torch.zeros(1, 6)}
        sample = torch.zeros(1, cfg.get("in_channels", 4), side, side)
        unet(sample, torch.zeros(1), torch.zeros(1, 77, cfg["cross_attention_dim"]), **kw)
    for h in hooks:
        h.remove()
    return {n: v for n, v in seen.items()}


def conv_table(family: str) -> tuple[tuple[int, int, int, int, float], ...]:
    """``(in channels, out, kernel side, count, positions per latent pixel)`` of the UNet layers variants add."""
    unet = model_spec.build_on_meta(family, "unet")
    side = 32 if family == "demo" else 64
    layers = variants.target_paths(unet, CONV_UNET_TARGETS)
    seen = _tokens_seen(unet, list(layers), family)
    groups: dict[tuple[int, int, int, float], int] = {}
    for name, m in layers.items():
        if isinstance(m, torch.nn.Conv2d):
            key = (m.in_channels, m.out_channels, int(m.kernel_size[0]), seen[name] / (side * side))
        else:  # time_emb_proj: one position per sample
            key = (m.in_features, m.out_features, 1, 0.0)
        groups[key] = groups.get(key, 0) + 1
    return tuple(sorted((i, o, k, c, f) for (i, o, k, f), c in groups.items()))


def text_encoder_mlp_tables(family: str) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Per text encoder, ``(in, out, count)`` of its MLP layers (fc1 / fc2)."""
    parts = [p for p in ("text_encoder", "text_encoder_2") if p in model_spec.component_configs(family)]
    out = []
    for part in parts:
        te = model_spec.build_on_meta(family, part)
        groups: dict[tuple[int, int], int] = {}
        for m in variants.target_paths(te, TEXT_ENCODER_MLP_TARGETS).values():
            groups[(m.in_features, m.out_features)] = groups.get((m.in_features, m.out_features), 0) + 1
        out.append(tuple(sorted((i, o, c) for (i, o), c in groups.items())))
    return tuple(out)
