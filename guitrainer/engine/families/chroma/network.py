"""Which of Chroma's layers a LoRA trains: peft ``target_modules`` names (diffusers' module names) per
``network.target_modules`` choice.

Chroma's blocks are Flux's without the modulation Linears, so the sets are Flux's
(:mod:`guitrainer.engine.families.flux1.network`) less ``norm1.linear`` / ``norm1_context.linear`` /
``norm.linear``, which Chroma's blocks do not have:

============================  =================================================================================
``network.target_modules``    layers
============================  =================================================================================
``attention``                 double: ``to_q/k/v`` ``add_q/k/v_proj`` ``to_out.0`` ``to_add_out``; single:
                              ``to_q/k/v`` (the q, k, v rows of ``linear1``)
``attention_ff``              + double ``ff`` / ``ff_context``, single ``proj_mlp`` and ``proj_out`` (``linear2``):
                              every Linear in the blocks — what sd-scripts' ``lora_flux.py`` trains on Chroma
                              (every Linear of the double and single blocks) and ai-toolkit's Chroma LoRA
``attention_ff_proj``         the same (Chroma has no modulation Linears in its blocks; the approximator
                              ``distilled_guidance_layer`` that replaces them is trained by none of the peers)
============================  =================================================================================

T5-XXL stays frozen (no text-encoder LoRA), as in every peer's Chroma recipe.
"""

from __future__ import annotations

from guitrainer.engine.families.flux1 import network as flux_network

MAX_SINGLE_BLOCKS = flux_network.MAX_SINGLE_BLOCKS
ATTENTION = flux_network.ATTENTION
EVERY_BLOCK_LINEAR = flux_network.ATTENTION + flux_network.DOUBLE_MLP + flux_network.SINGLE_MLP + flux_network.SINGLE_OUT

TARGETS: dict[str, tuple[str, ...]] = {
    "attention": ATTENTION,
    "attention_ff": EVERY_BLOCK_LINEAR,
    "attention_ff_proj": EVERY_BLOCK_LINEAR,
}

#: the layers fp8 / int8 / nf4 storage leaves in the compute dtype: Flux's list (the embedders, the final
#: projection, the q/k RMSNorms, T5's ``wo``, the LoRA) and the approximator, which makes every block's shift, scale
#: and gate from the timestep (0.28 B parameters, 3 % of the model; our choice: a rounding error there reaches every
#: block at once, where Flux's per-block modulation Linears each reach one)
STORAGE_SKIP_PATTERNS: tuple[str, ...] = (*flux_network.STORAGE_SKIP_PATTERNS, r"^distilled_guidance_layer")


def denoiser_targets(target_modules: str) -> tuple[str, ...]:
    return TARGETS[target_modules]


targets_in = flux_network.targets_in
