"""Samples during training: a ``StableDiffusion3Pipeline`` over the loaded model's own modules (nothing copied).

The scheduler is always ``FlowMatchEulerDiscreteScheduler`` from the model's config (shift 3.0): the sampler SD 3.5
was released with. The names the UNet families take ("ddim", "dpm++") mean epsilon / v samplers that do not apply
to a flow model, so every name gives the same one. Without T5 the pipeline gets ``text_encoder_3=None`` and puts
zeros in its place, as training does (:mod:`.text`).
"""

from __future__ import annotations

from typing import Any

import torch

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.core.families.sd35 import T5_TOKENS
from guitrainer.engine.families.sd35.loaded import denoiser_of, has_t5
from guitrainer.engine.models.types import LoadedModel


def pipeline(model: LoadedModel, scheduler: str = "default", device: Any = None, dtype: torch.dtype | None = None) -> Any:
    """The pipeline; ``device`` / ``dtype`` move (and cast) it there, None leaves the modules as they are."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

    del scheduler  # one sampler for a flow model (see the module docstring)
    t5 = has_t5(model)
    pipe = StableDiffusion3Pipeline(
        transformer=denoiser_of(model),
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(model.noise_scheduler.config),
        vae=model.vae,
        text_encoder=model.text_encoders[0],
        tokenizer=model.tokenizers[0],
        text_encoder_2=model.text_encoders[1],
        tokenizer_2=model.tokenizers[1],
        text_encoder_3=model.text_encoders[2] if t5 else None,
        tokenizer_3=model.tokenizers[2] if t5 else None,
    )
    if device is not None or dtype is not None:
        pipe.to(*(x for x in (device, dtype) if x is not None))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def size_multiple(model: LoadedModel) -> int:
    """Image sides are multiples of the VAE's downscaling times the transformer's patch (8 × 2 = 16 full size)."""
    return 2 ** (len(model.vae.config.block_out_channels) - 1) * int(denoiser_of(model).config.patch_size)


def sample(pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
    """One PIL image: the pipeline's latents, decoded by the VAE in its own dtype (``z / scale + shift``, the
    inverse of the latents the transformer trains on), so an fp32 VAE stays fp32 whatever the transformer runs in."""
    latents = pipe(
        prompt.prompt,
        negative_prompt=prompt.negative_prompt or None,
        num_inference_steps=prompt.steps,
        guidance_scale=prompt.guidance_scale,
        height=height,
        width=width,
        generator=generator,
        max_sequence_length=T5_TOKENS,
        output_type="latent",
    ).images
    vae = model.vae
    shift = getattr(vae.config, "shift_factor", None) or 0.0
    z = latents.to(vae.device, vae.dtype) / vae.config.scaling_factor + shift
    image = torch.nan_to_num(vae.decode(z).sample.float())
    return pipe.image_processor.postprocess(image, output_type="pil")[0]
