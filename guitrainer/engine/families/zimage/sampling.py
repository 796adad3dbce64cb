"""Samples from Z-Image during training: diffusers' ZImagePipeline over the loaded parts (nothing copied).

The pipeline gets a scheduler of its own from the model's FlowMatchEulerDiscreteScheduler config, so sampling never
touches the training scheduler's state. ``guidance_scale`` is the pipeline's classifier-free guidance: Z-Image-Turbo
is distilled to sample without it (its model card: 9 steps, guidance 0), Z-Image Base with it; the negative prompt
is used where one is given.
"""

from __future__ import annotations

from typing import Any

import torch

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.zimage.text import MAX_LENGTH
from guitrainer.engine.models.types import LoadedModel


def sample(pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
    """One PIL image from the pipeline (it decodes in the VAE's dtype: ``z / scale + shift``)."""
    return pipe(
        prompt.prompt,
        negative_prompt=prompt.negative_prompt or None,
        num_inference_steps=prompt.steps,
        guidance_scale=prompt.guidance_scale,
        height=height,
        width=width,
        generator=generator,
        max_sequence_length=MAX_LENGTH,
    ).images[0]
