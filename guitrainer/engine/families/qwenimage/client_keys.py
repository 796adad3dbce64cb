"""Qwen-Image's file layout as ComfyUI reads it: the :class:`~guitrainer.engine.network.client_layout.ClientLayout`
Verify merges a Qwen-Image LoRA by (:mod:`guitrainer.engine.verify.client_rules`).

ComfyUI's Qwen-Image (``comfy/ldm/qwen_image/model.py``) keeps diffusers' module names (``transformer_blocks.N.attn.
to_q``, ``img_mod.1``, ``img_mlp.net.0.proj``; only the weightless RoPE module is named otherwise), so its table is
the identity: every diffusers weight is the original weight of the same name. ``comfy/lora.py``
``model_lora_keys_unet`` names each of them ``lora_unet_<path with _>`` and ``diffusion_model.<path>`` (the generic
loop), and its QwenImage branch adds ``<path>``, ``transformer.<path>`` and ``lycoris_<path with _>`` — transcribed
here, nothing taken from :mod:`.export` (the writer and this reader meet only in the file).
"""

from __future__ import annotations

from torch import nn

from guitrainer.engine.network.client_layout import ClientLayout, Original, Spelling


def denoiser_map(transformer: nn.Module) -> dict[str, Original]:
    """Every weight of the transformer -> itself (ComfyUI's model has diffusers' names)."""
    return {name: Original(name) for name, _ in transformer.named_parameters()}


KOHYA_READERS = (
    "ComfyUI reads it (model_lora_keys_unet names every weight of its Qwen-Image lora_unet_<path>), and so does "
    "diffusers' QwenImagePipeline.load_lora_weights (_convert_non_diffusers_qwen_lora_to_diffusers re-dots the names "
    "and folds the alpha in); musubi-tuner writes this layout."
)
DIFFUSERS_READERS = (
    "ComfyUI reads it (diffusion_model.<path>, the generic spelling, and its QwenImage branch), and so does diffusers' "
    "QwenImagePipeline.load_lora_weights (diffusion_model. stripped, the alpha folded in); ai-toolkit and "
    "diffusion-pipe write this layout."
)

LAYOUT = ClientLayout(
    denoiser=denoiser_map,
    text_encoders=("qwen25_7b",),
    diffusers_spellings=(Spelling("diffusion_model."), Spelling("transformer."), Spelling(""), Spelling("lycoris_", True)),
    readers={"kohya": KOHYA_READERS, "diffusers": DIFFUSERS_READERS},
)
