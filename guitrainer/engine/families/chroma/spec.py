"""The VRAM estimator's numbers for full-size Chroma1-HD, computed from the architecture on ``meta`` (no memory):
parameter counts per part, and the layers each LoRA target set trains with the tokens each one sees.

Rows are the estimator's 4-entry form ``(in, out, count, image tokens per latent pixel)``, ``0.0`` meaning "the text
tokens": a double block's image-stream layers see one token per 2x2 latent pixels (0.25), its text-stream layers
(``add_*_proj``, ``to_add_out``, ``ff_context``) the T5 tokens, and every single-block layer image and text tokens
at once (counted by its image tokens, as Flux's table does). The LoRA is counted as trained — one LoRA per
diffusers module — not as the fused file stores it. ``core/families/chroma.py`` ships :func:`as_model_spec`'s
result; a test recomputes it.
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
from guitrainer.engine.families.chroma import network
from guitrainer.engine.memory.transformer_spec import lora_table, parameters
from guitrainer.engine.offload import block_table, named_block_lists

#: a double block's text-stream layers (the rest of a double block is the image stream)
_TEXT_STREAM = ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out", "ff_context.")


def _config(part: str) -> dict[str, Any]:
    return json.loads((resources_dir() / "models" / "chroma" / part / "config.json").read_text(encoding="utf-8"))


def on_meta(blocks: tuple[int, int] | None = None) -> tuple[nn.Module, nn.Module, nn.Module]:
    """(transformer, VAE, T5-XXL encoder) of full-size Chroma1-HD on ``meta`` from the shipped configs; ``blocks``
    (double, single) keeps fewer blocks at full width."""
    from diffusers import AutoencoderKL, ChromaTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    with torch.device("meta"):
        cfg = _config("transformer")
        if blocks is not None:
            cfg.update(num_layers=int(blocks[0]), num_single_layers=int(blocks[1]))
        transformer = ChromaTransformer2DModel.from_config(cfg)
        vae = AutoencoderKL.from_config(_config("vae"))
        t5 = T5EncoderModel(T5Config(**{k: v for k, v in _config("text_encoder").items() if not k.startswith("_")}))
    for m in (transformer, vae, t5):
        m.requires_grad_(False)
    return transformer, vae, t5


def tokens_per_pixel(name: str) -> float:
    """What a block Linear sees, in the table's units: 0.25 image tokens per latent pixel, or 0.0 = the text."""
    if name.startswith("transformer_blocks.") and any(f".{t}" in name for t in _TEXT_STREAM):
        return 0.0
    return 0.25


@functools.cache
def as_model_spec(blocks: tuple[int, int] | None = None) -> ModelSpec:
    """The estimator's :class:`~guitrainer.core.families.facts.ModelSpec` of full-size Chroma1-HD; ``blocks``
    (double, single) for the same width at reduced depth (the memory fit's points)."""
    from guitrainer.engine.network.layer_casting import stored_parameters
    from guitrainer.engine.network.quantised_storage import count_quantisable

    transformer, vae, t5 = on_meta(blocks)
    lists = (transformer.transformer_blocks, transformer.single_transformer_blocks)
    return ModelSpec(
        family="chroma",
        denoiser=parameters(transformer),
        text_encoders=(parameters(t5),),
        vae_encoder=parameters(vae.encoder),
        vae_decoder=parameters(vae) - parameters(vae.encoder),
        vae_channels=int(vae.config.block_out_channels[0]),
        text_encoder_shapes=((t5.config.d_model, t5.config.d_ff, t5.config.num_layers),),
        cross_attention_dim=int(transformer.config.joint_attention_dim),
        denoiser_lora={t: lora_table(transformer, network.targets_in(transformer, s), tokens_per_pixel)
                       for t, s in network.TARGETS.items()},
        text_encoder_lora={t: ((),) for t in network.TARGETS},
        offload_blocks=block_table(named_block_lists(transformer, Family.block_lists)),
        quantisable=count_quantisable(transformer, network.STORAGE_SKIP_PATTERNS),
        # Chroma's blocks have no modulation Linears: their shift / scale / gate come from the approximator
        blocks=tuple((len(lst), max(parameters(b) for b in lst), 0) for lst in lists if len(lst)),
        fp8_stored=tuple(stored_parameters(p, network.STORAGE_SKIP_PATTERNS) for p in (transformer, t5)),
    )
