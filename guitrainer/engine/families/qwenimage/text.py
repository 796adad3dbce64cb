"""Qwen-Image's text conditioning: the last hidden state of Qwen2.5-VL-7B's language model for the prompt read
through Qwen-Image's system template, as diffusers' ``QwenImagePipeline._get_qwen_prompt_embeds`` computes it (so
training sees what sampling will).

The pipeline formats each prompt into its template (a system turn asking for a detailed description, the prompt as
the user's turn, the assistant's turn opened), runs the model with the attention mask, keeps ``hidden_states[-1]`` of
the real tokens and drops the template's first tokens (its ``prompt_template_encode_start_idx``, 34: the system turn
and ``<|im_start|>user\\n`` under Qwen2.5's tokenizer); what is left is the caption and the closing turns. Here the
count dropped is the template prefix's own token count under the model's tokenizer (34 for Qwen2.5's, so the same;
a test tokenizer gets its own), and samples are made from these embeddings, so the two never disagree.

The seam carries a batch as tensors: ``{"hidden": [B, 512, 3584], "mask": [B, 512]}`` (1 = a real token; padded with
zeros on the right to a fixed 512, so cached captions stack; :func:`cut` cuts a batch back to its longest caption as
the pipeline pads), which the transformer reads as its ``encoder_hidden_states`` and ``encoder_hidden_states_mask``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from guitrainer.core.families.qwenimage import FACTS

TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
#: QwenImagePipeline's tokenizer_max_length (captions longer than this many tokens are cut)
MAX_LENGTH = 1024
#: the caption tokens kept (QwenImagePipeline's max_sequence_length for samples); batches are padded to it, so cached
#: captions stack, and cut back to their longest by :func:`cut`
SEQUENCE = 512
#: what the pipeline drops under Qwen2.5's tokenizer (its prompt_template_encode_start_idx)
PIPELINE_DROP = 34


@functools.lru_cache(maxsize=8)
def _drop_for(tokenizer: Any) -> int:
    prefix = TEMPLATE.split("{}")[0]
    return len(tokenizer(prefix, add_special_tokens=False).input_ids)


def drop_count(tokenizer: Any) -> int:
    """The template prefix's tokens (the system turn and ``<|im_start|>user\\n``) under ``tokenizer``."""
    try:
        return _drop_for(tokenizer)
    except TypeError:  # an unhashable stand-in tokenizer (the memory measurement's)
        return PIPELINE_DROP


def encode(
    tokenizers: Sequence[Any], text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """``{"hidden": the language model's last hidden state of each caption's tokens [B, T, d] (padding zeroed), "mask":
    [B, T] (1 = a real token)}``, the template prefix dropped."""
    tokenizer = tokenizers[0]
    drop = drop_count(tokenizer)
    tokens = tokenizer([TEMPLATE.format(c) for c in captions], max_length=MAX_LENGTH + drop, padding=True,
                       truncation=True, return_tensors="pt")
    ids, mask = tokens.input_ids.to(device), tokens.attention_mask.to(device)
    unmasked = bool(tokens.attention_mask.all())  # the memory measurement's stand-in: no mask code on meta
    out = text_encoders[0](input_ids=ids, attention_mask=None if unmasked else mask, output_hidden_states=True)
    hidden = out.hidden_states[-1]
    rows = [hidden[i, drop:] for i in range(hidden.shape[0])] if unmasked else [
        h[m.bool()][drop:] for h, m in zip(hidden, mask)]  # each caption's real tokens, either padding side
    rows = [r[:SEQUENCE] for r in rows]
    padded = torch.stack([torch.cat([r, r.new_zeros(SEQUENCE - r.shape[0], r.shape[1])]) for r in rows])
    weights = torch.stack([torch.cat([r.new_ones(r.shape[0]), r.new_zeros(SEQUENCE - r.shape[0])]) for r in rows])
    return {"hidden": padded, "mask": weights}


def cut(text: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The batch's captions cut to its longest (the pipeline pads to the batch's longest), and the mask the
    transformer takes — None where no caption is padded, as the pipeline passes it."""
    hidden, mask = text["hidden"], text["mask"]
    if is_fake(mask) or mask.is_meta:  # the memory measurement: no values, so the caption the estimator counts
        return hidden[:, : min(mask.shape[1], FACTS.text_tokens)], None
    counts = (mask > 0.5).sum(dim=1)  # counted exactly: a bf16 mask (the text cache's) sums inexactly above 256
    longest = max(int(counts.max()), 1)
    keep = mask[:, :longest] > 0.5
    return hidden[:, :longest], None if bool(keep.all()) else keep
