"""Samples from Flux during training: diffusers' FluxPipeline over the loaded parts (nothing copied).

The pipeline gets a scheduler of its own, made from the model's FlowMatchEulerDiscreteScheduler config (dev:
the resolution-dependent shift, μ from 0.5 at 256 image tokens to 1.15 at 4096; schnell: none), so sampling
never touches the training scheduler's state. Flux has one sampler, so every ``scheduler`` name the app passes
("ddim" for training samples, "dpm++" for class images) gets it. Its T5 length defaults to what the model
trains with (:mod:`.text`: 512 dev, 256 schnell) instead of the pipeline's fixed 512; guidance goes to dev's
guidance embedder, and schnell (no embedder) ignores it, as FluxPipeline does.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.flux1.latents import unpack
from guitrainer.engine.families.flux1.loading import denoiser_of, is_dev
from guitrainer.engine.families.flux1.text import t5_max_length
from guitrainer.engine.models.types import LoadedModel


@functools.cache
def sampler_class() -> type:
    """FluxPipeline whose ``max_sequence_length`` defaults to the trained T5 length (made on first use: diffusers
    loads only when sampling does)."""
    from diffusers import FluxPipeline

    class FluxSampler(FluxPipeline):
        """FluxPipeline with the T5 length the model trains with as its default."""

        def __call__(self, *args: Any, max_sequence_length: int | None = None, **kwargs: Any) -> Any:
            length = max_sequence_length or t5_max_length(is_dev(self.transformer))
            return super().__call__(*args, max_sequence_length=length, **kwargs)

    return FluxSampler


def build_pipeline(model: LoadedModel, device: Any = None, dtype: torch.dtype | None = None) -> Any:
    """The sampling pipeline sharing ``model``'s modules; moved to ``device`` / cast to ``dtype`` when given."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    pipe = sampler_class()(
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(model.noise_scheduler.config),
        vae=model.vae,
        text_encoder=model.text_encoders[0],
        tokenizer=model.tokenizers[0],
        text_encoder_2=model.text_encoders[1],
        tokenizer_2=model.tokenizers[1],
        transformer=denoiser_of(model),
    )
    if device is not None or dtype is not None:
        pipe.to(*(x for x in (device, dtype) if x is not None))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def size_multiple(model: LoadedModel) -> int:
    """Image sides are multiples of this: the VAE's downscaling (8) times the 2x2 packing."""
    return 2 ** (len(model.vae.config.block_out_channels) - 1) * 2


def sample(pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
    """One PIL image: the pipeline's packed latents unpacked and decoded in the VAE's own dtype (``z / scale +
    shift``). ``prompt.guidance_scale`` is dev's distilled guidance input (schnell ignores it); FluxPipeline has
    no negative prompt unless true CFG is asked for, so a negative prompt is not used."""
    packed = pipe(
        prompt.prompt,
        num_inference_steps=prompt.steps,
        guidance_scale=prompt.guidance_scale,
        height=height,
        width=width,
        generator=generator,
        output_type="latent",
    ).images
    vae = model.vae
    latents = unpack(packed, height // pipe.vae_scale_factor, width // pipe.vae_scale_factor)
    z = latents.to(vae.device, vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
    image = torch.nan_to_num(vae.decode(z).sample.float())
    return pipe.image_processor.postprocess(image, output_type="pil")[0]
