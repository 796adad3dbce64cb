"""SD 3.5's file layout as ComfyUI reads it: the :class:`~guitrainer.engine.network.client_layout.ClientLayout`
Verify merges an SD 3.5 LoRA by (:mod:`guitrainer.engine.verify.client_rules`).

The table is ComfyUI's ``comfy/utils.py`` ``mmdit_to_diffusers(mmdit_config)`` with its ``MMDIT_MAP_BASIC`` /
``MMDIT_MAP_BLOCK``, transcribed from them alone: nothing of :mod:`.convert` (the weight converter and the LoRA
writer's table, written from diffusers' ``convert_sd3_transformer_checkpoint_to_diffusers``) is used, so writer
and reader meet only in the file. As ComfyUI does, it follows from the model's own numbers: ComfyUI's
``detect_unet_config`` reads ``depth = x_embedder.proj.weight.shape[0] // 64`` (the MMDiT's width is 64 x depth),
``mmdit_to_diffusers`` walks ``num_blocks`` joint blocks (the blocks the file has; = depth in every SD 3 model)
and cuts each fused ``qkv`` at ``offset = depth * 64``:

* joint block N: ``attn.to_q`` / ``to_k`` / ``to_v`` are rows (0, o), (o, o), (2o, o) of ``x_block.attn.qkv``;
  ``attn.add_q/k/v_proj`` the same rows of ``context_block.attn.qkv``; ``attn2.to_q/k/v`` (SD 3.5 Medium's
  second attention) of ``x_block.attn2.qkv``; ``attn.to_out.0`` is ``x_block.attn.proj``, ``attn.to_add_out``
  ``context_block.attn.proj``, ``attn2.to_out.0`` ``x_block.attn2.proj``, ``norm1.linear`` /
  ``norm1_context.linear`` the streams' ``adaLN_modulation.1``, ``ff(_context).net.0.proj`` / ``net.2`` their
  ``mlp.fc1`` / ``fc2``, the q/k norms their ``ln_q`` / ``ln_k``;
* the last block's ``norm1_context.linear`` (its context stream is "pre only": (shift, scale) in the MMDiT,
  (scale, shift) in diffusers) and ``norm_out.linear`` (``final_layer.adaLN_modulation.1``) go through
  ``swap_scale_shift``; the embedders and ``proj_out`` are renames (``x_embedder.proj``, ``t_embedder.mlp.0``…).

ComfyUI names the text encoders ``clip_l``, ``clip_g`` and ``t5xxl`` (kohya's ``lora_te1_``, ``lora_te2_``,
``lora_te3_``), and accepts a diffusers-named SD 3 LoRA as ``transformer.<name>``, ``base_model.model.<name>``,
``lora_transformer_<name_>`` and ``lycoris_<name_>`` (``model_lora_keys_unet``, its SD3 branch).
"""

from __future__ import annotations

from torch import nn

from guitrainer.engine.network.client_layout import ClientLayout, Original, Spelling

#: (MMDiT name, diffusers name) inside a joint block: MMDIT_MAP_BLOCK, without the .weight / .bias
BLOCK_LINEARS = (
    ("context_block.adaLN_modulation.1", "norm1_context.linear"),
    ("context_block.attn.proj", "attn.to_add_out"),
    ("context_block.mlp.fc1", "ff_context.net.0.proj"),
    ("context_block.mlp.fc2", "ff_context.net.2"),
    ("x_block.adaLN_modulation.1", "norm1.linear"),
    ("x_block.attn.proj", "attn.to_out.0"),
    ("x_block.attn2.proj", "attn2.to_out.0"),
    ("x_block.mlp.fc1", "ff.net.0.proj"),
    ("x_block.mlp.fc2", "ff.net.2"),
)
BLOCK_NORMS = (
    ("context_block.attn.ln_q.weight", "attn.norm_added_q.weight"),
    ("context_block.attn.ln_k.weight", "attn.norm_added_k.weight"),
    ("x_block.attn.ln_q.weight", "attn.norm_q.weight"),
    ("x_block.attn.ln_k.weight", "attn.norm_k.weight"),
    ("x_block.attn2.ln_q.weight", "attn2.norm_q.weight"),
    ("x_block.attn2.ln_k.weight", "attn2.norm_k.weight"),
)
#: (the fused qkv in the MMDiT, the diffusers attention, its q/k/v names)
QKV = (
    ("x_block.attn.qkv", "attn", ("to_q", "to_k", "to_v")),
    ("context_block.attn.qkv", "attn", ("add_q_proj", "add_k_proj", "add_v_proj")),
    ("x_block.attn2.qkv", "attn2", ("to_q", "to_k", "to_v")),
)
#: MMDIT_MAP_BASIC without the swapped final modulation, without .weight / .bias
BASIC = (
    ("context_embedder", "context_embedder"),
    ("t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1"),
    ("t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2"),
    ("x_embedder.proj", "pos_embed.proj"),
    ("y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1"),
    ("y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2"),
    ("final_layer.linear", "proj_out"),
)
ENDS = ("weight", "bias")


def mmdit_to_diffusers(depth: int, num_blocks: int) -> dict[str, Original]:
    """ComfyUI's table for an MMDiT of ``depth`` (its width / 64) with ``num_blocks`` joint blocks."""
    offset = depth * 64
    out: dict[str, Original] = {}
    for i in range(num_blocks):
        src, dst = f"transformer_blocks.{i}", f"joint_blocks.{i}"
        for end in ENDS:
            for fused, attention, names in QKV:
                for j, name in enumerate(names):
                    out[f"{src}.{attention}.{name}.{end}"] = Original(f"{dst}.{fused}.{end}", (j * offset, offset))
            for original, diffusers in BLOCK_LINEARS:
                out[f"{src}.{diffusers}.{end}"] = Original(f"{dst}.{original}.{end}")
        for original, diffusers in BLOCK_NORMS:
            out[f"{src}.{diffusers}"] = Original(f"{dst}.{original}")
    out["pos_embed.pos_embed"] = Original("pos_embed")
    for end in ENDS:
        for original, diffusers in BASIC:
            out[f"{diffusers}.{end}"] = Original(f"{original}.{end}")
        out[f"norm_out.linear.{end}"] = Original(f"final_layer.adaLN_modulation.1.{end}", swapped=True)
        # after the blocks, as in ComfyUI: the last block's pre-only context modulation replaces its plain entry
        last = depth - 1
        out[f"transformer_blocks.{last}.norm1_context.linear.{end}"] = Original(
            f"joint_blocks.{last}.context_block.adaLN_modulation.1.{end}", swapped=True
        )
    return out


def denoiser_map(transformer: nn.Module) -> dict[str, Original]:
    """ComfyUI's table for this transformer: depth from its width (x_embedder's rows / 64), the joint blocks
    counted, as ComfyUI reads both from a checkpoint."""
    width = int(transformer.pos_embed.proj.weight.shape[0])
    return mmdit_to_diffusers(width // 64, len(transformer.transformer_blocks))


KOHYA_READERS = (
    "kohya sd-scripts reads it: networks/lora_sd3.py create_network_from_weights takes each module's rank and "
    "alpha from the file, so each fused qkv loads as one LoRA. diffusers' SD 3 loader (SD3LoraLoaderMixin) "
    "converts no key names and reads nothing of kohya's layout: for diffusers, save with the diffusers format "
    "(output.format)."
)
DIFFUSERS_READERS = (
    "diffusers' StableDiffusion3Pipeline.load_lora_weights reads this layout, and so does ComfyUI "
    "(transformer.<name> keys through mmdit_to_diffusers); kohya sd-scripts reads kohya's layout only."
)

LAYOUT = ClientLayout(
    denoiser=denoiser_map,
    text_encoders=("clip_l", "clip_g", "t5xxl"),
    diffusers_spellings=(
        Spelling("transformer."), Spelling("base_model.model."), Spelling("lora_transformer_", True),
        Spelling("lycoris_", True),
    ),
    readers={"kohya": KOHYA_READERS, "diffusers": DIFFUSERS_READERS},
)
