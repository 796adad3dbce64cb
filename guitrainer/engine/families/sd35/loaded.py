"""The :class:`~guitrainer.engine.models.types.LoadedModel` an SD 3.5 load returns, and how this package reads it.

Everything here about the LoadedModel's field names is in this one module: only :func:`loaded_model` and
:func:`denoiser_of` name the denoiser's field (the seam renamed it from ``unet`` once already).

An SD 3.5 LoadedModel holds ``text_encoders = [CLIP-L, CLIP-G]`` plus T5-XXL as a third when it was loaded
(``tokenizers`` alike); ``extra`` says which model it is (``"variant"``: sd-scripts' "5-large", "5-medium" or
"medium") and whether T5 is there (``"t5"``: "loaded" or "absent", the log line saying what that means).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from guitrainer.core.families import sd35 as facts
from guitrainer.engine.models.types import LoadedModel

T5_LOADED = "loaded"
T5_ABSENT = "absent"
#: what a run without T5 means, for the log and the Model page
NO_T5_NOTE = (
    "no T5-XXL: SD 3.5 trains and samples without it, zeros in its place (as diffusers' pipeline and sd-scripts do "
    "when T5 is left out); prompts are then read by the two CLIPs only"
)


def loaded_model(
    *,
    transformer: nn.Module,
    vae: nn.Module,
    text_encoders: list[nn.Module],
    tokenizers: list[Any],
    scheduler: Any,
    variant: str,
    path: str,
    identity: str,
    source: str,
    notes: tuple[str, ...] = (),
) -> LoadedModel:
    """An SD 3.5 LoadedModel (keyword arguments only: a renamed field is one line here)."""
    extra: dict[str, Any] = {
        "variant": variant,
        "t5": T5_LOADED if len(text_encoders) > 2 else T5_ABSENT,
        "notes": tuple(notes) + (() if len(text_encoders) > 2 else (NO_T5_NOTE,)),
    }
    return LoadedModel(
        denoiser=transformer,
        vae=vae,
        text_encoders=text_encoders,
        tokenizers=tokenizers,
        noise_scheduler=scheduler,
        family="sd35",
        path=path,
        extra=extra,
        identity=identity,
        source=source,
    )


def denoiser_of(model: LoadedModel) -> nn.Module:
    """The model's SD3Transformer2DModel."""
    return model.denoiser


def has_t5(model: LoadedModel) -> bool:
    return len(model.text_encoders) > 2


def variant_of(model: LoadedModel) -> facts.Variant:
    """Which MMDiT the model is: from the load's record, else from the transformer's config."""
    version = model.extra.get("variant") or facts.version_of_config(dict(denoiser_of(model).config))
    return facts.VARIANTS[version]
