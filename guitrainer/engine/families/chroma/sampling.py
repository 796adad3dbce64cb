"""Samples from Chroma during training: diffusers' ChromaPipeline over the loaded parts (nothing copied).

The pipeline gets a scheduler of its own from the model's FlowMatchEulerDiscreteScheduler config, so sampling never
touches the training scheduler's state. Chroma is not guidance-distilled: ``guidance_scale`` is real
classifier-free guidance (the pipeline's default 5.0, with the negative prompt when one is given), and its T5
length and masks are the ones :mod:`.text` trains with.
"""

from __future__ import annotations

from typing import Any

import torch

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.chroma.text import T5_MAX_LENGTH
from guitrainer.engine.families.flux1.latents import unpack
from guitrainer.engine.models.types import LoadedModel


def sample(pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
    """One PIL image: the pipeline's packed latents unpacked and decoded in the VAE's own dtype."""
    packed = pipe(
        prompt.prompt,
        negative_prompt=prompt.negative_prompt or None,
        num_inference_steps=prompt.steps,
        guidance_scale=prompt.guidance_scale,
        height=height,
        width=width,
        generator=generator,
        max_sequence_length=T5_MAX_LENGTH,
        output_type="latent",
    ).images
    vae = model.vae
    latents = unpack(packed, height // pipe.vae_scale_factor, width // pipe.vae_scale_factor)
    z = latents.to(vae.device, vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
    image = torch.nan_to_num(vae.decode(z).sample.float())
    return pipe.image_processor.postprocess(image, output_type="pil")[0]
