"""Which layers an SD 3.5 LoRA trains: peft ``target_modules`` suffixes of the diffusers modules, per
``network.target_modules`` choice.

kohya's ``networks/lora_sd3.py`` trains every ``nn.Linear`` inside each ``SingleDiTBlock`` — the x (image) and
context (text) stream of every joint block: attention q/k/v and output, the MLP, and the adaLN modulation
(``adaLN_modulation.1``), plus SD 3.5 Medium's second image attention ``attn2``. The embedders and the final
layer are left out (``emb_dims`` off by default). The choices map onto growing subsets of that:

======================  =====================================================================================
``attention``           both streams' attention: ``attn.to_q/k/v``, ``attn.to_out.0``, ``attn.add_q/k/v_proj``,
                        ``attn.to_add_out``, and ``attn2.to_q/k/v``, ``attn2.to_out.0`` where a block has it
``attention_ff``        + both streams' MLPs: ``ff.net.0.proj``, ``ff.net.2``, ``ff_context.net.0.proj``,
                        ``ff_context.net.2``
``attention_ff_proj``   + the adaLN modulation: ``norm1.linear``, ``norm1_context.linear`` — kohya's full set
                        (for the UNets this choice adds ``proj_in`` / ``proj_out``; an MMDiT has none, and its
                        modulation Linears are the projections kohya adds)
======================  =====================================================================================

diffusers' ``train_dreambooth_lora_sd3.py`` defaults to ``to_q, to_k, to_v, to_out.0`` — the image stream only,
narrower than our ``attention``.

Text encoders (CLIP-L and CLIP-G; T5 stays frozen, sd-scripts' default ``train_t5xxl=False``): the attention
projections for ``attention``, attention + MLP (kohya's ``CLIPAttention`` + ``CLIPMLP``) for the other two.

Only plain LoRA is written in the layout the clients read (:mod:`.export`); LoHa / LoKr / DoRA on the fused
q/k/v would need another layout, so :func:`denoiser_targets` refuses them.
"""

from __future__ import annotations

from guitrainer.config import NetworkConfig

ATTENTION: tuple[str, ...] = (
    "attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0",
    "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out",
    "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0",
)
MLP: tuple[str, ...] = ("ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2")
MODULATION: tuple[str, ...] = ("norm1.linear", "norm1_context.linear")
DENOISER_TARGETS: dict[str, tuple[str, ...]] = {
    "attention": ATTENTION,
    "attention_ff": ATTENTION + MLP,
    "attention_ff_proj": ATTENTION + MLP + MODULATION,
}
CLIP_ATTENTION: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj")
CLIP_MLP: tuple[str, ...] = ("mlp.fc1", "mlp.fc2")
TEXT_ENCODER_TARGETS: dict[str, tuple[str, ...]] = {
    "attention": CLIP_ATTENTION,
    "attention_ff": CLIP_ATTENTION + CLIP_MLP,
    "attention_ff_proj": CLIP_ATTENTION + CLIP_MLP,
}
#: the network types whose SD 3.5 files the clients can read as we write them
NETWORK_TYPES: tuple[str, ...] = ("lora",)
#: the trainable text encoders: CLIP-L (0) and CLIP-G (1)
TRAINABLE_TEXT_ENCODERS: tuple[int, ...] = (0, 1)


def denoiser_targets(network: NetworkConfig) -> tuple[str, ...]:
    """The transformer's layers a LoRA of ``network`` trains (``ValueError`` for a network type we cannot write)."""
    if network.type not in NETWORK_TYPES:
        raise ValueError(
            f"SD 3.5 trains plain LoRA only (network.type 'lora'), not {network.type!r}: its fused q/k/v layers are "
            "written as one LoRA each, a form LoHa, LoKr and DoRA do not have"
        )
    return DENOISER_TARGETS[network.target_modules]


def text_encoder_targets(index: int, network: NetworkConfig) -> tuple[str, ...]:
    """The layers of text encoder ``index`` (0 CLIP-L, 1 CLIP-G) a LoRA trains; none of T5 (2)."""
    if index not in TRAINABLE_TEXT_ENCODERS:
        return ()
    return TEXT_ENCODER_TARGETS[network.target_modules]


#: the layers fp8 / int8 / nf4 storage leaves in the compute dtype (``SD35.storage_skip_patterns``; here so that the
#: family and its estimator tables in :mod:`.spec` read one list without importing each other): the position and
#: text embedders, the time embedder, the final norm and projection, T5's ``wo`` (its forward casts the input to
#: ``wo``'s dtype before the layer's own cast: see ``SD35.storage_skip_patterns``), and the LoRA
STORAGE_SKIP_PATTERNS: tuple[str, ...] = (
    r"(^|\.)pos_embed\.", r"(^|\.)context_embedder$", r"(^|\.)time_text_embed\.", r"(^|\.)norm_out\.",
    r"(^|\.)proj_out$", r"DenseReluDense\.wo$", "lora_",
)
