"""SD 3.5's training objective: flow matching (:mod:`guitrainer.engine.flow_matching`) with the family's defaults.

* **draw**: σ from ``flow_matching.sample_sigmas`` with the run's ``[flow]`` settings, "auto" resolved to SD 3.5's
  published defaults (:data:`guitrainer.core.families.sd35.FACTS` ``flow_defaults``: logit-normal σ through
  shift 3.0, as diffusers' SD 3 trainer draws them); the noise from torch's RNG after σ; the noisy latents
  ``(1 − σ)·x0 + σ·ε``. ``Draw.timesteps`` holds σ itself, ``Draw.target`` the velocity ε − x0.
* **predict**: ``SD3Transformer2DModel(hidden_states, encoder_hidden_states, pooled_projections, timestep)`` with
  the timestep on the 0–1000 scale, σ·1000 — what the diffusers pipeline and sd-scripts pass (the transformer's
  sinusoidal embedding was trained on that scale; Flux, by contrast, takes σ and multiplies inside).
* **loss**: ``flow_matching.flow_loss``: "sigma_scaled" (SD 3's preconditioning, the default) compares the
  clean-latent estimate ``x_σ − σ·pred`` with x0; "raw" compares the prediction with ε − x0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from guitrainer.config import TrainingConfig
from guitrainer.core.families.sd35 import FACTS
from guitrainer.engine import flow_matching
from guitrainer.engine.families.base import Draw, TextConditioning


def settings(config: TrainingConfig) -> flow_matching.FlowSettings:
    """The run's flow-matching settings, "auto" taken from SD 3.5's defaults."""
    return flow_matching.settings_for(config, FACTS.flow_defaults)


def image_tokens(latents: torch.Tensor) -> int:
    """Tokens the transformer makes of these latents (2 × 2 patches): what ``flux_shift`` sampling scales with."""
    return (latents.shape[-2] // FACTS.patch) * (latents.shape[-1] // FACTS.patch)


def draw(config: TrainingConfig, latents: torch.Tensor, timesteps: torch.Tensor | None) -> Draw:
    """σ (``timesteps``, or drawn), the noise and the noisy latents of one micro-batch."""
    if timesteps is None:
        sigma = flow_matching.sample_sigmas(
            settings(config), latents.shape[0], image_tokens=image_tokens(latents), device=latents.device
        )
    else:
        sigma = timesteps.to(device=latents.device, dtype=torch.float32)
    noise = torch.randn_like(latents)
    noisy = flow_matching.noisy_input(latents, noise, sigma)
    return Draw(noise=noise, timesteps=sigma, noisy=noisy, target=flow_matching.velocity_target(latents, noise))


def predict(denoiser: nn.Module, draw: Draw, text: TextConditioning, batch: Mapping[str, Any]) -> torch.Tensor:
    """The transformer's output for the draw (its dtype; the caller's autocast decides the compute dtype)."""
    del batch  # SD 3.5 takes no per-image extras (no size / crop conditioning, unlike SDXL)
    timestep = draw.timesteps * flow_matching.NUM_TRAIN_TIMESTEPS
    return denoiser(
        hidden_states=draw.noisy,
        encoder_hidden_states=text["hidden"],
        pooled_projections=text["pooled"],
        timestep=timestep,
        return_dict=False,
    )[0]


def loss(config: TrainingConfig, prediction: torch.Tensor, draw: Draw, latents: torch.Tensor) -> torch.Tensor:
    """The micro-batch's fp32 loss."""
    return flow_matching.flow_loss(settings(config), prediction, draw.noisy, latents, draw.noise, draw.timesteps)


def validation_timesteps(config: TrainingConfig, count: int) -> list[float]:
    """``count`` fixed σ spread over the run's [min, max] range."""
    return flow_matching.fixed_sigmas(count, settings(config))
