"""Stability's MMDiT layout ⇄ diffusers' ``SD3Transformer2DModel`` names, both directions, at any width.

The original layout (Stability's ``mmditx.py``, sd-scripts' ``sd3_models.py``, ComfyUI's ``mmdit.py``) is what
single-file checkpoints and kohya LoRAs name; diffusers trains. The differences, all per module:

* **fused q/k/v**: ``joint_blocks.N.x_block.attn.qkv`` is ``cat([to_q, to_k, to_v])`` along the output rows, the
  context stream's ``context_block.attn.qkv`` is ``cat([add_q_proj, add_k_proj, add_v_proj])``, and SD 3.5
  Medium's second image attention ``x_block.attn2.qkv`` is ``cat([attn2.to_q, to_k, to_v])`` (diffusers splits
  them with ``torch.chunk(…, 3)``, ComfyUI's ``mmdit_to_diffusers`` slices rows ``[0:h] [h:2h] [2h:3h]``);
* **the last block's context stream is "pre-only"**: its ``context_block`` has only ``attn.qkv`` (+ qk-norm) and
  ``adaLN_modulation.1`` with 2·h outputs; diffusers makes that ``norm1_context`` an ``AdaLayerNormContinuous``,
  whose output is (scale, shift) where the original's is (shift, scale): the two halves are swapped;
* **the final layer** ``final_layer.adaLN_modulation.1`` ⇄ ``norm_out.linear``: the same (shift, scale) swap;
* plain renames for the rest (``x_embedder.proj`` ⇄ ``pos_embed.proj``, ``t_embedder.mlp.0`` ⇄
  ``time_text_embed.timestep_embedder.linear_1``, ``ln_q`` ⇄ ``norm_q`` …).

Nothing here knows a width: fused layers are split into equal thirds and the depth comes from the keys, so a
tiny test model and SD 3.5 Large convert alike (diffusers' own ``convert_sd3_transformer_checkpoint_to_diffusers``
is width-generic too; its Flux sibling is not). The table of :class:`Piece` s is also what the LoRA export
(:mod:`.export`) names its modules by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from guitrainer.core.families import sd35 as facts


@dataclass(frozen=True)
class Piece:
    """One module (or tensor) of the original layout and its diffusers counterpart(s).

    Attributes:
        original: its path in the MMDiT (``joint_blocks.0.x_block.attn.qkv``).
        diffusers: its diffusers path(s), in the fused order (q, k, v); one for a plain rename.
        params: the tensors under the path ("weight", "bias"; "" for a bare tensor such as ``pos_embed``).
        swapped: the output halves are (shift, scale) in the original and (scale, shift) in diffusers.
        linear: an ``nn.Linear`` / ``nn.Conv2d`` a LoRA can target (not a norm or the position grid).
    """

    original: str
    diffusers: tuple[str, ...]
    params: tuple[str, ...] = ("weight", "bias")
    swapped: bool = False
    linear: bool = True

    @property
    def fused(self) -> bool:
        return len(self.diffusers) > 1


def _norm(original: str, diffusers: str) -> Piece:
    return Piece(original, (diffusers,), params=("weight",), linear=False)


def block_pieces(index: int, *, last: bool, dual: bool, qk_norm: bool) -> list[Piece]:
    """The pieces of joint block ``index`` (``last``: the pre-only context stream; ``dual``: with ``attn2``)."""
    o, d = f"joint_blocks.{index}", f"transformer_blocks.{index}"
    out = [
        Piece(f"{o}.x_block.attn.qkv", (f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v")),
        Piece(f"{o}.x_block.attn.proj", (f"{d}.attn.to_out.0",)),
        Piece(f"{o}.x_block.mlp.fc1", (f"{d}.ff.net.0.proj",)),
        Piece(f"{o}.x_block.mlp.fc2", (f"{d}.ff.net.2",)),
        Piece(f"{o}.x_block.adaLN_modulation.1", (f"{d}.norm1.linear",)),
        Piece(f"{o}.context_block.attn.qkv", (f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj")),
        Piece(f"{o}.context_block.adaLN_modulation.1", (f"{d}.norm1_context.linear",), swapped=last),
    ]
    if qk_norm:
        out += [
            _norm(f"{o}.x_block.attn.ln_q", f"{d}.attn.norm_q"),
            _norm(f"{o}.x_block.attn.ln_k", f"{d}.attn.norm_k"),
            _norm(f"{o}.context_block.attn.ln_q", f"{d}.attn.norm_added_q"),
            _norm(f"{o}.context_block.attn.ln_k", f"{d}.attn.norm_added_k"),
        ]
    if not last:
        out += [
            Piece(f"{o}.context_block.attn.proj", (f"{d}.attn.to_add_out",)),
            Piece(f"{o}.context_block.mlp.fc1", (f"{d}.ff_context.net.0.proj",)),
            Piece(f"{o}.context_block.mlp.fc2", (f"{d}.ff_context.net.2",)),
        ]
    if dual:
        out += [
            Piece(f"{o}.x_block.attn2.qkv", (f"{d}.attn2.to_q", f"{d}.attn2.to_k", f"{d}.attn2.to_v")),
            Piece(f"{o}.x_block.attn2.proj", (f"{d}.attn2.to_out.0",)),
        ]
        if qk_norm:
            out += [_norm(f"{o}.x_block.attn2.ln_q", f"{d}.attn2.norm_q"), _norm(f"{o}.x_block.attn2.ln_k", f"{d}.attn2.norm_k")]
    return out


#: the pieces outside the joint blocks
TOP_PIECES: tuple[Piece, ...] = (
    Piece("x_embedder.proj", ("pos_embed.proj",)),
    Piece("pos_embed", ("pos_embed.pos_embed",), params=("",), linear=False),
    Piece("t_embedder.mlp.0", ("time_text_embed.timestep_embedder.linear_1",)),
    Piece("t_embedder.mlp.2", ("time_text_embed.timestep_embedder.linear_2",)),
    Piece("y_embedder.mlp.0", ("time_text_embed.text_embedder.linear_1",)),
    Piece("y_embedder.mlp.2", ("time_text_embed.text_embedder.linear_2",)),
    Piece("context_embedder", ("context_embedder",)),
    Piece("final_layer.linear", ("proj_out",)),
    Piece("final_layer.adaLN_modulation.1", ("norm_out.linear",), swapped=True),
)


def pieces(num_layers: int, dual_attention_layers: tuple[int, ...] | list[int], qk_norm: bool) -> tuple[Piece, ...]:
    """Every piece of an MMDiT with ``num_layers`` joint blocks."""
    dual = set(dual_attention_layers)
    out = list(TOP_PIECES)
    for i in range(num_layers):
        out += block_pieces(i, last=i == num_layers - 1, dual=i in dual, qk_norm=qk_norm)
    return tuple(out)


def pieces_for_config(config: Mapping[str, Any]) -> tuple[Piece, ...]:
    """The pieces of a diffusers ``SD3Transformer2DModel`` config (or the model's ``config``)."""
    return pieces(int(config["num_layers"]), tuple(config.get("dual_attention_layers") or ()), bool(config.get("qk_norm")))


def param_key(path: str, param: str) -> str:
    return f"{path}.{param}" if param else path


def swap_halves(t: torch.Tensor) -> torch.Tensor:
    """(first half, second half) of the output rows -> (second, first): (shift, scale) ⇄ (scale, shift). Its own inverse."""
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


# --------------------------------------------------------------------------- the transformer's config


def config_from_original(original: Mapping[str, Any]) -> dict[str, Any]:
    """The diffusers ``SD3Transformer2DModel`` config of an original-layout MMDiT (keys without a prefix), read
    from its shapes as ComfyUI and sd-scripts read them: hidden = 64 × depth, heads = depth, head width 64."""
    shape = facts.mmdit_shape(original)
    if isinstance(shape, str):
        raise ValueError(shape)
    return {
        "sample_size": 128,
        "patch_size": shape.patch,
        "in_channels": shape.in_channels,
        "num_layers": shape.blocks,
        "attention_head_dim": facts.HEAD_DIM,
        "num_attention_heads": shape.hidden // facts.HEAD_DIM,
        "joint_attention_dim": shape.joint_attention_dim,
        "caption_projection_dim": shape.hidden,
        "pooled_projection_dim": shape.pooled_projection_dim,
        "out_channels": shape.out_channels,
        "pos_embed_max_size": shape.pos_embed_max_size,
        "dual_attention_layers": list(shape.dual_attention_layers),
        "qk_norm": "rms_norm" if shape.qk_norm else None,
    }


# --------------------------------------------------------------------------- weights


def to_diffusers(original: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Original-layout MMDiT tensors (no prefix) -> ``SD3Transformer2DModel`` state dict keys.

    Fused tensors are split into equal thirds along the rows (copies, so the result holds no views); swapped
    tensors get their halves swapped. Any tensor the table does not know is an error: a file with more in it is
    another model.
    """
    config = config_from_original(original)
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for piece in pieces_for_config(config):
        for param in piece.params:
            key = param_key(piece.original, param)
            if key not in original:
                continue  # e.g. a bias-free layer; the model's own load reports what is really missing
            used.add(key)
            tensor = original[key]
            if piece.swapped:
                tensor = swap_halves(tensor)
            if piece.fused:
                for name, chunk in zip(piece.diffusers, tensor.chunk(len(piece.diffusers), dim=0)):
                    out[param_key(name, param)] = chunk.clone()
            else:
                out[param_key(piece.diffusers[0], param)] = tensor
    unknown = sorted(set(original) - used)
    if unknown:
        raise ValueError(f"{len(unknown)} tensors are not part of an SD 3 MMDiT, e.g. {', '.join(unknown[:3])}")
    return out


def to_original(diffusers: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """``SD3Transformer2DModel`` tensors -> the original layout (no prefix): fused rows concatenated in the
    (q, k, v) order, swapped halves put back. Every tensor comes out contiguous and unshared (safetensors-ready)."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for piece in pieces_for_config(config):
        for param in piece.params:
            keys = [param_key(name, param) for name in piece.diffusers]
            if not all(k in diffusers for k in keys):
                continue
            used.update(keys)
            tensor = torch.cat([diffusers[k] for k in keys], dim=0) if piece.fused else diffusers[keys[0]].clone()
            if piece.swapped:
                tensor = swap_halves(tensor)
            out[param_key(piece.original, param)] = tensor.contiguous()
    unknown = sorted(set(diffusers) - used)
    if unknown:
        raise ValueError(f"{len(unknown)} tensors are not part of an SD 3 transformer, e.g. {', '.join(unknown[:3])}")
    return out
