"""Flow matching, the objective Flux, SD 3.5, Z-Image, Chroma and Qwen-Image train with: the noisy input, the
target, how the noise level σ is drawn, and how the loss is weighted.

With latents ``x0``, noise ``ε`` and a noise level ``σ`` in [0, 1] per sample (Esser et al. 2024, "Scaling
Rectified Flow Transformers", arXiv:2403.03206; the diffusers and sd-scripts trainers agree):

* the model sees ``x_σ = (1 − σ)·x0 + σ·ε`` (:func:`noisy_input`) and predicts the velocity ``v = ε − x0``
  (:func:`velocity_target`);
* ``model_prediction_type = "raw"`` compares the prediction with ``v``; ``"sigma_scaled"`` (SD 3's
  preconditioning: diffusers' ``precondition_outputs``, sd-scripts' SD 3 trainer) turns it into the clean-latent
  estimate ``x_σ − σ·pred`` and compares that with ``x0`` — the velocity loss times σ². (sd-scripts' Flux trainer
  compares that estimate with ``v`` instead; we do not copy that mismatch.)
* σ is drawn by ``timestep_sampling`` (sd-scripts' ``--timestep_sampling`` and diffusers'
  ``compute_density_for_timestep_sampling``; the formulas are theirs, the code is ours):
  ``uniform`` U(0, 1); ``sigmoid`` sigmoid(s·N(0, 1)); ``logit_normal`` sigmoid(N(m, d)); ``shift``
  the sigmoid draw pushed to more noise by ``shift·σ / (1 + (shift − 1)·σ)`` (``--discrete_flow_shift``);
  ``flux_shift`` the sigmoid draw shifted by the image's size, ``μ`` growing linearly from 0.5 at 256 image
  tokens to 1.15 at 4096 and ``σ ← e^μ / (e^μ + 1/σ − 1)`` (the shift Flux samples with, sd-scripts'
  ``flux_shift``). ``uniform`` and ``logit_normal`` are then shifted by ``shift`` too (diffusers applies its
  scheduler's shift to every draw; 1 leaves σ as drawn).
* ``weighting_scheme`` (diffusers' ``compute_loss_weighting_for_sd3``): ``none`` 1, ``sigma_sqrt`` σ⁻²,
  ``cosmap`` 2 / (π (1 − 2σ + 2σ²)).
* the transformer's timestep is ``σ·1000`` (what their schedulers call the timestep); each family converts it to
  what its transformer takes (Flux wants σ itself, SD 3 the ×1000 value).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from guitrainer.config import TrainingConfig

SAMPLINGS = ("uniform", "sigmoid", "logit_normal", "shift", "flux_shift")
PREDICTION_TYPES = ("raw", "sigma_scaled")
WEIGHTINGS = ("none", "sigma_sqrt", "cosmap")
#: the timestep scale of the flow-matching schedulers (FlowMatchEulerDiscreteScheduler.num_train_timesteps)
NUM_TRAIN_TIMESTEPS = 1000


@dataclass(frozen=True)
class FlowSettings:
    """How a flow-matching run draws σ and compares the prediction (the ``[flow]`` section, resolved per family)."""

    timestep_sampling: str = "uniform"
    shift: float = 1.0
    sigmoid_scale: float = 1.0
    logit_mean: float = 0.0
    logit_std: float = 1.0
    model_prediction_type: str = "raw"
    weighting_scheme: str = "none"
    min_sigma: float = 0.0
    max_sigma: float = 1.0

    def __post_init__(self) -> None:
        if self.timestep_sampling not in SAMPLINGS:
            raise ValueError(f"`timestep_sampling` must be one of {SAMPLINGS}, got {self.timestep_sampling!r}")
        if self.model_prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"`model_prediction_type` must be one of {PREDICTION_TYPES}, got {self.model_prediction_type!r}")
        if self.weighting_scheme not in WEIGHTINGS:
            raise ValueError(f"`weighting_scheme` must be one of {WEIGHTINGS}, got {self.weighting_scheme!r}")


def shifted(sigma: torch.Tensor, shift: float) -> torch.Tensor:
    """``shift·σ / (1 + (shift − 1)·σ)``: more noise for shift > 1, the identity for 1."""
    if shift == 1.0:
        return sigma
    return shift * sigma / (1 + (shift - 1) * sigma)


def flux_mu(image_tokens: int) -> float:
    """Flux's resolution shift μ: linear in the image's token count, 0.5 at 256 tokens and 1.15 at 4096."""
    slope = (1.15 - 0.5) / (4096 - 256)
    return 0.5 + slope * (image_tokens - 256)


def time_shifted(sigma: torch.Tensor, mu: float) -> torch.Tensor:
    """``e^μ / (e^μ + 1/σ − 1)``, the exponential time shift (σ = 0 stays 0)."""
    e = math.exp(mu)
    return torch.where(sigma > 0, e / (e + (1 / sigma.clamp_min(1e-12) - 1)), sigma)


def sample_sigmas(
    settings: FlowSettings, batch: int, *, image_tokens: int, device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``batch`` noise levels drawn as ``settings`` says, from torch's RNG (or ``generator``), in [min, max]."""
    kind = settings.timestep_sampling
    if kind == "uniform":
        sigma = torch.rand(batch, generator=generator, device=device)
    elif kind == "logit_normal":
        sigma = torch.sigmoid(settings.logit_mean + settings.logit_std * torch.randn(batch, generator=generator, device=device))
    else:  # sigmoid, shift, flux_shift: a sigmoid of a scaled normal draw
        sigma = torch.sigmoid(settings.sigmoid_scale * torch.randn(batch, generator=generator, device=device))
    if kind == "flux_shift":
        sigma = time_shifted(sigma, flux_mu(image_tokens))
    elif kind != "sigmoid":
        sigma = shifted(sigma, settings.shift)
    low, high = settings.min_sigma, settings.max_sigma
    return sigma * (high - low) + low


def fixed_sigmas(count: int, settings: FlowSettings) -> list[float]:
    """``count`` evenly spaced noise levels (the middle of each of ``count`` equal parts of [min, max]), for a
    validation loss that is comparable between steps."""
    low, high = settings.min_sigma, settings.max_sigma
    return [low + (high - low) * (i + 0.5) / count for i in range(count)]


def _per_sample(sigma: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return sigma.to(like.dtype).reshape(-1, *([1] * (like.dim() - 1)))


def noisy_input(latents: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``(1 − σ)·x0 + σ·ε``, σ per sample."""
    s = _per_sample(sigma, latents)
    return (1 - s) * latents + s * noise


def velocity_target(latents: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``ε − x0``: the velocity of the straight path from the latents to the noise."""
    return noise - latents


def loss_weighting(scheme: str, sigma: torch.Tensor) -> torch.Tensor:
    """The per-sample loss weight of ``scheme`` at ``sigma``."""
    if scheme == "sigma_sqrt":
        return sigma.clamp_min(1e-6) ** -2.0
    if scheme == "cosmap":
        return 2.0 / (math.pi * (1 - 2 * sigma + 2 * sigma**2))
    return torch.ones_like(sigma)


def compared(
    settings: FlowSettings, prediction: torch.Tensor, noisy: torch.Tensor, latents: torch.Tensor, noise: torch.Tensor,
    sigma: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(what the loss compares, its target) in fp32: the velocity and ``ε − x0`` (``raw``), or the clean-latent
    estimate ``x_σ − σ·pred`` and ``x0`` (``sigma_scaled``)."""
    pred = prediction.float()
    if settings.model_prediction_type == "sigma_scaled":
        return noisy.float() - _per_sample(sigma, pred) * pred, latents.float()
    return pred, velocity_target(latents.float(), noise.float())


def flow_loss(
    settings: FlowSettings, prediction: torch.Tensor, noisy: torch.Tensor, latents: torch.Tensor, noise: torch.Tensor,
    sigma: torch.Tensor,
) -> torch.Tensor:
    """The weighted mean squared error of one micro-batch (fp32)."""
    value, target = compared(settings, prediction, noisy, latents, noise, sigma)
    per_sample = ((value - target) ** 2).flatten(1).mean(dim=1)
    return (loss_weighting(settings.weighting_scheme, sigma.float()) * per_sample).mean()


def settings_for(config: TrainingConfig, defaults: Mapping[str, Any]) -> FlowSettings:
    """The run's :class:`FlowSettings`: the ``[flow]`` section, "auto" (and a shift of 0) replaced by the family's
    ``defaults`` (its :attr:`~guitrainer.core.families.facts.FamilyFacts.flow_defaults`), the noise-level range
    from ``loss.min_timestep`` / ``loss.max_timestep`` (of 1000, as the timestep)."""
    flow, loss = config.flow, config.loss

    def chosen(name: str, fallback: Any) -> Any:
        value = getattr(flow, name)
        return defaults.get(name, fallback) if value in ("auto", 0.0) else value

    return FlowSettings(
        timestep_sampling=chosen("timestep_sampling", "uniform"),
        shift=float(chosen("discrete_flow_shift", 1.0)),
        sigmoid_scale=float(flow.sigmoid_scale),
        logit_mean=float(flow.logit_mean),
        logit_std=float(flow.logit_std),
        model_prediction_type=chosen("model_prediction_type", "raw"),
        weighting_scheme=chosen("weighting_scheme", "none"),
        min_sigma=loss.min_timestep / NUM_TRAIN_TIMESTEPS,
        max_sigma=min(loss.max_timestep, NUM_TRAIN_TIMESTEPS) / NUM_TRAIN_TIMESTEPS,
    )
