"""Samples during training: a ``StableDiffusion3Pipeline`` over the loaded model's own modules (nothing copied).

The scheduler is always ``FlowMatchEulerDiscreteScheduler`` from the model's config (shift 3.0): the sampler SD 3.5
was released with. The names the UNet families take ("ddim", "dpm++") mean epsilon / v samplers that do not apply
to a flow model, so every name gives the same one. Without T5 the pipeline gets ``text_encoder_3=None`` and puts
zeros in its place, as training does (:mod:`.text`).
"""

from __future__ import annotations

from typing import Any

import torch

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
