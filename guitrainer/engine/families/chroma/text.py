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

**The transformer gets each caption cut to those tokens, not a mask.** ChromaPipeline hands the transformer that mask
as a float tensor, which scaled-dot-product attention *adds* to the scores (+1 for a kept token, +0 for padding)
instead of masking: the ~500 padding tokens stay in (diffusers issues #12116, #11724, #13619). ComfyUI, lodestones'
trainer and sd-scripts keep the real tokens and one padding token, so that is what training sees here
(:func:`lengths`, the family's ``predict``) and what samples are made with (:mod:`.sampling` passes the cut
embeddings to the pipeline): the conditioning a LoRA is used with in ComfyUI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

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


def lengths(mask: torch.Tensor) -> list[int]:
    """Each caption's tokens the transformer sees (its real tokens and one padding token), counted exactly whatever
    the mask's dtype (a bf16 sum rounds above 256). A mask without values — the memory measurement's fake tensors —
    keeps every token: the estimator counts Chroma's 512."""
    if is_fake(mask) or mask.is_meta:
        return [int(mask.shape[1])] * int(mask.shape[0])
    return [int(n) for n in (mask > 0.5).sum(dim=1).tolist()]
