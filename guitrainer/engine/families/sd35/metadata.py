"""The SD 3.5 part of a LoRA file's metadata, under sd-scripts' names (``sd3_train_network.py``
``update_metadata`` and ``train_network.py``) and SAI's ModelSpec.

Where sd-scripts' values are wrong for SD 3 we do not copy them:

* ``modelspec.architecture``: ModelSpec's ids as SwarmUI (its co-author's tool) lists them,
  ``stable-diffusion-v3.5-large/lora`` etc. (:data:`guitrainer.core.families.sd35.VARIANTS`), not sd-scripts'
  ``stable-diffusion-3-5-large/lora``, which no reader's table we found holds;
* ``modelspec.implementation``: Stability's SD 3.5 reference code, whose module names the file's keys are;
  sd-scripts falls through to "diffusers" (``determine_implementation`` has no SD 3 branch), though its keys are
  not diffusers' names;
* ``modelspec.prediction_type``: not written; sd-scripts writes "epsilon" (only Flux is exempted), which an SD 3
  model is not.

``ss_base_model_version`` is sd-scripts' own: "5-large", "5-medium" or "medium". ``ss_weighting_scheme`` means in
sd-scripts both how σ is drawn and how the loss is weighted; we write the sd-scripts name that gives our pair
(``logit_normal`` for logit-normal σ with an unweighted loss, else our loss weighting) and say the draw in
``ss_timestep_sampling``, with the shift in ``ss_discrete_flow_shift`` (sd-scripts' SD 3 trainer calls its shift
``--training_shift``; its Flux trainer writes this key). ``ss_mode_scale`` is sd-scripts' default, unused here.
"""

from __future__ import annotations

from guitrainer.config import TrainingConfig
from guitrainer.core.families.sd35 import FACTS, VARIANTS, Variant, version_of_base
from guitrainer.engine.families.sd35.loaded import variant_of
from guitrainer.engine.families.sd35.objective import settings
from guitrainer.engine.models.types import LoadedModel

#: the code whose module names a kohya SD 3.5 LoRA's keys follow
IMPLEMENTATION = "https://github.com/Stability-AI/sd3.5"
#: sd-scripts' ``--mode_scale`` default (we have no "mode" sampling)
MODE_SCALE = 1.29


def sd_scripts_weighting(timestep_sampling: str, weighting_scheme: str) -> str:
    """sd-scripts' ``--weighting_scheme`` that draws and weights as we did (see the module docstring)."""
    if weighting_scheme == "none" and timestep_sampling == "logit_normal":
        return "logit_normal"
    return weighting_scheme


def variant_for(config: TrainingConfig, model: LoadedModel | None) -> Variant:
    """The loaded model's variant; before it is loaded, what the base model's files say (else SD 3.5 Large)."""
    if model is not None:
        return variant_of(model)
    return VARIANTS[version_of_base(str(config.model.base)) or FACTS.base_model_version]


def metadata(config: TrainingConfig, model: LoadedModel | None) -> dict[str, str]:
    """The family's metadata keys (strings), for the model's variant and the run's flow settings."""
    variant = variant_for(config, model)
    flow = settings(config)
    return {
        "ss_network_module": "networks.lora_sd3",
        "ss_base_model_version": variant.version,
        "modelspec.architecture": f"{variant.architecture}/lora",
        "modelspec.implementation": IMPLEMENTATION,
        "ss_weighting_scheme": sd_scripts_weighting(flow.timestep_sampling, flow.weighting_scheme),
        "ss_logit_mean": f"{flow.logit_mean:g}",
        "ss_logit_std": f"{flow.logit_std:g}",
        "ss_mode_scale": f"{MODE_SCALE:g}",
        "ss_timestep_sampling": flow.timestep_sampling,
        "ss_discrete_flow_shift": f"{flow.shift:g}",
        "ss_model_prediction_type": flow.model_prediction_type,
        "ss_apply_lg_attn_mask": "False",
        "ss_apply_t5_attn_mask": "False",
    }
