"""Training recipes: loss weighting, loss types, timestep ranges and noise, as kohya's sd-scripts has them.

Every formula follows sd-scripts (``library/custom_train_functions.py`` and ``library/train_util.py``) so a
setting means the same here as in a kohya guide; the code is our own. In short, with
``snr(t) = ᾱ_t / (1 - ᾱ_t)`` of the noise scheduler:

* min-SNR-γ (Hang et al. 2023, arXiv:2303.09556): per-sample weight ``min(snr, γ) / snr`` for an
  epsilon target, ``min(snr, γ) / (snr + 1)`` for a v-prediction target (sd-scripts' ``apply_snr_weight``).
* debiased estimation (arXiv:2310.08442): weight ``1 / sqrt(snr)`` for epsilon, ``1 / (snr + 1)`` for
  v-prediction, snr capped at 1000 (sd-scripts' ``apply_debiased_estimation``).
* timesteps drawn uniformly from ``[min_timestep, max_timestep)``; all equal ``max_timestep`` when the
  range is empty (sd-scripts' ``get_timesteps``).
* loss types ``l2``, ``l1``, ``huber`` = ``2c(sqrt(r² + c²) - c)`` and ``smooth_l1`` = ``2(sqrt(r² + c²) - c)``
  with the threshold ``c`` per sample from ``huber_schedule`` (``constant``: ``huber_c x huber_scale``;
  ``exponential``: ``exp(ln(huber_c) t / T) x huber_scale``; ``snr``: ``(1 - huber_c) / (1 + σ_t)² + huber_c``
  with ``σ_t = sqrt((1 - ᾱ_t) / ᾱ_t)``) (sd-scripts' ``get_huber_threshold_if_needed`` / ``conditional_loss``).
* noise offset (crosslabs.org "diffusion with offset noise"): ``noise + offset x N(0, 1)`` per (sample,
  channel); with an adaptive scale the offset grows by ``scale x |channel mean of the latent|``.
* multi-resolution (pyramid) noise: ``iterations`` levels, level ``i`` an upsampled ``N(0, 1)`` of
  ``1 / r^i`` the size (``r`` uniform in [2, 4)) weighted ``discount^i``; the sum is divided by its std.
* input perturbation (arXiv:2301.11706): the UNet sees ``add_noise(x0, noise + γ x N(0, 1), t)`` but is
  trained towards ``noise``.
* zero terminal SNR (arXiv:2305.08891): betas rescaled so ``sqrt(ᾱ)`` is shifted to 0 at the last step and
  scaled to keep its first value.

One difference, on purpose: sd-scripts draws the pyramid's ``r`` from Python's ``random``; here every draw
comes from torch's generator, so a step's draws are fixed by torch's RNG alone (the class half of prior
preservation forks only torch's RNG, and resume restores it exactly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

#: ``loss.loss_type`` values (sd-scripts' ``--loss_type``)
LOSS_TYPES = ("l2", "l1", "huber", "smooth_l1")
#: ``loss.huber_schedule`` values (sd-scripts' ``--huber_schedule``)
HUBER_SCHEDULES = ("snr", "exponential", "constant")
#: debiased estimation caps the SNR here: at t = 0 it is about 1175 for SD's schedule (sd-scripts does the same)
DEBIASED_SNR_CAP = 1000.0


@dataclass(frozen=True)
class Recipe:
    """The loss and noise settings of a run, as plain numbers (0 means off, as in sd-scripts' None)."""

    min_snr_gamma: float = 0.0
    debiased_estimation: bool = False
    loss_type: str = "l2"
    huber_schedule: str = "snr"
    huber_c: float = 0.1
    huber_scale: float = 1.0
    min_timestep: int = 0
    max_timestep: int = 1000
    noise_offset: float = 0.0
    noise_offset_random_strength: bool = False
    adaptive_noise_scale: float = 0.0
    multires_noise_iterations: int = 0
    multires_noise_discount: float = 0.3
    ip_noise_gamma: float = 0.0
    ip_noise_gamma_random_strength: bool = False
    zero_terminal_snr: bool = False

    @classmethod
    def from_config(cls, config: Any) -> Recipe:
        """From a TrainingConfig's ``loss`` and ``noise`` sections (defaults where a section is missing)."""
        loss, noise = getattr(config, "loss", None), getattr(config, "noise", None)
        values: dict[str, Any] = {}
        for section in (loss, noise):
            if section is None:
                continue
            for name in cls.__dataclass_fields__:
                if hasattr(section, name):
                    values[name] = getattr(section, name)
        return cls(**values)

    @property
    def weighted(self) -> bool:
        """Whether the loss needs per-sample weights (min-SNR-γ or debiased estimation)."""
        return self.min_snr_gamma > 0 or self.debiased_estimation


# --------------------------------------------------------------------------- SNR and weights


def snr_table(alphas_cumprod: torch.Tensor) -> torch.Tensor:
    """``ᾱ / (1 - ᾱ)`` for every timestep (float32; computed in float64 so late steps keep their digits)."""
    a = alphas_cumprod.detach().double().cpu()
    return (a / (1.0 - a)).float()


def snr_at(scheduler: Any, timesteps: torch.Tensor) -> torch.Tensor:
    """The scheduler's SNR at ``timesteps`` (on their device)."""
    return snr_table(scheduler.alphas_cumprod)[timesteps.cpu().long()].to(timesteps.device)


def min_snr_weights(snr: torch.Tensor, gamma: float, v_prediction: bool) -> torch.Tensor:
    """min-SNR-γ weights: ``min(snr, γ) / snr`` (epsilon) or ``min(snr, γ) / (snr + 1)`` (v-prediction).

    At ``snr = 0`` (the last step after zero-terminal-SNR rescaling) the epsilon weight is its limit, 1.
    """
    clipped = torch.clamp(snr, max=float(gamma))
    if v_prediction:
        return clipped / (snr + 1.0)
    return torch.where(snr > 0, clipped / snr.clamp(min=torch.finfo(snr.dtype).tiny), torch.ones_like(snr))


def debiased_weights(snr: torch.Tensor, v_prediction: bool) -> torch.Tensor:
    """Debiased estimation: ``1 / sqrt(snr)`` (epsilon) or ``1 / (snr + 1)`` (v-prediction), snr capped at 1000."""
    capped = torch.clamp(snr, max=DEBIASED_SNR_CAP)
    if v_prediction:
        return 1.0 / (capped + 1.0)
    return 1.0 / torch.sqrt(capped)


def timestep_range(recipe: Recipe, steps: int) -> tuple[int, int]:
    """The recipe's ``[min, max)`` inside the scheduler's ``steps`` timesteps; an empty range stays empty
    (one timestep: ``min(max, steps - 1)``, so ``min = max = 1000`` trains on the last one, 999)."""
    hi = min(int(recipe.max_timestep), steps)
    lo = min(int(recipe.min_timestep), hi)
    return (lo, hi) if lo < hi else (min(lo, steps - 1), min(lo, steps - 1))


def sample_timesteps(batch: int, min_timestep: int, max_timestep: int, device: torch.device | str) -> torch.Tensor:
    """``batch`` timesteps uniform in ``[min_timestep, max_timestep)``; all ``max_timestep`` if that is empty."""
    if min_timestep < max_timestep:
        return torch.randint(min_timestep, max_timestep, (batch,), device=device).long()
    return torch.full((batch,), int(max_timestep), device=device, dtype=torch.long)


def huber_threshold(recipe: Recipe, timesteps: torch.Tensor, scheduler: Any) -> torch.Tensor:
    """The Huber threshold ``c`` of each sample (float32, on the timesteps' device)."""
    t = timesteps.float()
    if recipe.huber_schedule == "constant":
        return torch.full_like(t, recipe.huber_c * recipe.huber_scale)
    if recipe.huber_schedule == "exponential":
        steps = int(scheduler.config.num_train_timesteps)
        alpha = -math.log(recipe.huber_c) / steps
        return torch.exp(-alpha * t) * recipe.huber_scale
    if recipe.huber_schedule == "snr":
        a = scheduler.alphas_cumprod.detach().double().cpu()[timesteps.cpu().long()]
        sigma = torch.sqrt((1.0 - a) / a)
        return ((1.0 - recipe.huber_c) / (1.0 + sigma) ** 2 + recipe.huber_c).float().to(timesteps.device)
    raise ValueError(f"unknown Huber schedule {recipe.huber_schedule!r}; use one of {', '.join(HUBER_SCHEDULES)}")


def elementwise_loss(pred: torch.Tensor, target: torch.Tensor, loss_type: str, c: torch.Tensor | None = None) -> torch.Tensor:
    """The unreduced loss of ``pred`` against ``target``; ``c`` is the per-sample Huber threshold."""
    if loss_type == "l2":
        return F.mse_loss(pred, target, reduction="none")
    if loss_type == "l1":
        return F.l1_loss(pred, target, reduction="none")
    if loss_type in ("huber", "smooth_l1"):
        if c is None:
            raise ValueError(f"loss type {loss_type!r} needs a Huber threshold")
        c = c.view(-1, *([1] * (pred.ndim - 1))).to(pred.dtype)
        smooth = torch.sqrt((pred - target) ** 2 + c**2) - c
        return 2 * c * smooth if loss_type == "huber" else 2 * smooth
    raise ValueError(f"unknown loss type {loss_type!r}; use one of {', '.join(LOSS_TYPES)}")


def diffusion_loss(
    recipe: Recipe, pred: torch.Tensor, target: torch.Tensor, timesteps: torch.Tensor, scheduler: Any, v_prediction: bool
) -> torch.Tensor:
    """The batch's mean loss under ``recipe`` (fp32). The plain recipe is exactly ``F.mse_loss(pred, target)``."""
    pred, target = pred.float(), target.float()
    if recipe.loss_type == "l2" and not recipe.weighted:
        return F.mse_loss(pred, target, reduction="mean")
    c = huber_threshold(recipe, timesteps, scheduler) if recipe.loss_type in ("huber", "smooth_l1") else None
    per_sample = elementwise_loss(pred, target, recipe.loss_type, c).mean(dim=list(range(1, pred.ndim)))
    if recipe.weighted:
        snr = snr_at(scheduler, timesteps).to(per_sample.device)
        if recipe.min_snr_gamma > 0:
            per_sample = per_sample * min_snr_weights(snr, recipe.min_snr_gamma, v_prediction)
        if recipe.debiased_estimation:
            per_sample = per_sample * debiased_weights(snr, v_prediction)
    return per_sample.mean()


# --------------------------------------------------------------------------- noise


def apply_noise_offset(
    latents: torch.Tensor, noise: torch.Tensor, offset: float | torch.Tensor, adaptive_scale: float = 0.0
) -> torch.Tensor:
    """``noise + offset x N(0, 1)`` per (sample, channel); ``adaptive_scale`` adds ``scale x |channel mean|``."""
    if adaptive_scale:
        mean = torch.abs(latents.float().mean(dim=(2, 3), keepdim=True))
        offset = torch.clamp(offset + adaptive_scale * mean, min=0.0)
    shift = torch.randn((latents.shape[0], latents.shape[1], 1, 1), device=latents.device, dtype=torch.float32)
    return (noise.float() + offset * shift).to(noise.dtype)


def pyramid_noise(noise: torch.Tensor, iterations: int, discount: float) -> torch.Tensor:
    """Multi-resolution noise on top of ``noise`` (B, C, H, W), rescaled to unit std over the whole tensor."""
    b, c, h, w = noise.shape
    out = noise.float().clone()
    for i in range(int(iterations)):
        r = 2.0 + 2.0 * float(torch.rand((), device=noise.device))  # not always 2x: between 2 and 4
        hn, wn = max(1, int(h / r**i)), max(1, int(w / r**i))
        low = torch.randn((b, c, hn, wn), device=noise.device, dtype=torch.float32)
        out += F.interpolate(low, size=(h, w), mode="bilinear", align_corners=False) * discount**i
        if hn == 1 or wn == 1:
            break  # the coarsest level is one pixel wide
    return (out / out.std()).to(noise.dtype)


def _strength(value: float, random_strength: bool, device: torch.device) -> float | torch.Tensor:
    """``value``, or a uniform draw from [0, value) when ``random_strength`` (sd-scripts' ``*_random_strength``)."""
    return torch.rand(1, device=device) * value if random_strength else value


def make_noise(recipe: Recipe, latents: torch.Tensor) -> torch.Tensor:
    """The noise the UNet learns to predict, with the recipe's offset and pyramid noise (sd-scripts' order)."""
    noise = torch.randn_like(latents)
    if recipe.noise_offset:
        offset = _strength(recipe.noise_offset, recipe.noise_offset_random_strength, latents.device)
        noise = apply_noise_offset(latents, noise, offset, recipe.adaptive_noise_scale)
    if recipe.multires_noise_iterations:
        noise = pyramid_noise(noise, recipe.multires_noise_iterations, recipe.multires_noise_discount)
    return noise


def noisy_latents(recipe: Recipe, scheduler: Any, latents: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The UNet's input: ``add_noise(latents, noise, t)``, with input-perturbation noise when set."""
    if recipe.ip_noise_gamma:
        gamma = _strength(recipe.ip_noise_gamma, recipe.ip_noise_gamma_random_strength, latents.device)
        perturbed = (noise.float() + gamma * torch.randn_like(latents, dtype=torch.float32)).to(noise.dtype)
        return scheduler.add_noise(latents, perturbed, t)
    return scheduler.add_noise(latents, noise, t)


def noise_and_timesteps(
    recipe: Recipe, scheduler: Any, latents: torch.Tensor, timesteps: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(noise, timesteps, noisy latents)`` of one batch; ``timesteps`` fixed when given (validation).

    The plain recipe draws exactly what the trainer drew before recipes existed: ``randn_like`` then
    ``randint(0, T)``.
    """
    noise = make_noise(recipe, latents)
    if timesteps is None:
        steps = int(scheduler.config.num_train_timesteps)
        lo, hi = timestep_range(recipe, steps)
        timesteps = sample_timesteps(latents.shape[0], lo, hi, latents.device)
    return noise, timesteps, noisy_latents(recipe, scheduler, latents, noise, timesteps)


# --------------------------------------------------------------------------- zero terminal SNR


def zero_terminal_snr_betas(betas: torch.Tensor) -> torch.Tensor:
    """Betas whose last ``ᾱ`` is 0 and first ``ᾱ`` unchanged (Lin et al. 2023, Algorithm 1)."""
    alphas_bar_sqrt = torch.cumprod(1.0 - betas.double(), dim=0).sqrt()
    first, last = alphas_bar_sqrt[0].clone(), alphas_bar_sqrt[-1].clone()
    alphas_bar_sqrt = (alphas_bar_sqrt - last) * (first / (first - last))
    alphas_bar = alphas_bar_sqrt**2
    alphas = torch.cat([alphas_bar[:1], alphas_bar[1:] / alphas_bar[:-1]])
    return (1.0 - alphas).to(betas.dtype)


def rescale_zero_terminal_snr(scheduler: Any) -> None:
    """Rescale a DDPM-style scheduler's ``betas`` / ``alphas`` / ``alphas_cumprod`` in place for zero terminal SNR.

    The scheduler is marked (``zero_terminal_snr = True``), so samplers made from it rescale too and step from
    the last timestep (:data:`SAMPLER_OPTIONS`, as the paper samples).
    """
    betas = zero_terminal_snr_betas(scheduler.betas)
    alphas = 1.0 - betas
    scheduler.betas = betas
    scheduler.alphas = alphas
    scheduler.alphas_cumprod = torch.cumprod(alphas, dim=0)
    scheduler.zero_terminal_snr = True


#: diffusers sampler options for a model trained with zero terminal SNR (Lin et al. 2023, §3.3: trailing steps)
SAMPLER_OPTIONS = {"rescale_betas_zero_snr": True, "timestep_spacing": "trailing"}


def sampler_options(scheduler: Any) -> dict[str, Any]:
    """Extra ``from_config`` options for a sampler made from ``scheduler`` (empty unless zero terminal SNR)."""
    return dict(SAMPLER_OPTIONS) if getattr(scheduler, "zero_terminal_snr", False) else {}


# --------------------------------------------------------------------------- metadata


def recipe_metadata(config: Any) -> dict[str, str]:
    """The recipe's kohya ``ss_*`` metadata, under the names sd-scripts' ``train_network.py`` writes.

    Values are written as sd-scripts writes them (``str()`` of its argument): a setting that is off there
    is ``None`` (``"None"``), floats as Python prints them (``"5.0"``), flags as ``"True"`` / ``"False"``.
    Settings sd-scripts has no metadata key for (the timestep range, the schedule's cycles and power)
    are not written.
    """
    r = Recipe.from_config(config)
    s = config.schedule
    v = getattr(config, "validation", None)

    def opt(value: float) -> str:
        return str(float(value)) if value else "None"

    meta = {
        "ss_min_snr_gamma": opt(r.min_snr_gamma),
        "ss_debiased_estimation": str(bool(r.debiased_estimation)),
        "ss_loss_type": r.loss_type,
        "ss_huber_schedule": r.huber_schedule,
        "ss_huber_c": str(float(r.huber_c)),
        "ss_huber_scale": str(float(r.huber_scale)),
        "ss_noise_offset": opt(r.noise_offset),
        "ss_noise_offset_random_strength": str(bool(r.noise_offset_random_strength)),
        "ss_adaptive_noise_scale": opt(r.adaptive_noise_scale),
        "ss_multires_noise_iterations": str(int(r.multires_noise_iterations)) if r.multires_noise_iterations else "None",
        "ss_multires_noise_discount": str(float(r.multires_noise_discount)),
        "ss_ip_noise_gamma": opt(r.ip_noise_gamma),
        "ss_ip_noise_gamma_random_strength": str(bool(r.ip_noise_gamma_random_strength)),
        "ss_zero_terminal_snr": str(bool(r.zero_terminal_snr)),
        "ss_lr_warmup_steps": str(float(s.warmup_ratio)) if getattr(s, "warmup_ratio", 0) else str(int(s.warmup_steps)),
    }
    validating = v is not None and (v.split > 0 or str(v.folder).strip())
    meta["ss_validation_split"] = str(float(v.split)) if v is not None else "0.0"
    meta["ss_validation_seed"] = str(int(v.seed)) if validating else "None"
    meta["ss_validate_every_n_steps"] = str(int(v.every_n_steps)) if validating else "None"
    return meta
