"""Which of Z-Image's layers a LoRA trains: peft ``target_modules`` names (diffusers' module names) per
``network.target_modules`` choice.

Every block of Z-Image (the 30 main layers, the two noise refiners on the image tokens, the two context refiners
on the caption) is one ``ZImageTransformerBlock``: ``attention.to_q/k/v`` and ``attention.to_out.0`` (the original
layout's fused ``attention.qkv`` and ``attention.out``), the SwiGLU ``feed_forward.w1/w2/w3``, and in the layers and
noise refiners the ``adaLN_modulation.0`` Linear (the context refiners have no modulation). peft matches a name as a
dotted suffix, so each set covers every block that has the layer:

============================  =================================================================================
``network.target_modules``    layers
============================  =================================================================================
``attention``                 ``to_q``, ``to_k``, ``to_v``, ``to_out.0`` — diffusers' LoRA default for transformers
``attention_ff``              + ``feed_forward.w1/w2/w3``: every Linear of the attention and the MLP
``attention_ff_proj``         + ``adaLN_modulation.0``: every Linear in the blocks
============================  =================================================================================

Qwen3-4B stays frozen (no text-encoder LoRA).
"""

from __future__ import annotations

from torch import nn

from guitrainer.engine.network.variants import target_paths

ATTENTION: tuple[str, ...] = ("attention.to_q", "attention.to_k", "attention.to_v", "attention.to_out.0")
FEED_FORWARD: tuple[str, ...] = ("feed_forward.w1", "feed_forward.w2", "feed_forward.w3")
#: Z-Image's layers and noise refiners (any Z-Image has at most these many)
MAX_LAYERS, MAX_REFINERS = 30, 2
#: each block's modulation Linear, named one by one: a bare ``adaLN_modulation.0`` would also catch the final layer's
#: SiLU (``all_final_layer.2-1.adaLN_modulation.0``); unmatched names are fine for peft while others match
MODULATION: tuple[str, ...] = tuple(f"layers.{i}.adaLN_modulation.0" for i in range(MAX_LAYERS)) + tuple(
    f"noise_refiner.{i}.adaLN_modulation.0" for i in range(MAX_REFINERS))
TARGETS: dict[str, tuple[str, ...]] = {
    "attention": ATTENTION,
    "attention_ff": ATTENTION + FEED_FORWARD,
    "attention_ff_proj": ATTENTION + FEED_FORWARD + MODULATION,
}

#: the layers fp8 / int8 / nf4 storage leaves in the compute dtype: the timestep and caption embedders (diffusers'
#: ``ZImageTransformer2DModel._skip_layerwise_casting_patterns``: "precision sensitive layers"), the patch embedder
#: and the final layer, and the LoRA
STORAGE_SKIP_PATTERNS: tuple[str, ...] = (
    r"^t_embedder", r"^cap_embedder", r"^all_x_embedder", r"^all_final_layer", r"lora_",
)


def denoiser_targets(target_modules: str) -> tuple[str, ...]:
    return TARGETS[target_modules]


def targets_in(model: nn.Module, targets: tuple[str, ...]) -> list[str]:
    """The full names of ``model``'s Linear layers that ``targets`` select, as peft matches them."""
    return [n for n, m in target_paths(model, targets).items() if isinstance(m, nn.Linear)]
