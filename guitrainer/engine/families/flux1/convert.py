"""The Flux transformer in both layouts: BFL's original (``double_blocks.N.img_attn.qkv``…, what the released
files, ComfyUI, Forge and kohya's LoRA names use) and diffusers' (``transformer_blocks.N.attn.to_q``…, what
:class:`~diffusers.FluxTransformer2DModel` is built of), converted both ways.

One table, :func:`layout`, says which diffusers modules make each BFL module; the weight converters and the
LoRA file (:mod:`.export`) both read it, so the names cannot drift apart. The rules it encodes
(diffusers ``convert_flux_transformer_checkpoint_to_diffusers``, ComfyUI ``comfy.utils.flux_to_diffusers``):

* fused rows: ``img_attn.qkv`` / ``txt_attn.qkv`` = [q; k; v] (each ``hidden`` rows); a single block's
  ``linear1`` = [q; k; v; mlp] (``hidden``, ``hidden``, ``hidden``, ``mlp`` rows);
* a single block's ``linear2`` is diffusers' ``proj_out`` unchanged: its *input* columns are [attention
  (``hidden``) | gelu(mlp) (``mlp``)], the order both concatenate in before it;
* the final layer's modulation is (shift, scale) in BFL's ``LastLayer`` and (scale, shift) in diffusers'
  ``AdaLayerNormContinuous``: its two halves of rows swap; every block modulation keeps its order
  ((shift, scale, gate) x 1 or 2 in both);
* the RMSNorm scales of the q/k norms are ``….norm.query_norm.scale`` / ``key_norm.scale`` in BFL's layout.

**Width-aware.** diffusers' converter hard-codes ``inner_dim = 3072`` and ``mlp_ratio = 4`` (it counts the
blocks from the keys, not the width), so it cannot load the tiny Flux models tests build; ComfyUI's
``detect_unet_config`` hard-codes 3072 too. Here the widths come from the tensors themselves: ``hidden`` from
``img_in.weight``'s rows (``x_embedder`` in diffusers' names), ``mlp`` from ``linear1`` (``proj_mlp``), the
block counts and the guidance embedder (dev) from the keys. Only dim 0 of each tensor is read, so the
converters also run on ``meta`` tensors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

#: ComfyUI / SAI checkpoints put this before every transformer key
CHECKPOINT_PREFIX = "model.diffusion_model."


@dataclass(frozen=True)
class Piece:
    """One BFL module and the diffusers modules it is made of, in row order.

    ``rows``: the output rows each diffusers module takes of a fused BFL weight (empty for a plain rename);
    ``swap_halves``: the BFL rows are the diffusers rows with their two halves swapped (the final layer).
    """

    bfl: str
    diffusers: tuple[str, ...]
    rows: tuple[int, ...] = ()
    swap_halves: bool = False

    @property
    def fused(self) -> bool:
        return len(self.diffusers) > 1


@dataclass(frozen=True)
class FluxShape:
    """What a Flux transformer's layout depends on: its widths, block counts, and whether it has the guidance
    embedder (dev) or not (schnell)."""

    hidden: int
    mlp: int
    double_blocks: int
    single_blocks: int
    guidance: bool


def layout(shape: FluxShape) -> tuple[tuple[Piece, ...], dict[str, str]]:
    """(every Linear as a :class:`Piece`, the RMSNorm scales as ``{bfl key: diffusers key}``) of a transformer."""
    h, m = shape.hidden, shape.mlp
    pieces: list[Piece] = []

    def plain(bfl: str, diffusers: str) -> None:
        pieces.append(Piece(bfl, (diffusers,)))

    embedders = [("time_in", "time_text_embed.timestep_embedder"), ("vector_in", "time_text_embed.text_embedder")]
    if shape.guidance:
        embedders.append(("guidance_in", "time_text_embed.guidance_embedder"))
    for bfl, diff in embedders:
        plain(f"{bfl}.in_layer", f"{diff}.linear_1")
        plain(f"{bfl}.out_layer", f"{diff}.linear_2")
    plain("txt_in", "context_embedder")
    plain("img_in", "x_embedder")
    norms: dict[str, str] = {}
    for i in range(shape.double_blocks):
        b, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        plain(f"{b}.img_mod.lin", f"{d}.norm1.linear")
        plain(f"{b}.txt_mod.lin", f"{d}.norm1_context.linear")
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
        plain(f"{b}.modulation.lin", f"{d}.norm.linear")
        norms[f"{b}.norm.query_norm.scale"] = f"{d}.attn.norm_q.weight"
        norms[f"{b}.norm.key_norm.scale"] = f"{d}.attn.norm_k.weight"
    pieces.append(Piece("final_layer.adaLN_modulation.1", ("norm_out.linear",), swap_halves=True))
    plain("final_layer.linear", "proj_out")
    return tuple(pieces), norms


def _count(keys: list[str], pattern: str) -> int:
    found = {int(m.group(1)) for k in keys if (m := re.match(pattern, k))}
    return max(found) + 1 if found else 0


def bfl_shape(sd: Mapping[str, torch.Tensor]) -> FluxShape:
    """The :class:`FluxShape` of a BFL-layout state dict (prefix already removed)."""
    keys = list(sd)
    hidden = int(sd["img_in.weight"].shape[0])
    single = _count(keys, r"single_blocks\.(\d+)\.")
    mlp = 4 * hidden
    if single:
        mlp = int(sd["single_blocks.0.linear1.weight"].shape[0]) - 3 * hidden
    elif "double_blocks.0.img_mlp.0.weight" in sd:
        mlp = int(sd["double_blocks.0.img_mlp.0.weight"].shape[0])
    return FluxShape(hidden, mlp, _count(keys, r"double_blocks\.(\d+)\."), single, "guidance_in.in_layer.weight" in sd)


def diffusers_shape(sd: Mapping[str, torch.Tensor]) -> FluxShape:
    """The :class:`FluxShape` of a diffusers-named state dict."""
    keys = list(sd)
    hidden = int(sd["x_embedder.weight"].shape[0])
    mlp = 4 * hidden
    for key in ("single_transformer_blocks.0.proj_mlp.weight", "transformer_blocks.0.ff.net.0.proj.weight"):
        if key in sd:
            mlp = int(sd[key].shape[0])
            break
    return FluxShape(
        hidden,
        mlp,
        _count(keys, r"transformer_blocks\.(\d+)\."),
        _count(keys, r"single_transformer_blocks\.(\d+)\."),
        "time_text_embed.guidance_embedder.linear_1.weight" in sd,
    )


def strip_prefix(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The transformer's own keys of a BFL file: ``model.diffusion_model.`` removed where a checkpoint has it
    (then only those keys: the text encoders and VAE beside them are left out)."""
    if any(k.startswith(CHECKPOINT_PREFIX) for k in sd):
        return {k[len(CHECKPOINT_PREFIX):]: v for k, v in sd.items() if k.startswith(CHECKPOINT_PREFIX)}
    return dict(sd)


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def _unexpected(sd: Mapping[str, torch.Tensor], used: set[str], what: str, model: str) -> None:
    left = sorted(set(sd) - used)
    if left:
        raise KeyError(f"{len(left)} {what} keys are not part of {model}, e.g. {', '.join(left[:3])}")


def split_by_layout(
    src: Mapping[str, torch.Tensor], pieces: Sequence[Piece], norms: Mapping[str, str], *, model: str = "a Flux.1 transformer"
) -> dict[str, torch.Tensor]:
    """Original-layout weights (no prefix) in diffusers' names by a :func:`layout`-shaped table: each fused weight
    split along dim 0 into its pieces (views, no copy). ``KeyError`` names missing or unknown keys (``model`` says
    what was expected). Flux-derived families (Chroma) convert through it with their own table."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for piece in pieces:
        for kind in ("weight", "bias"):
            key = f"{piece.bfl}.{kind}"
            if key not in src:
                raise KeyError(f"{model} has no {key}")
            used.add(key)
            tensor = _swap_halves(src[key]) if piece.swap_halves else src[key]
            parts = tensor.split(list(piece.rows), dim=0) if piece.fused else (tensor,)
            for name, part in zip(piece.diffusers, parts):
                out[f"{name}.{kind}"] = part
    for bfl, diff in norms.items():
        if bfl not in src:
            raise KeyError(f"{model} has no {bfl}")
        used.add(bfl)
        out[diff] = src[bfl]
    _unexpected(src, used, "original-layout", model)
    return out


def fuse_by_layout(
    sd: Mapping[str, torch.Tensor], pieces: Sequence[Piece], norms: Mapping[str, str], *, prefix: str = "",
    model: str = "a Flux.1 transformer",
) -> dict[str, torch.Tensor]:
    """The inverse of :func:`split_by_layout`: diffusers-named weights in the original layout, ``prefix`` before
    each key."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for piece in pieces:
        for kind in ("weight", "bias"):
            keys = [f"{name}.{kind}" for name in piece.diffusers]
            missing = [k for k in keys if k not in sd]
            if missing:
                raise KeyError(f"{model} has no {missing[0]}")
            used.update(keys)
            tensor = torch.cat([sd[k] for k in keys], dim=0) if piece.fused else sd[keys[0]]
            out[f"{prefix}{piece.bfl}.{kind}"] = _swap_halves(tensor) if piece.swap_halves else tensor
    for bfl, diff in norms.items():
        if diff not in sd:
            raise KeyError(f"{model} has no {diff}")
        used.add(diff)
        out[f"{prefix}{bfl}"] = sd[diff]
    _unexpected(sd, used, "diffusers", model)
    return out


def bfl_to_diffusers(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """BFL-layout transformer weights (with or without the checkpoint prefix) in diffusers' names, any width.

    Tensors are split along dim 0 (views, no copy); ``KeyError`` names missing or unknown keys.
    """
    src = strip_prefix(sd)
    pieces, norms = layout(bfl_shape(src))
    return split_by_layout(src, pieces, norms)


def diffusers_to_bfl(sd: Mapping[str, torch.Tensor], *, prefix: str = "") -> dict[str, torch.Tensor]:
    """diffusers-named transformer weights in BFL's layout (``prefix`` before each key, e.g. the checkpoint's)."""
    pieces, norms = layout(diffusers_shape(sd))
    return fuse_by_layout(sd, pieces, norms, prefix=prefix)


def shape_of_model(denoiser: torch.nn.Module) -> FluxShape:
    """The :class:`FluxShape` of a built ``FluxTransformer2DModel`` (from its config and modules, any device)."""
    cfg = denoiser.config
    hidden = int(cfg.num_attention_heads) * int(cfg.attention_head_dim)
    single = int(cfg.num_single_layers)
    if single:
        mlp = int(denoiser.single_transformer_blocks[0].proj_mlp.out_features)
    else:
        mlp = int(denoiser.transformer_blocks[0].ff.net[0].proj.out_features)
    return FluxShape(hidden, mlp, int(cfg.num_layers), single, bool(cfg.guidance_embeds))
