"""SD 3.5's text conditioning: CLIP-L + CLIP-G + T5-XXL to the transformer's ``encoder_hidden_states`` and
``pooled_projections``, as diffusers' ``StableDiffusion3Pipeline.encode_prompt`` and sd-scripts'
``strategy_sd3.py`` build them:

* each CLIP reads 77 tokens; its **penultimate** hidden state (``hidden_states[-2]``) is kept, and its projected
  pooled output (``text_embeds``); CLIP-L [B, 77, 768] and CLIP-G [B, 77, 1280] are concatenated to
  [B, 77, 2048] and zero-padded to T5's width (4096);
* T5-XXL reads 256 tokens (sd-scripts' ``--t5xxl_max_token_length`` and the pipeline's ``max_sequence_length``
  default), its last hidden state [B, 256, 4096] follows the CLIPs' along the sequence: ``hidden`` is
  [B, 77 + 256, 4096];
* ``pooled`` = cat(CLIP-L pooled, CLIP-G pooled) [B, 2048].

Without T5, zeros of [B, 256, width] stand in its place — the diffusers pipeline's choice, so training sees
the same sequence the samples are drawn with (sd-scripts pads 77 zero tokens; ComfyUI none). No attention masks
(sd-scripts' ``--apply_lg_attn_mask`` / ``--apply_t5_attn_mask`` default off; diffusers has none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from guitrainer.core.families.sd35 import CLIP_TOKENS, T5_TOKENS
from guitrainer.engine.families.base import TextConditioning
from guitrainer.engine.families.sd35.loaded import denoiser_of, has_t5
from guitrainer.engine.models.types import LoadedModel


def _tokens(tokenizer: Any, captions: list[str], length: int, device: torch.device) -> torch.Tensor:
    ids = tokenizer(captions, padding="max_length", max_length=length, truncation=True, return_tensors="pt").input_ids
    return ids.to(device)


def clip_embeddings(
    encoder: nn.Module, tokenizer: Any, captions: list[str], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(penultimate hidden state [B, 77, width], projected pooled output [B, width]) of one CLIP."""
    out = encoder(_tokens(tokenizer, captions, CLIP_TOKENS, device), output_hidden_states=True)
    return out.hidden_states[-2], out.text_embeds


def t5_embeddings(encoder: nn.Module, tokenizer: Any, captions: list[str], device: torch.device) -> torch.Tensor:
    """T5's last hidden state [B, 256, width]."""
    return encoder(_tokens(tokenizer, captions, T5_TOKENS, device))[0]


def encode(
    model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
) -> TextConditioning:
    """``{"hidden": [B, 77 + 256, width], "pooled": [B, 2048]}`` for ``captions`` (encoders maybe DDP-wrapped)."""
    l_hidden, l_pooled = clip_embeddings(text_encoders[0], model.tokenizers[0], captions, device)
    g_hidden, g_pooled = clip_embeddings(text_encoders[1], model.tokenizers[1], captions, device)
    dtype = l_hidden.dtype
    clip = torch.cat([l_hidden, g_hidden.to(dtype)], dim=-1)
    if has_t5(model) and len(text_encoders) > 2:
        t5 = t5_embeddings(text_encoders[2], model.tokenizers[2], captions, device).to(dtype)
    else:
        width = int(denoiser_of(model).config.joint_attention_dim)
        t5 = torch.zeros(len(captions), T5_TOKENS, width, dtype=dtype, device=clip.device)
    clip = nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
    return {"hidden": torch.cat([clip, t5], dim=-2), "pooled": torch.cat([l_pooled, g_pooled.to(l_pooled.dtype)], dim=-1)}
