"""Chroma's text conditioning: T5-XXL's last hidden state under T5's attention mask, and the mask the transformer
attends with, as diffusers' ``ChromaPipeline._get_t5_prompt_embeds`` computes them (so training sees what sampling
will).

``{"t5": [B, T, 4096], "mask": [B, T]}`` per batch of captions (batch first, so the text cache keeps one entry
per caption):

* ``T`` = 512: ChromaPipeline's ``max_sequence_length``;
* T5 runs *with* its attention mask ("unlike FLUX, Chroma uses the attention mask when generating the T5
  embedding", the pipeline's comment), and the transformer sees every real token and the first padding token
  only ("chroma requires that all except the first padding token are masked out"): ``mask[i] = i ≤ length``.
  sd-scripts trains Chroma with ``--apply_t5_attn_mask`` for the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

#: T5 tokens per caption (ChromaPipeline's default ``max_sequence_length``)
T5_MAX_LENGTH = 512
#: ``ss_apply_t5_attn_mask``: this encoding masks T5's padding
APPLY_T5_ATTN_MASK = True


def encode(
    tokenizers: Sequence[Any], text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """``{"t5": T5's last hidden state [B, T, d], "mask": the transformer's text mask [B, T] (1 = attended)}``;
    ``text_encoders[0]`` is T5-XXL, possibly wrapped (DDP): it is called, never unwrapped."""
    tokens = tokenizers[0](captions, padding="max_length", max_length=T5_MAX_LENGTH, truncation=True, return_tensors="pt")
    ids, t5_mask = tokens.input_ids.to(device), tokens.attention_mask.to(device)
    # a batch without padding (every caption 512 tokens long; the memory measurement's stand-in tokenizer) needs no
    # mask, and T5's mask code reads the mask's values, which tensors on ``meta`` do not have (read on the CPU here)
    unmasked = bool(tokens.attention_mask.all())
    hidden = text_encoders[0](ids, output_hidden_states=False, attention_mask=None if unmasked else t5_mask)[0]
    lengths = t5_mask.sum(dim=1)
    positions = torch.arange(t5_mask.shape[1], device=device).unsqueeze(0)
    mask = (positions <= lengths.unsqueeze(1)).to(hidden.dtype)
    return {"t5": hidden, "mask": mask}


def joint_mask(text_mask: torch.Tensor, image_tokens: int) -> torch.Tensor:
    """The transformer's ``attention_mask`` over [text tokens, image tokens]: the text mask, then every image token
    attended — ChromaPipeline's ``_prepare_attention_mask``, in the text mask's dtype."""
    ones = torch.ones(text_mask.shape[0], image_tokens, device=text_mask.device, dtype=torch.bool)
    return torch.cat([text_mask, ones], dim=1)
