"""The VRAM estimator's numbers for full-size Z-Image, computed from the architecture on ``meta`` (no memory):
parameter counts per part, and the layers each LoRA target set trains with the tokens each one sees.

Rows are the estimator's 4-entry form ``(in, out, count, image tokens per latent pixel)``, ``0.0`` meaning "the
caption's tokens": the main layers see the unified sequence (image and caption tokens; counted by the image's, 0.25
per latent pixel with 2x2 patches, as Flux's single blocks are), the noise refiners the image tokens, the context
refiners the caption's, and every ``adaLN_modulation`` one vector per image. ``core/families/zimage.py`` ships
:func:`as_model_spec`'s result; a test recomputes it.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch
from torch import nn

from guitrainer.base.paths import resources_dir
from guitrainer.core.families.facts import ModelSpec
from guitrainer.engine.families.zimage import network
from guitrainer.engine.memory.transformer_spec import linear_parameters, lora_table, parameters
from guitrainer.engine.offload import block_table, named_block_lists

#: the block lists, in the order the forward runs them (noise refiners, context refiners, main layers)
BLOCK_LISTS = ("noise_refiner", "context_refiner", "layers")


def _config(part: str) -> dict[str, Any]:
    return json.loads((resources_dir() / "models" / "zimage" / part / "config.json").read_text(encoding="utf-8"))


def on_meta(layers: int | None = None) -> tuple[nn.Module, nn.Module, nn.Module]:
    """(transformer, VAE, Qwen3-4B) of full-size Z-Image on ``meta``; ``layers`` keeps fewer main layers."""
    from diffusers import AutoencoderKL, ZImageTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    with torch.device("meta"):
        cfg = _config("transformer")
        if layers is not None:
            cfg.update(n_layers=int(layers))
        transformer = ZImageTransformer2DModel.from_config(cfg)
        vae = AutoencoderKL.from_config(_config("vae"))
        te = {k: v for k, v in _config("text_encoder").items() if not k.startswith("_") and k != "architectures"}
        qwen3 = Qwen3Model(Qwen3Config(**te))
    for m in (transformer, vae, qwen3):
        m.requires_grad_(False)
    return transformer, vae, qwen3


def tokens_per_pixel(name: str) -> float:
    """What a block Linear sees: 0.25 image tokens per latent pixel, or 0.0 (the caption's tokens, or one vector)."""
    if name.startswith("context_refiner.") or name.endswith("adaLN_modulation.0"):
        return 0.0
    return 0.25


@functools.cache
def as_model_spec(layers: int | None = None) -> ModelSpec:
    """The estimator's :class:`~guitrainer.core.families.facts.ModelSpec` of full-size Z-Image (``layers``: fewer
    main layers at full width, for the memory fit)."""
    from guitrainer.engine.network.layer_casting import stored_parameters
    from guitrainer.engine.network.quantised_storage import count_quantisable

    transformer, vae, qwen3 = on_meta(layers)
    lists = [getattr(transformer, name) for name in BLOCK_LISTS]
    return ModelSpec(
        family="zimage",
        denoiser=parameters(transformer),
        text_encoders=(parameters(qwen3),),
        vae_encoder=parameters(vae.encoder),
        vae_decoder=parameters(vae) - parameters(vae.encoder),
        vae_channels=int(vae.config.block_out_channels[0]),
        text_encoder_shapes=((qwen3.config.hidden_size, qwen3.config.intermediate_size, qwen3.config.num_hidden_layers),),
        cross_attention_dim=int(transformer.config.cap_feat_dim),
        denoiser_lora={t: lora_table(transformer, network.targets_in(transformer, s), tokens_per_pixel)
                       for t, s in network.TARGETS.items()},
        text_encoder_lora={t: ((),) for t in network.TARGETS},
        offload_blocks=block_table(named_block_lists(transformer, BLOCK_LISTS)),
        quantisable=count_quantisable(transformer, network.STORAGE_SKIP_PATTERNS),
        blocks=tuple((len(lst), max(parameters(b) for b in lst), max(linear_parameters(b, ('adaLN_modulation.0',)) for b in lst)) for lst in lists if len(lst)),
        fp8_stored=tuple(stored_parameters(p, network.STORAGE_SKIP_PATTERNS) for p in (transformer, qwen3)),
    )
