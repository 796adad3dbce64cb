"""The estimator's numbers for full-size SD 3.5 Large and Medium, from the architectures on ``meta`` (no memory).

Each part is built from the shipped configs (``resources/models/sd35``: ``transformer_large`` /
``transformer_medium``, ``vae``, ``text_encoder`` CLIP-L, ``text_encoder_2`` CLIP-G, ``text_encoder_3`` T5-XXL)
and counted; the LoRA layers each ``network.target_modules`` choice trains (:mod:`.network`) are grouped as
``(in, out, count, tokens per latent pixel)``, as :class:`~guitrainer.core.memory.specs.ModelSpec` keeps them:

* the image stream's layers (``attn.to_*``, ``attn2.*``, ``ff.*``) see one token per 2 × 2 latent pixels: 0.25;
* the text stream's (``add_*_proj``, ``to_add_out``, ``ff_context.*``) see the 77 + 256 text tokens, whatever the
  resolution: 0 (``ModelSpec``'s "text tokens"; :data:`TEXT_TOKENS` says how many there are for SD 3.5);
* the adaLN modulation (``norm1.linear``, ``norm1_context.linear``) sees one vector per image: also 0 here, which
  counts its activations as the text stream's — small (one hidden-wide row per token), and said here so the
  estimator can tell them apart (:func:`per_image_layers`).

The transformer's ``pos_embed`` grid is a buffer, not a parameter: :attr:`ParameterTable.buffers` (bf16 or fp32
like the weights; 90 M values for Large, 226 M for Medium, which has a 384² grid).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.core.families.facts import LoraTable, ModelSpec
from guitrainer.core.families.sd35 import CLIP_TOKENS, T5_TOKENS, VARIANTS
from guitrainer.engine.families.base import Family
from guitrainer.engine.families.sd35.network import (
    DENOISER_TARGETS,
    MODULATION,
    STORAGE_SKIP_PATTERNS,
    TEXT_ENCODER_TARGETS,
)
from guitrainer.engine.offload import block_table, named_block_lists

CONFIG_DIR = Path(__file__).resolve().parents[4] / "resources" / "models" / "sd35"
TEXT_TOKENS = CLIP_TOKENS + T5_TOKENS
_TEXT_STREAM = ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out", "ff_context.net.0.proj", "ff_context.net.2")


@dataclass(frozen=True)
class ParameterTable:
    """One SD 3.5 model's :class:`ModelSpec` and what it does not hold."""

    version: str
    spec: ModelSpec
    buffers: int
    text_tokens: int = TEXT_TOKENS


def _config(part: str) -> dict[str, Any]:
    return json.loads((CONFIG_DIR / part / "config.json").read_text(encoding="utf-8"))


def transformer_on_meta(part: str, blocks: int | None = None) -> nn.Module:
    """``transformer_large`` or ``transformer_medium`` on ``meta``; ``blocks`` joint blocks instead of the released
    model's (full width: the memory measurement at reduced depth)."""
    if blocks is None:
        return build_on_meta(part)
    from diffusers import SD3Transformer2DModel

    cfg = _config(part)
    cfg["num_layers"] = int(blocks)
    cfg["dual_attention_layers"] = [i for i in cfg.get("dual_attention_layers", []) if i < int(blocks)]
    with torch.device("meta"):
        model = SD3Transformer2DModel.from_config(cfg)
    model.requires_grad_(False)
    return model


def build_on_meta(part: str) -> nn.Module:
    """One full-size part on ``meta``: ``transformer_large``, ``transformer_medium``, ``vae``, ``text_encoder``,
    ``text_encoder_2`` or ``text_encoder_3``."""
    cfg = _config(part)
    with torch.device("meta"):
        if part.startswith("transformer"):
            from diffusers import SD3Transformer2DModel

            model = SD3Transformer2DModel.from_config(cfg)
        elif part == "vae":
            from diffusers import AutoencoderKL

            model = AutoencoderKL.from_config(cfg)
        elif part == "text_encoder_3":
            from transformers import T5Config, T5EncoderModel

            model = T5EncoderModel(T5Config(**{k: v for k, v in cfg.items() if not k.startswith("_")}))
        else:
            from transformers import CLIPTextConfig, CLIPTextModelWithProjection

            model = CLIPTextModelWithProjection(CLIPTextConfig(**{k: v for k, v in cfg.items() if not k.startswith("_")}))
    model.requires_grad_(False)
    return model


def _count(module: nn.Module | None) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def _matches(name: str, suffixes: tuple[str, ...]) -> bool:
    return any(name == s or name.endswith("." + s) for s in suffixes)


def tokens_per_latent_pixel(name: str, patch: int) -> float:
    """Tokens a layer sees per latent pixel: 1/patch² for the image stream, 0 for text tokens and the modulation."""
    if _matches(name, _TEXT_STREAM) or _matches(name, MODULATION):
        return 0.0
    return 1.0 / (patch * patch)


def per_image_layers(module: nn.Module, suffixes: tuple[str, ...]) -> LoraTable:
    """The targeted layers that see one vector per image (the adaLN modulation), grouped like a LoRA table."""
    return _table(module, tuple(s for s in suffixes if s in MODULATION), patch=None)


def _table(module: nn.Module, suffixes: tuple[str, ...], patch: int | None) -> LoraTable:
    groups: dict[tuple[int, int, float], int] = {}
    for name, layer in module.named_modules():
        if isinstance(layer, nn.Linear) and _matches(name, suffixes):
            frac = tokens_per_latent_pixel(name, patch) if patch else 0.0
            key = (layer.in_features, layer.out_features, frac)
            groups[key] = groups.get(key, 0) + 1
    return tuple(sorted((i, o, c, f) for (i, o, f), c in groups.items()))


def _count_modulation(block: nn.Module) -> int:
    """A joint block's adaLN modulation Linears (fed one vector per image)."""
    return sum(_count(m) for n, m in block.named_modules() if isinstance(m, nn.Linear) and n in MODULATION)


def _fp8_stored(*parts: nn.Module) -> tuple[int, ...]:
    """Per part, the parameters the trainer's fp8 storage keeps in fp8 (the family's skip list: the embedders, the
    final layer, T5's ``wo``)."""
    from guitrainer.engine.network.layer_casting import stored_parameters

    return tuple(stored_parameters(p, STORAGE_SKIP_PATTERNS) for p in parts)


@functools.cache
def parameter_table(version: str, blocks: int | None = None) -> ParameterTable:
    """The table of "5-large" or "5-medium" (about a second: every part is built on ``meta``); ``blocks`` joint
    blocks instead of the released model's, at full width (the memory measurement's smaller points)."""
    from guitrainer.engine.network.quantised_storage import count_quantisable

    variant = VARIANTS[version]
    if not variant.config:
        raise ValueError(f"no shipped transformer config for {variant.label}")
    transformer = transformer_on_meta(variant.config, blocks)
    vae = build_on_meta("vae")
    encoders = [build_on_meta(p) for p in ("text_encoder", "text_encoder_2", "text_encoder_3")]
    patch = int(transformer.config.patch_size)
    vae_encoder = _count(vae.encoder) + _count(getattr(vae, "quant_conv", None))
    spec = ModelSpec(
        family="sd35",
        denoiser=_count(transformer),
        text_encoders=tuple(_count(te) for te in encoders),
        vae_encoder=vae_encoder,
        vae_decoder=_count(vae) - vae_encoder,
        vae_channels=int(vae.config.block_out_channels[0]),
        text_encoder_shapes=tuple(
            (int(c.hidden_size), int(c.intermediate_size), int(c.num_hidden_layers))
            for c in (te.config for te in encoders[:2])
        ) + ((int(encoders[2].config.d_model), int(encoders[2].config.d_ff), int(encoders[2].config.num_layers)),),
        cross_attention_dim=int(transformer.config.joint_attention_dim),
        denoiser_lora={target: _table(transformer, suffixes, patch) for target, suffixes in DENOISER_TARGETS.items()},
        text_encoder_lora={
            target: (_table(encoders[0], suffixes, None), _table(encoders[1], suffixes, None), ())
            for target, suffixes in TEXT_ENCODER_TARGETS.items()
        },
        offload_blocks=block_table(named_block_lists(transformer, Family.block_lists)),
        quantisable=count_quantisable(transformer, STORAGE_SKIP_PATTERNS),
        blocks=((len(transformer.transformer_blocks), max(_count(b) for b in transformer.transformer_blocks),
                 max(_count_modulation(b) for b in transformer.transformer_blocks)),),
        denoiser_buffers=sum(b.numel() for b in transformer.buffers()),
        fp8_stored=_fp8_stored(transformer, *encoders),
    )
    buffers = spec.denoiser_buffers
    return ParameterTable(version=version, spec=spec, buffers=buffers)
