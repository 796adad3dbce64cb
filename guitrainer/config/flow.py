"""The ``[flow]`` section: how flow-matching families (Flux, SD 3.5, …) draw the noise level and compare the
prediction, under sd-scripts' names. "auto" (and 0 for the shift) takes the family's published default, which
each family states with its source (``core/families/<name>.py``); :mod:`guitrainer.engine.flow_matching` has the
formulas."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from guitrainer.config.families import FLOW_FAMILIES
from guitrainer.config.fields import setting

_FLOW = ("model.family", FLOW_FAMILIES)


@dataclass
class FlowConfig:
    """Flow matching's timestep sampling, shift, prediction type, loss weighting and Flux's guidance input."""

    timestep_sampling: Literal["auto", "uniform", "sigmoid", "logit_normal", "shift", "flux_shift"] = setting(
        "auto",
        label="Timestep sampling",
        help="How the noise level of each training image is drawn (sd-scripts' --timestep_sampling): uniform; "
        "sigmoid of a normal draw; logit-normal (SD 3's paper); shift (sigmoid, pushed to more noise by the shift); "
        "flux_shift (sigmoid, shifted by the image's size as Flux samples). Auto: the model's published default.",
        choice_labels={"auto": "Model's default", "logit_normal": "Logit-normal", "flux_shift": "Flux shift (by size)"},
        advanced=True,
        applies=_FLOW,
    )
    discrete_flow_shift: float = setting(
        0.0,
        label="Shift",
        help="Pushes the noise levels towards more noise: σ' = shift·σ / (1 + (shift − 1)·σ) (sd-scripts' "
        "--discrete_flow_shift). 1 leaves them as drawn; 0 takes the model's default (Flux 3.1582, SD 3.5 3.0).",
        minimum=0.0,
        maximum=100.0,
        advanced=True,
        applies=_FLOW,
    )
    sigmoid_scale: float = setting(
        1.0, label="Sigmoid scale", help="Scale of the normal draw inside the sigmoid (sd-scripts' --sigmoid_scale).",
        minimum=0.01, maximum=100.0, advanced=True, applies=_FLOW,
    )
    logit_mean: float = setting(
        0.0, label="Logit mean", help="Mean of the logit-normal draw (diffusers' --logit_mean).",
        minimum=-10.0, maximum=10.0, advanced=True, applies=_FLOW,
    )
    logit_std: float = setting(
        1.0, label="Logit std", help="Standard deviation of the logit-normal draw (diffusers' --logit_std).",
        minimum=0.01, maximum=10.0, advanced=True, applies=_FLOW,
    )
    model_prediction_type: Literal["auto", "raw", "sigma_scaled"] = setting(
        "auto",
        label="Prediction type",
        help="raw: the prediction is compared with the velocity (noise − image). sigma_scaled: turned into the clean "
        "image's estimate and compared with it (SD 3's preconditioning). Auto: the model's default (Flux raw, SD 3.5 "
        "sigma_scaled).",
        advanced=True,
        applies=_FLOW,
    )
    weighting_scheme: Literal["auto", "none", "sigma_sqrt", "cosmap"] = setting(
        "auto",
        label="Loss weighting",
        help="Per-image loss weight by noise level (diffusers' --weighting_scheme): none, sigma_sqrt (σ⁻²), cosmap. "
        "Auto: none.",
        advanced=True,
        applies=_FLOW,
    )
    guidance_scale: float = setting(
        1.0,
        label="Guidance during training",
        help="Flux.1 dev's guidance input while training (sd-scripts' --guidance_scale; its guide recommends 1.0). "
        "Sampling uses the Sampling settings' guidance.",
        minimum=0.0,
        maximum=30.0,
        advanced=True,
        applies=("model.family", ("flux1",)),
    )
