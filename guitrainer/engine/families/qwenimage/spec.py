"""The VRAM estimator's numbers for full-size Qwen-Image, computed from the architecture on ``meta`` (no memory):
parameter counts per part, and the layers each LoRA target set trains with the tokens each one sees.

Rows are the estimator's 4-entry form ``(in, out, count, image tokens per latent pixel)``, ``0.0`` meaning "the
caption's tokens": a block's image-stream layers (``attn.to_q/k/v``, ``attn.to_out.0``, ``img_mlp``) see one token
per 2x2 latent pixels (0.25), its text-stream layers (``attn.add_*_proj``, ``attn.to_add_out``, ``txt_mlp``) the
caption's tokens, and the modulation Linears (``img_mod.1``, ``txt_mod.1``) one vector per image, counted with the
caption's as Z-Image's are. The VAE is Wan's 3-D one; its channel count is its ``base_dim``.
``core/families/qwenimage.py`` ships :func:`as_model_spec`'s result; a test recomputes it.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch
from torch import nn

from guitrainer.base.paths import resources_dir
from guitrainer.core.families.facts import ModelSpec
from guitrainer.engine.families.base import Family
from guitrainer.engine.families.qwenimage import network
from guitrainer.engine.memory.transformer_spec import linear_parameters, lora_table, parameters
from guitrainer.engine.offload import block_table, named_block_lists

#: a block's layers that see the caption's tokens or one vector (the rest of a block sees the image's tokens)
_NOT_IMAGE_TOKENS = ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out", "txt_mlp.",
                     "img_mod.1", "txt_mod.1")


def _config(part: str) -> dict[str, Any]:
    return json.loads((resources_dir() / "models" / "qwenimage" / part / "config.json").read_text(encoding="utf-8"))


def on_meta(blocks: int | None = None) -> tuple[nn.Module, nn.Module, nn.Module]:
    """(transformer, VAE, Qwen2.5-VL-7B's language model) of full-size Qwen-Image on ``meta``; ``blocks`` keeps fewer
    transformer blocks at full width."""
    from diffusers import AutoencoderKLQwenImage, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    from guitrainer.engine.families.qwenimage.loading import text_config

    with torch.device("meta"):
        cfg = _config("transformer")
        if blocks is not None:
            cfg.update(num_layers=int(blocks))
        transformer = QwenImageTransformer2DModel.from_config(cfg)
        vae = AutoencoderKLQwenImage.from_config(_config("vae"))
        qwen25 = Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(**text_config(_config("text_encoder"))))
    for m in (transformer, vae, qwen25):
        m.requires_grad_(False)
    return transformer, vae, qwen25


def tokens_per_pixel(name: str) -> float:
    """What a block Linear sees: 0.25 image tokens per latent pixel, or 0.0 (the caption's tokens, or one vector)."""
    return 0.0 if any(f".{t}" in name for t in _NOT_IMAGE_TOKENS) else 0.25


@functools.cache
def as_model_spec(blocks: int | None = None) -> ModelSpec:
    """The estimator's :class:`~guitrainer.core.families.facts.ModelSpec` of full-size Qwen-Image (``blocks``: fewer
    blocks at full width, for the memory fit)."""
    from guitrainer.engine.network.layer_casting import stored_parameters
    from guitrainer.engine.network.quantised_storage import count_quantisable

    transformer, vae, qwen25 = on_meta(blocks)
    lists = (transformer.transformer_blocks,)
    te = qwen25.config
    return ModelSpec(
        family="qwenimage",
        denoiser=parameters(transformer),
        text_encoders=(parameters(qwen25),),
        vae_encoder=parameters(vae.encoder) + parameters(vae.quant_conv),
        vae_decoder=parameters(vae) - parameters(vae.encoder) - parameters(vae.quant_conv),
        vae_channels=int(vae.config.base_dim),
        text_encoder_shapes=((te.hidden_size, te.intermediate_size, te.num_hidden_layers),),
        cross_attention_dim=int(transformer.config.joint_attention_dim),
        denoiser_lora={t: lora_table(transformer, network.targets_in(transformer, s), tokens_per_pixel)
                       for t, s in network.TARGETS.items()},
        text_encoder_lora={t: ((),) for t in network.TARGETS},
        offload_blocks=block_table(named_block_lists(transformer, Family.block_lists)),
        quantisable=count_quantisable(transformer, network.STORAGE_SKIP_PATTERNS),
        blocks=tuple((len(lst), max(parameters(b) for b in lst),
                      max(linear_parameters(b, ("img_mod.1", "txt_mod.1")) for b in lst)) for lst in lists if len(lst)),
        fp8_stored=tuple(stored_parameters(p, network.STORAGE_SKIP_PATTERNS) for p in (transformer, qwen25)),
    )
