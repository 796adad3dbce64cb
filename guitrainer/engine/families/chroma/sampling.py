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
from guitrainer.engine.families.chroma.loading import denoiser_of
from guitrainer.engine.families.chroma.text import T5_MAX_LENGTH
from guitrainer.engine.families.flux1.latents import unpack
from guitrainer.engine.models.types import LoadedModel


def build_pipeline(model: LoadedModel, device: Any = None, dtype: torch.dtype | None = None) -> Any:
    """The sampling pipeline sharing ``model``'s modules; moved to ``device`` / cast to ``dtype`` when given."""
    from diffusers import ChromaPipeline, FlowMatchEulerDiscreteScheduler

    pipe = ChromaPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(model.noise_scheduler.config),
        vae=model.vae,
        text_encoder=model.text_encoders[0],
        tokenizer=model.tokenizers[0],
        transformer=denoiser_of(model),
    )
    if device is not None or dtype is not None:
        pipe.to(*(x for x in (device, dtype) if x is not None))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def size_multiple(model: LoadedModel) -> int:
    """The VAE's downscaling times the 2x2 packing (16 for Flux's VAE)."""
    return 2 ** (len(model.vae.config.block_out_channels) - 1) * 2


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
