"""The training-recipe sections, kohya's sd-scripts names: ``[loss]``, ``[noise]``, ``[validation]``.

Loss weighting (min-SNR-γ, debiased estimation), loss type (L2, L1, Huber, smooth L1) and the timestep
range; noise offset, pyramid noise, input perturbation and zero terminal SNR; the validation split. The
engine computes them in :mod:`guitrainer.engine.recipes` and :mod:`guitrainer.engine.validation`, and the
LoRA's metadata names them as sd-scripts does. Also the rule that an LR-free optimizer gets lr = 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from guitrainer.base.paths import path_key
from guitrainer.config.families import DIFFUSION_FAMILIES
from guitrainer.config.fields import ConfigError, setting

#: the loss weightings and loss types, the noise recipes: for the UNet families' DDPM objective (flow matching has
#: its own settings, ``[flow]``)
_DDPM = ("model.family", DIFFUSION_FAMILIES)

if TYPE_CHECKING:
    from guitrainer.config.training import TrainingConfig

@dataclass
class LossConfig:
    """How the loss is computed: weighting over timesteps, the loss type, the timestep range (sd-scripts' names)."""

    min_snr_gamma: float = setting(
        0.0,
        label="Min-SNR γ",
        help="Min-SNR-γ loss weighting: caps the weight of low-noise timesteps so training converges faster "
        "(the paper and kohya's guides use 5). 0 turns it off. Correct for epsilon and v-prediction models.",
        minimum=0.0,
        maximum=100.0,
        advanced=True,
        applies=_DDPM,
    )
    debiased_estimation: bool = setting(
        False,
        label="Debiased estimation",
        help="Weight each timestep's loss by 1/√SNR (1/(SNR+1) for v-prediction), as kohya's --debiased_estimation_loss.",
        advanced=True,
        applies=_DDPM,
    )
    loss_type: Literal["l2", "l1", "huber", "smooth_l1"] = setting(
        "l2",
        label="Loss type",
        help="l2 (MSE) is the standard. Huber and smooth L1 are less thrown by outliers: L2 near zero, L1 far out.",
        choice_labels={"l2": "L2 (MSE)", "l1": "L1", "huber": "Huber", "smooth_l1": "Smooth L1"},
        advanced=True,
        applies=_DDPM,
    )
    huber_schedule: Literal["snr", "exponential", "constant"] = setting(
        "snr",
        label="Huber schedule",
        help="How the Huber threshold changes over timesteps (Huber and smooth L1 only): snr (kohya's default), "
        "exponential (from the scale down to Huber c × scale), or constant (Huber c × scale).",
        advanced=True,
        applies=_DDPM,
    )
    huber_c: float = setting(
        0.1,
        label="Huber c",
        help="The Huber threshold (decay parameter): residuals below it count as L2, above it as L1.",
        minimum=0.0001,
        maximum=10.0,
        advanced=True,
        applies=_DDPM,
    )
    huber_scale: float = setting(
        1.0, label="Huber scale", help="Scales the Huber threshold (constant and exponential schedules).", minimum=0.0001, maximum=100.0, advanced=True,
        applies=_DDPM,
    )
    min_timestep: int = setting(
        0,
        label="Lowest timestep",
        help="Train on timesteps from this one (0 = the least noisy) ...",
        minimum=0,
        maximum=1000,
        advanced=True,
    )
    max_timestep: int = setting(
        1000,
        label="Highest timestep",
        help="... up to, not including, this one (1000 = all of them). Equal to the lowest: that timestep only.",
        minimum=1,
        maximum=1000,
        advanced=True,
    )


@dataclass
class NoiseConfig:
    """The noise added to the latents (sd-scripts' names)."""

    noise_offset: float = setting(
        0.0,
        label="Noise offset",
        help="Adds a random offset per channel to the noise, so the LoRA can make darker darks and brighter brights "
        "(kohya's guides: about 0.05-0.1). 0 turns it off.",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
        applies=_DDPM,
    )
    noise_offset_random_strength: bool = setting(
        False, label="Random offset strength", help="Draw the noise offset's strength between 0 and the value each step.", advanced=True,
        applies=_DDPM,
    )
    adaptive_noise_scale: float = setting(
        0.0,
        label="Adaptive noise scale",
        help="Adds this × the latent's mean to the noise offset (needs a noise offset). 0 turns it off.",
        minimum=-1.0,
        maximum=1.0,
        advanced=True,
        applies=_DDPM,
    )
    multires_noise_iterations: int = setting(
        0,
        label="Pyramid noise levels",
        help="Multi-resolution (pyramid) noise: adds noise at this many coarser scales (guides: 6-10). 0 turns it off.",
        minimum=0,
        maximum=64,
        advanced=True,
        applies=_DDPM,
    )
    multires_noise_discount: float = setting(
        0.3,
        label="Pyramid noise discount",
        help="Each coarser level of pyramid noise is weighted by this power (kohya's default 0.3; 0.8 is common too).",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
        applies=_DDPM,
    )
    ip_noise_gamma: float = setting(
        0.0,
        label="Input perturbation",
        help="Input-perturbation noise (arXiv 2301.11706): the UNet's input gets this much extra noise, the target "
        "does not (about 0.1). 0 turns it off.",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
        applies=_DDPM,
    )
    ip_noise_gamma_random_strength: bool = setting(
        False, label="Random perturbation strength", help="Draw the input perturbation's strength between 0 and the value each step.", advanced=True,
        applies=_DDPM,
    )
    zero_terminal_snr: bool = setting(
        False,
        label="Zero terminal SNR",
        help="Rescale the noise schedule so the last timestep is pure noise (arXiv 2305.08891). For v-prediction models only.",
        advanced=True,
        applies=_DDPM,
    )


@dataclass
class ValidationConfig:
    """A held-out set of images scored at fixed timesteps and noise, so its loss is comparable over a run."""

    split: float = setting(
        0.0,
        label="Validation share",
        help="Share of the training images held out for the validation loss (0.1 = one in ten); 0 and no folder: off.",
        minimum=0.0,
        maximum=0.9,
        advanced=True,
    )
    folder: str = setting(
        "",
        label="Validation folder",
        help="A folder of images (with captions) to score instead of a share of the training images.",
        kind="folder",
        advanced=True,
    )
    every_n_steps: int = setting(
        50, label="Validate every", help="Score the validation images every N steps.", minimum=1, maximum=1_000_000, unit="steps", advanced=True
    )
    seed: int = setting(
        0,
        label="Validation seed",
        help="Fixes which images are held out and the noise they are scored with.",
        minimum=0,
        maximum=2**32 - 1,
        advanced=True,
    )


def recipe_errors(cfg: TrainingConfig) -> list[ConfigError]:
    """Problems between the recipe settings (loss, noise, validation) and the rest of the config."""
    out: list[ConfigError] = []
    loss, noise, val = cfg.loss, cfg.noise, cfg.validation
    if loss.min_timestep > loss.max_timestep:
        out.append(ConfigError("loss.min_timestep", f"must not exceed `loss.max_timestep` ({loss.max_timestep})"))
    if noise.adaptive_noise_scale and not noise.noise_offset:
        out.append(ConfigError("noise.adaptive_noise_scale", "needs a noise offset (`noise.noise_offset` above 0)"))
    if val.split and val.folder.strip():
        out.append(ConfigError("validation.split", "use a share of the images or a validation folder, not both"))
    if val.folder.strip() and path_key(val.folder) in {path_key(f.path) for f in cfg.dataset.folders if f.path}:
        out.append(ConfigError("validation.folder", f"{val.folder!r} is a training folder; the validation images must be others"))
    return out
