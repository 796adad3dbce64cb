"""Samples from Qwen-Image during training: diffusers' QwenImagePipeline over the loaded parts (nothing copied).

The pipeline gets a scheduler of its own from the model's FlowMatchEulerDiscreteScheduler config, so sampling never
touches the training scheduler's state. The prompts are encoded exactly as :mod:`.text` encodes training's captions
(the pipeline's own encoding drops a fixed 34 template tokens, right only under Qwen2.5's tokenizer) and handed to
the pipeline as embeddings. Qwen-Image is not guidance-distilled: ``guidance_scale`` is the pipeline's
``true_cfg_scale`` (its default 4.0), with the negative prompt — or " ", as Qwen's own examples pass it — as the
unconditional side; at a scale of 1 or less no unconditional pass is made.
"""

from __future__ import annotations

from typing import Any

import torch

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.qwenimage.text import SEQUENCE, cut, encode
from guitrainer.engine.models.types import LoadedModel

#: what Qwen-Image's model card passes as the negative prompt when none is wanted
EMPTY_NEGATIVE = " "


def _embeds(pipe: Any, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One prompt's caption features cut to its tokens (:func:`.text.cut`), and an all-ones mask over them."""
    hidden, _mask = cut(encode([pipe.tokenizer], [pipe.text_encoder], [prompt], pipe.text_encoder.device))
    return hidden, torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)


def sample(pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
    """One PIL image (the pipeline decodes in the VAE's dtype: ``z · latents_std + latents_mean``)."""
    with torch.no_grad():
        positive, positive_mask = _embeds(pipe, prompt.prompt)
        cfg = prompt.guidance_scale > 1.0
        negative, negative_mask = _embeds(pipe, prompt.negative_prompt or EMPTY_NEGATIVE) if cfg else (None, None)
    return pipe(
        prompt_embeds=positive,
        prompt_embeds_mask=positive_mask,
        negative_prompt_embeds=negative,
        negative_prompt_embeds_mask=negative_mask,
        true_cfg_scale=max(float(prompt.guidance_scale), 1.0),
        num_inference_steps=prompt.steps,
        height=height,
        width=width,
        generator=generator,
        max_sequence_length=SEQUENCE,
    ).images[0]
