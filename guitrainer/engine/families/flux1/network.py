"""Which of Flux's layers a LoRA trains: peft ``target_modules`` names (diffusers' module names) per
``network.target_modules`` choice, for the transformer and CLIP-L.

kohya's ``networks/lora_flux.py`` trains every ``nn.Linear`` inside every double and single block — the
attention, the MLPs and the modulation (AdaLN) Linears, the single blocks' fused ``linear1`` / ``linear2``
included — and nothing outside them (``img_in``, ``txt_in``, the time/guidance/vector embedders and the final
layer only through its ``in_dims``). diffusers' Flux script trains the attention and the double blocks' MLPs
only (no ``proj_mlp``, no single-block ``proj_out``, no modulation). The choices map onto those sets:

============================  =================================================================================
``network.target_modules``    layers (diffusers' names; the BFL module each one is part of)
============================  =================================================================================
``attention``                 double: ``to_q/k/v`` ``add_q/k/v_proj`` (``img/txt_attn.qkv``), ``to_out.0``
                              ``to_add_out`` (``img/txt_attn.proj``); single: ``to_q/k/v`` (the q, k, v rows of
                              ``linear1``)
``attention_ff``              + double ``ff`` / ``ff_context`` (``img/txt_mlp.0/2``), single ``proj_mlp`` (the
                              mlp rows of ``linear1``) and ``proj_out`` (``linear2``): diffusers' set plus the
                              single blocks' MLP, i.e. kohya's set without the modulation
``attention_ff_proj``         + the modulation: ``norm1.linear`` ``norm1_context.linear`` (``img/txt_mod.lin``),
                              single ``norm.linear`` (``modulation.lin``): every Linear in the blocks, exactly
                              kohya's default
============================  =================================================================================

CLIP-L's LoRA covers its attention and MLP (kohya's ``CLIPAttention`` + ``CLIPMLP``); T5-XXL stays frozen
(kohya's default ``train_t5xxl=False``).

peft matches a name exactly or as a dotted suffix, so a bare ``proj_out`` would also catch the transformer's
final ``proj_out`` (BFL's ``final_layer.linear``, which kohya never trains). The seam's
:meth:`~guitrainer.engine.families.base.Family.denoiser_targets` sees no model, so the single blocks'
``proj_out`` are named one by one up to Flux.1's 38 (:data:`MAX_SINGLE_BLOCKS`; unmatched names are fine for
peft while others match); :func:`targets_in` names exactly the layers of a built model.
"""

from __future__ import annotations

from torch import nn

#: Flux.1's single-stream blocks (any Flux.1 has at most this many)
MAX_SINGLE_BLOCKS = 38

ATTENTION: tuple[str, ...] = (
    "attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0",
    "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out",
)
DOUBLE_MLP: tuple[str, ...] = ("ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2")
SINGLE_MLP: tuple[str, ...] = ("proj_mlp",)
SINGLE_OUT: tuple[str, ...] = tuple(f"single_transformer_blocks.{i}.proj_out" for i in range(MAX_SINGLE_BLOCKS))
MODULATION: tuple[str, ...] = ("norm1.linear", "norm1_context.linear", "norm.linear")

TARGETS: dict[str, tuple[str, ...]] = {
    "attention": ATTENTION,
    "attention_ff": ATTENTION + DOUBLE_MLP + SINGLE_MLP + SINGLE_OUT,
    "attention_ff_proj": ATTENTION + DOUBLE_MLP + SINGLE_MLP + SINGLE_OUT + MODULATION,
}
#: CLIP-L: attention and MLP, as kohya's text-encoder modules
CLIP_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")


def denoiser_targets(target_modules: str) -> tuple[str, ...]:
    """The transformer's peft target names for a ``network.target_modules`` choice."""
    return TARGETS[target_modules]


def text_encoder_targets(index: int) -> tuple[str, ...]:
    """CLIP-L (index 0) trains its attention and MLP; T5-XXL (1) nothing."""
    return CLIP_TARGETS if index == 0 else ()


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    return any(name == t or name.endswith("." + t) for t in targets)


def targets_in(model: nn.Module, targets: tuple[str, ...]) -> list[str]:
    """The full names of ``model``'s Linear layers that ``targets`` select, as peft matches them."""
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and _matches(n, targets)]


#: the layers fp8 / int8 / nf4 storage leaves in the compute dtype (``Flux1.storage_skip_patterns``; here so that the
#: family and its estimator tables in :mod:`.spec` read one list without importing each other): the embedders, the
#: final norm and projection, the q/k RMSNorms, T5's feed-forward output ``wo`` (``T5DenseGatedActDense.forward``
#: casts its input to ``wo.weight.dtype`` before the layer's own cast-up runs: stored in fp8, T5's hidden states
#: would be rounded to fp8 there, as SD 3.5's list already prevents), and the LoRA
STORAGE_SKIP_PATTERNS: tuple[str, ...] = (
    r"^x_embedder$", r"^context_embedder$", r"^time_text_embed", r"^norm_out", r"^proj_out$",
    r"\.norm_(added_)?[qk]$", r"DenseReluDense\.wo$", r"lora_",
)
