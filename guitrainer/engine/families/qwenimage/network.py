"""Which of Qwen-Image's layers a LoRA trains: peft ``target_modules`` names (diffusers' module names, which ComfyUI
and the released files keep) per ``network.target_modules`` choice.

Each of the 60 ``QwenImageTransformerBlock`` has a joint attention (``attn.to_q/k/v`` and ``attn.to_out.0`` on the
image stream, ``attn.add_q/k/v_proj`` and ``attn.to_add_out`` on the text stream), a GELU MLP per stream
(``img_mlp`` / ``txt_mlp``: ``net.0.proj`` and ``net.2``) and a modulation Linear per stream (``img_mod.1`` /
``txt_mod.1``, 6 x 3072 rows each). peft matches a name as a dotted suffix, so each set covers every block:

============================  =================================================================================
``network.target_modules``    layers (and who trains Qwen-Image so)
============================  =================================================================================
``attention``                 both streams' attention (OneTrainer's ``attn`` filter; diffusers' example takes the
                              image stream's four only)
``attention_ff``              + both MLPs: every Linear but the modulation — musubi-tuner's ``lora_qwen_image``
                              (it excludes ``_mod_``), OneTrainer's preset ``attn,img_mlp,txt_mlp``
``attention_ff_proj``         + ``img_mod.1`` / ``txt_mod.1``: every Linear in the blocks (diffusion-pipe's
                              ``QwenImageTransformerBlock`` target)
============================  =================================================================================

Qwen2.5-VL stays frozen (no text-encoder LoRA).
"""

from __future__ import annotations

from torch import nn

from guitrainer.engine.network.variants import target_paths

ATTENTION: tuple[str, ...] = (
    "attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0",
    "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out",
)
FEED_FORWARD: tuple[str, ...] = ("img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2")
MODULATION: tuple[str, ...] = ("img_mod.1", "txt_mod.1")
TARGETS: dict[str, tuple[str, ...]] = {
    "attention": ATTENTION,
    "attention_ff": ATTENTION + FEED_FORWARD,
    "attention_ff_proj": ATTENTION + FEED_FORWARD + MODULATION,
}

#: the layers fp8 / int8 / nf4 storage leaves in the compute dtype: the embedders, the caption norm and the output
#: layers (diffusion-pipe's KEEP_IN_HIGH_PRECISION for Qwen-Image: time_text_embed, img_in, txt_in, norm_out,
#: proj_out; musubi-tuner's fp8 targets only the transformer_blocks), and the LoRA
STORAGE_SKIP_PATTERNS: tuple[str, ...] = (
    r"^time_text_embed", r"^img_in", r"^txt_in", r"^txt_norm", r"^norm_out", r"^proj_out", r"lora_",
)


def denoiser_targets(target_modules: str) -> tuple[str, ...]:
    return TARGETS[target_modules]


def targets_in(model: nn.Module, targets: tuple[str, ...]) -> list[str]:
    """The full names of ``model``'s Linear layers that ``targets`` select, as peft matches them."""
    return [n for n, m in target_paths(model, targets).items() if isinstance(m, nn.Linear)]
