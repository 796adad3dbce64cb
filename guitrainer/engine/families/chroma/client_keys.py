"""Chroma's file layout as the clients read it: the :class:`~guitrainer.engine.network.client_layout.ClientLayout`
Verify merges a Chroma LoRA by (:mod:`guitrainer.engine.verify.client_rules`).

ComfyUI's Chroma is a Flux: ``comfy/model_base.py`` declares ``class Chroma(Flux)``, so ``comfy/lora.py``
``model_lora_keys_unet`` reads a Chroma LoRA as it reads Flux's — kohya's ``lora_unet_<BFL path, . -> _>`` for every
weight of the model (its generic loop), and diffusers' names through ``comfy.utils.flux_to_diffusers`` called with
the Chroma model's own ``unet_config`` (its Flux branch). That table is Flux's
(:func:`guitrainer.engine.families.flux1.client_keys.flux_to_diffusers`, transcribed from ComfyUI), of which the
entries naming Flux-only layers (the modulation Linears, ``time_in`` / ``vector_in`` / ``guidance_in``, the final
adaLN) point at nothing in a Chroma model: :func:`denoiser_map` keeps the entries whose diffusers parameter the
model has. Nothing here imports :mod:`.convert` (the converter and the LoRA writer's table), so the writer and this
reader meet only in the file.
"""

from __future__ import annotations

from torch import nn

from guitrainer.engine.families.flux1 import client_keys as flux_client_keys
from guitrainer.engine.network.client_layout import ClientLayout, Original


def denoiser_map(transformer: nn.Module) -> dict[str, Original]:
    """ComfyUI's table for this Chroma transformer (its numbers from its config, as ComfyUI detects them), limited
    to the parameters it has."""
    table = flux_client_keys.denoiser_map(transformer)
    own = {name for name, _ in transformer.named_parameters()}
    return {k: v for k, v in table.items() if k in own}


KOHYA_READERS = (
    "ComfyUI reads it (class Chroma(Flux): model_lora_keys_unet names every weight lora_unet_<BFL path>), and so "
    "does kohya sd-scripts (networks/lora_flux.py with --model_type chroma). diffusers' ChromaPipeline loads it "
    "through FluxLoraLoaderMixin, whose kohya converter reads Flux's block names at Flux.1's full width (3072): "
    "full-size Chroma files load, files of another width do not."
)

LAYOUT = ClientLayout(
    denoiser=denoiser_map,
    text_encoders=("t5xxl",),
    diffusers_spellings=flux_client_keys.LAYOUT.diffusers_spellings,
    readers={"kohya": KOHYA_READERS},
)
