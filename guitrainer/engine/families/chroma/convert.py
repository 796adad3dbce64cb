"""The Chroma transformer in both layouts: BFL's (``double_blocks.N.img_attn.qkv``…, what ``Chroma1-HD.safetensors``,
ComfyUI and kohya's LoRA names use) and diffusers' (``transformer_blocks.N.attn.to_q``…, what
:class:`~diffusers.ChromaTransformer2DModel` is built of), converted both ways.

Chroma's blocks are Flux's without their modulation Linears, so the table is Flux's
(:func:`guitrainer.engine.families.flux1.convert.layout`'s :class:`~guitrainer.engine.families.flux1.convert.Piece`
rows, read by the same converters) with these differences, as diffusers' ``convert_chroma_transformer_checkpoint_
to_diffusers`` has them:

* no ``img_mod`` / ``txt_mod`` (double blocks), ``modulation`` (single blocks), ``time_in`` / ``vector_in`` /
  ``guidance_in``, and no ``final_layer.adaLN_modulation`` (Chroma's final norm takes its shift and scale from the
  approximator's output, not from a Linear);
* the approximator, ``distilled_guidance_layer``: ``in_proj`` and ``out_proj`` keep their names, each of its
  ``layers.N`` is ``in_layer`` / ``out_layer`` in BFL's layout and ``linear_1`` / ``linear_2`` in diffusers', its
  RMSNorms are ``norms.N.scale`` / ``norms.N.weight``.

Width-aware, as Flux's: diffusers' converter hard-codes ``inner_dim = 3072`` (it cannot load a tiny test model);
here ``hidden`` comes from ``img_in``'s rows, the MLP width from ``linear1``, the counts from the keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from guitrainer.engine.families.flux1.convert import Piece, fuse_by_layout, split_by_layout, strip_prefix

MODEL = "a Chroma transformer"


@dataclass(frozen=True)
class ChromaShape:
    """What a Chroma transformer's layout depends on: its widths and its block and approximator layer counts."""

    hidden: int
    mlp: int
    double_blocks: int
    single_blocks: int
    approximator_layers: int


def layout(shape: ChromaShape) -> tuple[tuple[Piece, ...], dict[str, str]]:
    """(every Linear as a :class:`Piece`, the RMSNorm scales as ``{bfl key: diffusers key}``) of a transformer."""
    h, m = shape.hidden, shape.mlp
    pieces: list[Piece] = []

    def plain(bfl: str, diffusers: str) -> None:
        pieces.append(Piece(bfl, (diffusers,)))

    norms: dict[str, str] = {}
    plain("distilled_guidance_layer.in_proj", "distilled_guidance_layer.in_proj")
    for i in range(shape.approximator_layers):
        layer = f"distilled_guidance_layer.layers.{i}"
        plain(f"{layer}.in_layer", f"{layer}.linear_1")
        plain(f"{layer}.out_layer", f"{layer}.linear_2")
        norms[f"distilled_guidance_layer.norms.{i}.scale"] = f"distilled_guidance_layer.norms.{i}.weight"
    plain("distilled_guidance_layer.out_proj", "distilled_guidance_layer.out_proj")
    plain("txt_in", "context_embedder")
    plain("img_in", "x_embedder")
    for i in range(shape.double_blocks):
        b, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        pieces.append(Piece(f"{b}.img_attn.qkv", tuple(f"{d}.attn.to_{x}" for x in "qkv"), (h, h, h)))
        pieces.append(Piece(f"{b}.txt_attn.qkv", tuple(f"{d}.attn.add_{x}_proj" for x in "qkv"), (h, h, h)))
        plain(f"{b}.img_attn.proj", f"{d}.attn.to_out.0")
        plain(f"{b}.txt_attn.proj", f"{d}.attn.to_add_out")
        plain(f"{b}.img_mlp.0", f"{d}.ff.net.0.proj")
        plain(f"{b}.img_mlp.2", f"{d}.ff.net.2")
        plain(f"{b}.txt_mlp.0", f"{d}.ff_context.net.0.proj")
        plain(f"{b}.txt_mlp.2", f"{d}.ff_context.net.2")
        for stream, added in (("img", ""), ("txt", "added_")):
            norms[f"{b}.{stream}_attn.norm.query_norm.scale"] = f"{d}.attn.norm_{added}q.weight"
            norms[f"{b}.{stream}_attn.norm.key_norm.scale"] = f"{d}.attn.norm_{added}k.weight"
    for i in range(shape.single_blocks):
        b, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        pieces.append(Piece(
            f"{b}.linear1", (f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v", f"{d}.proj_mlp"), (h, h, h, m)
        ))
        plain(f"{b}.linear2", f"{d}.proj_out")
        norms[f"{b}.norm.query_norm.scale"] = f"{d}.attn.norm_q.weight"
        norms[f"{b}.norm.key_norm.scale"] = f"{d}.attn.norm_k.weight"
    plain("final_layer.linear", "proj_out")
    return tuple(pieces), norms


def _count(keys: list[str], pattern: str) -> int:
    found = {int(match.group(1)) for k in keys if (match := re.match(pattern, k))}
    return max(found) + 1 if found else 0


def bfl_shape(sd: Mapping[str, torch.Tensor]) -> ChromaShape:
    """The :class:`ChromaShape` of a BFL-layout state dict (prefix already removed)."""
    keys = list(sd)
    hidden = int(sd["img_in.weight"].shape[0])
    single = _count(keys, r"single_blocks\.(\d+)\.")
    mlp = int(sd["single_blocks.0.linear1.weight"].shape[0]) - 3 * hidden if single else int(
        sd["double_blocks.0.img_mlp.0.weight"].shape[0]
    )
    return ChromaShape(hidden, mlp, _count(keys, r"double_blocks\.(\d+)\."), single,
                       _count(keys, r"distilled_guidance_layer\.layers\.(\d+)\."))


def diffusers_shape(sd: Mapping[str, torch.Tensor]) -> ChromaShape:
    """The :class:`ChromaShape` of a diffusers-named state dict."""
    keys = list(sd)
    hidden = int(sd["x_embedder.weight"].shape[0])
    mlp = next((int(sd[k].shape[0]) for k in ("single_transformer_blocks.0.proj_mlp.weight",
                                               "transformer_blocks.0.ff.net.0.proj.weight") if k in sd), 4 * hidden)
    return ChromaShape(hidden, mlp, _count(keys, r"transformer_blocks\.(\d+)\."),
                       _count(keys, r"single_transformer_blocks\.(\d+)\."),
                       _count(keys, r"distilled_guidance_layer\.layers\.(\d+)\."))


def shape_of_model(denoiser: torch.nn.Module) -> ChromaShape:
    """The :class:`ChromaShape` of a built ``ChromaTransformer2DModel`` (from its config and modules, any device)."""
    cfg = denoiser.config
    hidden = int(cfg.num_attention_heads) * int(cfg.attention_head_dim)
    single = int(cfg.num_single_layers)
    mlp = int(denoiser.single_transformer_blocks[0].proj_mlp.out_features) if single else int(
        denoiser.transformer_blocks[0].ff.net[0].proj.out_features
    )
    return ChromaShape(hidden, mlp, int(cfg.num_layers), single, int(cfg.approximator_layers))


def bfl_to_diffusers(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """BFL-layout Chroma weights (with or without the checkpoint prefix) in diffusers' names, any width."""
    src = strip_prefix(sd)
    pieces, norms = layout(bfl_shape(src))
    return split_by_layout(src, pieces, norms, model=MODEL)


def diffusers_to_bfl(sd: Mapping[str, torch.Tensor], *, prefix: str = "") -> dict[str, torch.Tensor]:
    """diffusers-named Chroma weights in BFL's layout (``prefix`` before each key, e.g. the checkpoint's)."""
    pieces, norms = layout(diffusers_shape(sd))
    return fuse_by_layout(sd, pieces, norms, prefix=prefix, model=MODEL)


def pieces_of(denoiser: torch.nn.Module) -> tuple[Piece, ...]:
    """The layout's Linears of a built transformer: what the kohya writer and reader name the LoRA by."""
    return layout(shape_of_model(denoiser))[0]
