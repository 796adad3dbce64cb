"""Z-Image's file layout as ComfyUI reads it: the :class:`~guitrainer.engine.network.client_layout.ClientLayout`
Verify merges a Z-Image LoRA by (:mod:`guitrainer.engine.verify.client_rules`).

ComfyUI's Z-Image is a Lumina 2 (``class ZImage(Lumina2)``), built in the original layout (``comfy/ldm/lumina``:
fused ``attention.qkv``, ``attention.out``). ``comfy/lora.py`` ``model_lora_keys_unet`` names each of its weights
``lora_unet_<path with _>`` and ``diffusion_model.<path>`` (the generic loop), and its Lumina2 branch reads
diffusers' names through ``comfy.utils.z_image_to_diffusers(unet_config, output_prefix="diffusion_model.")`` as
``diffusion_model.<name>``, ``transformer.<name>``, ``<name>`` and ``lycoris_<name_>``. That table, transcribed here
and nothing else (nothing of :mod:`.convert` or :mod:`.export`: the writer and this reader meet only in the file):
``attention.to_q`` / ``to_k`` / ``to_v`` are the rows (0, H), (H, H), (2H, H) of ``attention.qkv`` with H =
``hidden_size``, ``attention.to_out.0`` is ``attention.out``, ``attention.norm_q`` / ``norm_k`` are ``q_norm`` /
``k_norm``, ``feed_forward.w1/w2/w3``, the four norms and ``adaLN_modulation.0`` keep their names, in the layers,
the context refiners and the noise refiners; outside the blocks ``all_final_layer.2-1.*`` is ``final_layer.*`` and
``all_x_embedder.2-1`` ``x_embedder``. ComfyUI splits q/k/v in equal thirds (``n_kv_heads`` = ``n_heads`` in
Z-Image), and so does this table.
"""

from __future__ import annotations

from torch import nn

from guitrainer.engine.network.client_layout import ClientLayout, Original, Spelling

SAME = ("feed_forward.w1", "feed_forward.w2", "feed_forward.w3")
NORMS = ("attention_norm1", "ffn_norm1", "attention_norm2", "ffn_norm2")


def z_image_to_diffusers(layers: int, context_refiners: int, noise_refiners: int, hidden: int) -> dict[str, Original]:
    """Every diffusers parameter ComfyUI's table names -> where it is in the original layout."""
    out: dict[str, Original] = {}
    blocks = ([f"layers.{i}" for i in range(layers)] + [f"context_refiner.{i}" for i in range(context_refiners)]
              + [f"noise_refiner.{i}" for i in range(noise_refiners)])
    for k in blocks:
        for j, name in enumerate(("to_q", "to_k", "to_v")):
            out[f"{k}.attention.{name}.weight"] = Original(f"{k}.attention.qkv.weight", (j * hidden, hidden))
        out[f"{k}.attention.norm_q.weight"] = Original(f"{k}.attention.q_norm.weight")
        out[f"{k}.attention.norm_k.weight"] = Original(f"{k}.attention.k_norm.weight")
        out[f"{k}.attention.to_out.0.weight"] = Original(f"{k}.attention.out.weight")
        for name in (*SAME, *NORMS):
            out[f"{k}.{name}.weight"] = Original(f"{k}.{name}.weight")
        for end in ("weight", "bias"):
            out[f"{k}.adaLN_modulation.0.{end}"] = Original(f"{k}.adaLN_modulation.0.{end}")
    for end in ("weight", "bias"):
        out[f"all_final_layer.2-1.linear.{end}"] = Original(f"final_layer.linear.{end}")
        out[f"all_final_layer.2-1.adaLN_modulation.1.{end}"] = Original(f"final_layer.adaLN_modulation.1.{end}")
        out[f"all_x_embedder.2-1.{end}"] = Original(f"x_embedder.{end}")
    return out


def denoiser_map(transformer: nn.Module) -> dict[str, Original]:
    """ComfyUI's table for this transformer (its numbers from its config, as ComfyUI detects them from the file),
    limited to the parameters it has (the context refiners have no modulation)."""
    cfg = transformer.config
    refiners = int(cfg.n_refiner_layers)
    table = z_image_to_diffusers(int(cfg.n_layers), refiners, refiners, int(cfg.dim))
    own = {name for name, _ in transformer.named_parameters()}
    return {k: v for k, v in table.items() if k in own}


KOHYA_READERS = (
    "ComfyUI reads it (model_lora_keys_unet names every weight of its original-layout Z-Image lora_unet_<path>). "
    "diffusers' ZImagePipeline does not: its converter leaves a fused attention.qkv LoRA unsplit; save in the "
    "diffusers layout for it. musubi-tuner writes lora_unet_ with diffusers' module names and converts to this "
    "layout for ComfyUI."
)
DIFFUSERS_READERS = (
    "diffusers' ZImagePipeline.load_lora_weights reads it (diffusion_model. stripped, the alpha folded in), and so "
    "does ComfyUI (its Lumina2 branch maps diffusion_model.<diffusers name> through z_image_to_diffusers); ai-toolkit "
    "writes this layout."
)

LAYOUT = ClientLayout(
    denoiser=denoiser_map,
    text_encoders=("qwen3_4b",),
    diffusers_spellings=(Spelling("diffusion_model."), Spelling("transformer."), Spelling(""), Spelling("lycoris_", True)),
    readers={"kohya": KOHYA_READERS, "diffusers": DIFFUSERS_READERS},
)
