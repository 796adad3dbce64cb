"""Z-Image's text conditioning: Qwen3-4B's second-to-last hidden state for the prompt read through Qwen3's chat
template, as diffusers' ``ZImagePipeline._encode_prompt`` computes it (so training sees what sampling will).

The pipeline wraps each prompt as a user message (``apply_chat_template(…, add_generation_prompt=True,
enable_thinking=True)``), pads to 512 tokens, runs Qwen3 with the attention mask and keeps ``hidden_states[-2]`` of
the real tokens only: each caption is a sequence of its own length. The seam carries a batch as tensors, so here it
is ``{"hidden": [B, 512, 2560], "mask": [B, 512]}`` (1 = a real token, the rest zeros), and :func:`captions_of`
cuts each caption back to its own tokens for the transformer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from guitrainer.core.families.zimage import FACTS

MAX_LENGTH = 512  # ZImagePipeline's max_sequence_length


def templated(tokenizer: Any, caption: str) -> str:
    """``caption`` as the pipeline gives it to Qwen3: one user message and the assistant's turn opened."""
    if not getattr(tokenizer, "chat_template", None):  # the memory measurement's stand-in tokenizer
        return caption
    return tokenizer.apply_chat_template([{"role": "user", "content": caption}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)


def encode(
    tokenizers: Sequence[Any], text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """``{"hidden": Qwen3's hidden_states[-2] [B, T, d] (padding zeroed), "mask": [B, T] (1 = a real token)}``."""
    tokenizer = tokenizers[0]
    tokens = tokenizer([templated(tokenizer, c) for c in captions], padding="max_length", max_length=MAX_LENGTH,
                       truncation=True, return_tensors="pt")
    ids, mask = tokens.input_ids.to(device), tokens.attention_mask.to(device)
    # a batch without padding (the memory measurement's stand-in) needs no mask: T5 / Qwen mask code reads values,
    # which tensors on ``meta`` do not have (read on the CPU here)
    unmasked = bool(tokens.attention_mask.all())
    out = text_encoders[0](input_ids=ids, attention_mask=None if unmasked else mask.bool(), output_hidden_states=True)
    hidden = out.hidden_states[-2]
    weights = mask.to(hidden.dtype)
    return {"hidden": hidden * weights.unsqueeze(-1), "mask": weights}


def captions_of(text: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Each caption's own tokens (``[n_i, d]``), as ``ZImagePipeline._encode_prompt`` returns them: the real tokens
    are one run, at the start (the tokenizer pads on the right) or at the end (on the left)."""
    out = []
    for hidden, mask in zip(text["hidden"], text["mask"]):
        if is_fake(mask) or mask.is_meta:  # the memory measurement: no values, so the caption the estimator counts
            out.append(hidden[: min(mask.shape[0], FACTS.text_tokens)])
            continue
        n = int((mask > 0.5).sum())  # counted exactly: a bf16 mask (the text cache's) sums inexactly above 256
        left_padded = n < mask.shape[0] and bool(mask[0] == 0)
        out.append(hidden[mask.shape[0] - n:] if left_padded else hidden[:n])
    return out
