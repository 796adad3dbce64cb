"""Flux's file layout as ComfyUI reads it: the :class:`~guitrainer.engine.network.client_layout.ClientLayout` Verify
merges a Flux LoRA by (:mod:`guitrainer.engine.verify.client_rules`).

The table is ComfyUI's ``comfy/utils.py`` ``flux_to_diffusers(mmdit_config)``, transcribed from it and nothing
else: this module imports nothing of :mod:`.convert` (the weight converter and the LoRA writer's table, written
from diffusers' ``convert_flux_transformer_checkpoint_to_diffusers``), so the writer and this reader meet only in
the file. As ComfyUI does, it is built from the model's own numbers — ``depth`` (double blocks),
``depth_single_blocks`` and ``hidden_size`` (ComfyUI detects them from the checkpoint; here they are read from the
built transformer's config) — and every slice of a fused weight follows from ``hidden_size``:

* double block N: ``attn.to_q`` / ``to_k`` / ``to_v`` are rows (0, H), (H, H), (2H, H) of ``img_attn.qkv``,
  ``add_q/k/v_proj`` the same rows of ``txt_attn.qkv``; ``attn.to_out.0`` is ``img_attn.proj``, ``to_add_out``
  ``txt_attn.proj``, ``norm1.linear`` / ``norm1_context.linear`` ``img_mod.lin`` / ``txt_mod.lin``,
  ``ff(_context).net.0.proj`` / ``net.2`` ``img(txt)_mlp.0`` / ``.2``, the q/k norms ``….norm.query_norm.scale``…;
* single block N: ``attn.to_q`` / ``to_k`` / ``to_v`` rows (0, H), (H, H), (2H, H) of ``linear1`` and
  ``proj_mlp`` its rows (3H, 4H) (ComfyUI assumes Flux's mlp ratio 4); ``proj_out`` is ``linear2``,
  ``norm.linear`` ``modulation.lin``;
* outside the blocks: ``x_embedder`` ``img_in``, ``context_embedder`` ``txt_in``, the time / guidance / text
  embedders ``time_in`` / ``guidance_in`` / ``vector_in`` (``linear_1`` ``in_layer``, ``linear_2`` ``out_layer``),
  ``proj_out`` ``final_layer.linear`` and ``norm_out.linear`` ``final_layer.adaLN_modulation.1`` through
  ``swap_scale_shift``.

ComfyUI gives CLIP-L the name ``clip_l`` and T5-XXL ``t5xxl`` (so kohya's ``lora_te1_`` reads as CLIP-L, and
both ``lora_te2_`` and ``lora_te3_`` as T5), and accepts a diffusers-named Flux LoRA as ``transformer.<name>``,
``lycoris_<name_>`` and ``lora_transformer_<name_>`` (``model_lora_keys_unet``, its Flux branch). That branch's
one more name, ``diffusion_model.single_blocks.N.linear1_qkv`` (the q/k/v rows of ``linear1`` as one LoRA), is not
in the table: no trainer we know writes it, and a file that does is reported with those keys unread.
"""

from __future__ import annotations

from torch import nn

from guitrainer.engine.network.client_layout import ClientLayout, Original, Spelling

#: diffusers' name -> BFL's, inside a double block (each with .weight and .bias unless noted)
DOUBLE_BLOCK = {
    "attn.to_out.0": "img_attn.proj",
    "attn.to_add_out": "txt_attn.proj",
    "norm1.linear": "img_mod.lin",
    "norm1_context.linear": "txt_mod.lin",
    "ff.net.0.proj": "img_mlp.0",
    "ff.net.2": "img_mlp.2",
    "ff_context.net.0.proj": "txt_mlp.0",
    "ff_context.net.2": "txt_mlp.2",
}
DOUBLE_NORMS = {
    "attn.norm_q.weight": "img_attn.norm.query_norm.scale",
    "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
}
SINGLE_BLOCK = {"norm.linear": "modulation.lin", "proj_out": "linear2"}
SINGLE_NORMS = {"attn.norm_q.weight": "norm.query_norm.scale", "attn.norm_k.weight": "norm.key_norm.scale"}
OUTSIDE = {
    "x_embedder": "img_in",
    "context_embedder": "txt_in",
    "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
    "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
    "proj_out": "final_layer.linear",
}
#: the final layer's modulation: (scale, shift) in diffusers, (shift, scale) in BFL
SWAPPED = {"norm_out.linear": "final_layer.adaLN_modulation.1"}
ENDS = ("weight", "bias")


def flux_to_diffusers(depth: int, depth_single_blocks: int, hidden_size: int) -> dict[str, Original]:
    """ComfyUI's table for a Flux of these numbers: every diffusers parameter -> where it is in BFL's layout."""
    h = hidden_size
    out: dict[str, Original] = {}
    for i in range(depth):
        src, dst = f"transformer_blocks.{i}", f"double_blocks.{i}"
        for end in ENDS:
            for j, name in enumerate(("to_q", "to_k", "to_v")):
                out[f"{src}.attn.{name}.{end}"] = Original(f"{dst}.img_attn.qkv.{end}", (j * h, h))
            for j, name in enumerate(("add_q_proj", "add_k_proj", "add_v_proj")):
                out[f"{src}.attn.{name}.{end}"] = Original(f"{dst}.txt_attn.qkv.{end}", (j * h, h))
            for d, b in DOUBLE_BLOCK.items():
                out[f"{src}.{d}.{end}"] = Original(f"{dst}.{b}.{end}")
        for d, b in DOUBLE_NORMS.items():
            out[f"{src}.{d}"] = Original(f"{dst}.{b}")
    for i in range(depth_single_blocks):
        src, dst = f"single_transformer_blocks.{i}", f"single_blocks.{i}"
        for end in ENDS:
            for j, name in enumerate(("attn.to_q", "attn.to_k", "attn.to_v")):
                out[f"{src}.{name}.{end}"] = Original(f"{dst}.linear1.{end}", (j * h, h))
            out[f"{src}.proj_mlp.{end}"] = Original(f"{dst}.linear1.{end}", (3 * h, 4 * h))
            for d, b in SINGLE_BLOCK.items():
                out[f"{src}.{d}.{end}"] = Original(f"{dst}.{b}.{end}")
        for d, b in SINGLE_NORMS.items():
            out[f"{src}.{d}"] = Original(f"{dst}.{b}")
    for end in ENDS:
        for d, b in OUTSIDE.items():
            out[f"{d}.{end}"] = Original(f"{b}.{end}")
        for d, b in SWAPPED.items():
            out[f"{d}.{end}"] = Original(f"{b}.{end}", swapped=True)
    return out


def denoiser_map(transformer: nn.Module) -> dict[str, Original]:
    """ComfyUI's table for this transformer: its numbers read from its config, as ComfyUI reads them from a file."""
    cfg = transformer.config
    hidden = int(cfg.num_attention_heads) * int(cfg.attention_head_dim)
    return flux_to_diffusers(int(cfg.num_layers), int(cfg.num_single_layers), hidden)


KOHYA_READERS = (
    "kohya sd-scripts reads it: networks/lora_flux.py create_network_from_weights takes each module's rank and "
    "alpha from the file, so the fused qkv and linear1 modules load as one LoRA each. diffusers converts it "
    "(FluxLoraLoaderMixin) at Flux.1's full size only: its converter splits a single block's linear1 as "
    "3072-wide q, k, v and a 12288-wide MLP, so on a Flux of another width only the double blocks load, and it "
    "drops T5 (lora_te3_) keys."
)
DIFFUSERS_READERS = (
    "diffusers' FluxPipeline.load_lora_weights reads this layout, and so does ComfyUI (transformer.<name> keys); "
    "kohya sd-scripts reads kohya's layout only."
)

LAYOUT = ClientLayout(
    denoiser=denoiser_map,
    text_encoders=("clip_l", "t5xxl"),
    diffusers_spellings=(Spelling("transformer."), Spelling("lycoris_", True), Spelling("lora_transformer_", True)),
    readers={"kohya": KOHYA_READERS, "diffusers": DIFFUSERS_READERS},
)
