"""Flux's text conditioning: CLIP-L's pooled output and T5-XXL's last hidden state, as FluxPipeline computes them.

``{"t5": [B, T, 4096], "pooled": [B, 768]}`` per batch of captions (batch first, so the text cache keeps one
entry per caption). The same tokenisation as diffusers' ``FluxPipeline.encode_prompt`` — CLIP padded to its 77
tokens, T5 padded to ``T`` tokens, no attention mask — so training sees what sampling will:

* ``T`` = 512 for dev, 256 for schnell: sd-scripts' ``--t5xxl_max_token_length`` defaults
  (``flux_train_network.py``: "256 for schnell, 512 for dev"); FluxPipeline defaults to 512.
* no T5 attention mask: sd-scripts' ``--apply_t5_attn_mask`` is off by default and the pipeline passes none
  (the padded positions carry T5's encoding of the pad tokens, which the transformer was trained with).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

#: T5 tokens per caption (sd-scripts' defaults)
T5_MAX_LENGTH = {"dev": 512, "schnell": 256}
#: the metadata value of ``ss_apply_t5_attn_mask``: this encoding never masks T5's padding
APPLY_T5_ATTN_MASK = False


def t5_max_length(dev: bool) -> int:
    return T5_MAX_LENGTH["dev" if dev else "schnell"]


def _ids(tokenizer: Any, captions: list[str], length: int, device: torch.device) -> torch.Tensor:
    out = tokenizer(captions, padding="max_length", max_length=length, truncation=True, return_tensors="pt")
    return out.input_ids.to(device)


def encode(
    tokenizers: Sequence[Any], text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device, *, dev: bool
) -> dict[str, torch.Tensor]:
    """``{"t5": last hidden state [B, T, d], "pooled": CLIP's pooled output [B, 768]}`` for ``captions``.

    ``text_encoders`` are (CLIP-L, T5-XXL), possibly wrapped (DDP): each is called, never unwrapped.
    """
    clip_tok, t5_tok = tokenizers[0], tokenizers[1]
    clip, t5 = text_encoders[0], text_encoders[1]
    pooled = clip(_ids(clip_tok, captions, clip_tok.model_max_length, device), output_hidden_states=False).pooler_output
    hidden = t5(_ids(t5_tok, captions, t5_max_length(dev), device), output_hidden_states=False)[0]
    return {"t5": hidden, "pooled": pooled}
