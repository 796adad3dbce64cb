"""SD 3.5 LoRA files: kohya's layout (what sd-scripts, ComfyUI and Forge read), its reader for Continue from
LoRA, and diffusers' PEFT layout (what ``StableDiffusion3Pipeline.load_lora_weights`` reads).

**kohya's layout** (``networks/lora_sd3.py``) names each module after the original MMDiT's path with ``.`` as
``_``: ``lora_unet_joint_blocks_0_x_block_attn_qkv``, ``…_context_block_attn_qkv``, ``…_x_block_attn2_qkv`` (SD 3.5
Medium), ``…_x_block_mlp_fc1``, ``…_x_block_adaLN_modulation_1`` (capital ``adaLN`` kept, as kohya writes it);
text encoders ``lora_te1_`` (CLIP-L) and ``lora_te2_`` (CLIP-G) + the transformers path
(``text_model_encoder_layers_0_self_attn_q_proj``). Each module: ``.lora_down.weight`` [r, in],
``.lora_up.weight`` [out, r], ``.alpha``; every reader scales by ``alpha / lora_down.shape[0]``
(ComfyUI's ``LoRAAdapter.calculate_weight``, sd-scripts' ``LoRAModule``).

**Fused q/k/v.** We train diffusers' separate ``to_q``, ``to_k``, ``to_v`` (each its own LoRA, rank r, scale
s = α/r); the file has one ``attn.qkv`` = cat(q, k, v) along the output rows. The three are written as ONE LoRA
of rank 3r::

    down = cat([A_q, A_k, A_v])            [3r, in]
    up   = [[B_q, 0,   0  ],               [3·out, 3r]
            [0,   B_k, 0  ],
            [0,   0,   B_v]]
    alpha = 3α

``up @ down`` is, block row by block row, ``[B_q A_q; B_k A_k; B_v A_v]`` — each row block only meets its own
down block, the zero blocks adding exact zeros — which is the fused weight's delta row for row; and a reader's
scale ``alpha / down.shape[0] = 3α / 3r = α/r`` is the trained s. So the merged weight is exactly the trained
delta (to float rounding of the same products). The alpha must be multiplied: sd-scripts' own ``split_qkv`` writes
this block-diagonal form but keeps alpha unchanged, so every reader applies α/(3r) — its fused layers come out 3×
weaker than trained (kohya-ss/sd-scripts#2204, "Is alpha calculated correctly?"). A slice with another α/r than
the first is folded into its up block, so one alpha fits all three.

**Swapped halves.** The last block's ``context_block.adaLN_modulation.1`` and the final layer's are (shift,
scale) in the original and (scale, shift) in diffusers (:mod:`.convert`): their up rows are swapped on the way
out and back.

**Reading** (:func:`load_into`): our block-diagonal files and kohya's own fused files, whose q/k/v share one down
of rank r (``up`` [3·out, r]): the shared down is copied to q, k and v and the up split by rows — mflux had the
opposite bug, slicing a shared down (mflux-community/mflux#458). Which form a file has follows from its rank
against the network's: 3r rows with zero off-diagonal blocks is ours, r rows kohya's. diffusers-layout files
(``transformer.…lora_A.weight``, scale 1) are read too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from guitrainer.config import NetworkConfig
from guitrainer.engine.families.sd35 import convert
from guitrainer.engine.network.lora import (
    ADAPTER,
    LoraFormatError,
    lora_layers,
    read_lora_file,
)

DENOISER_PREFIX = "lora_unet"
#: kohya's prefix of each text encoder, by index (CLIP-L, CLIP-G, T5)
TEXT_ENCODER_PREFIXES = ("lora_te1", "lora_te2", "lora_te3")
#: diffusers' component of each text encoder (T5's LoRA is not loadable by diffusers' SD 3 loader)
DIFFUSERS_TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")


@dataclass(frozen=True)
class Slot:
    """Where one diffusers module's LoRA goes in the file: its piece and its row block of a fused one."""

    piece: convert.Piece
    index: int

    @property
    def name(self) -> str:
        return kohya_name(self.piece)


def kohya_name(piece: convert.Piece) -> str:
    return f"{DENOISER_PREFIX}_{piece.original.replace('.', '_')}"


def slots(config: Mapping[str, object]) -> dict[str, Slot]:
    """diffusers module path -> its :class:`Slot`, for every Linear an SD 3 transformer of ``config`` has."""
    return {
        name: Slot(piece, i)
        for piece in convert.pieces_for_config(config)
        if piece.linear
        for i, name in enumerate(piece.diffusers)
    }


def _unwrap(module: nn.Module) -> nn.Module:
    """The model inside a DDP / accelerate wrapper."""
    inner = getattr(module, "module", None)
    return inner if isinstance(inner, nn.Module) else module


def _refuse_other_networks(model: nn.Module) -> None:
    for name, m in model.named_modules():
        if hasattr(m, "hada_w1_a") or hasattr(m, "lokr_w1") or getattr(m, "lora_magnitude_vector", None):
            raise LoraFormatError(f"{name}: SD 3.5 LoRAs are written for plain LoRA layers only (LoHa / LoKr / DoRA found)")


def _cpu(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t if t.device.type == "meta" else t.cpu()


def _factors(layer: nn.Module, alpha: float | None) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(down, up, scale) of one peft LoRA layer, detached on the CPU (a ``meta`` model's stay there: names and shapes
    of full-size files are checked that way); scale = alpha / rank."""
    down, up = (_cpu(layer.lora_A[ADAPTER].weight), _cpu(layer.lora_B[ADAPTER].weight))
    a = float(alpha) if alpha is not None else float(layer.lora_alpha[ADAPTER])
    return down, up, a / down.shape[0]


# --------------------------------------------------------------------------- writing kohya's layout


def denoiser_state_dict(denoiser: nn.Module, alpha: float | None = None) -> dict[str, torch.Tensor]:
    """The transformer's LoRA in kohya's layout (fused q/k/v as described in the module docstring)."""
    model = _unwrap(denoiser)
    _refuse_other_networks(model)
    where = slots(model.config)
    grouped: dict[str, dict[int, nn.Module]] = {}
    pieces: dict[str, convert.Piece] = {}
    for path, layer in lora_layers(model).items():
        slot = where.get(path.removesuffix(".base_layer"))
        if slot is None:
            raise LoraFormatError(f"{path}: a LoRA on a layer the original MMDiT layout has no name for")
        grouped.setdefault(slot.name, {})[slot.index] = layer
        pieces[slot.name] = slot.piece
    out: dict[str, torch.Tensor] = {}
    for name, layers in grouped.items():
        piece = pieces[name]
        if piece.fused:
            down, up, file_alpha = _fused(piece, layers, alpha)
        else:
            down, up, scale = _factors(layers[0], alpha)
            file_alpha = scale * down.shape[0]
        if piece.swapped:
            up = convert.swap_halves(up)
        out[f"{name}.lora_down.weight"] = down.contiguous()
        out[f"{name}.lora_up.weight"] = up.contiguous()
        out[f"{name}.alpha"] = torch.tensor(file_alpha, dtype=down.dtype)
    return out


def _fused(piece: convert.Piece, layers: Mapping[int, nn.Module], alpha: float | None) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One LoRA for a fused layer from its slices' LoRAs: down stacked, up block-diagonal, alpha × (total rank /
    the first slice's rank) so ``alpha / rows`` is the trained scale; a slice not trained keeps zero rows."""
    factors = {i: _factors(layer, alpha) for i, layer in sorted(layers.items())}
    first = next(iter(factors.values()))
    reference = first[2]
    out_rows = first[1].shape[0]
    total_rank = sum(d.shape[0] for d, _, _ in factors.values())
    down = torch.cat([d for d, _, _ in factors.values()], dim=0)
    up = torch.zeros(out_rows * len(piece.diffusers), total_rank, dtype=first[1].dtype, device=first[1].device)
    column = 0
    for i, (d, u, scale) in factors.items():
        rank = d.shape[0]
        block = u if scale == reference else (u.float() * (scale / reference)).to(u.dtype)
        up[i * out_rows:(i + 1) * out_rows, column:column + rank] = block
        column += rank
    return down, up, reference * total_rank


def text_encoder_state_dict(text_encoders: Sequence[nn.Module], alpha: float | None = None) -> dict[str, torch.Tensor]:
    """The text encoders' LoRA: ``lora_te1_`` CLIP-L, ``lora_te2_`` CLIP-G (``lora_te3_`` T5, if one was trained)."""
    out: dict[str, torch.Tensor] = {}
    for prefix, encoder in zip(TEXT_ENCODER_PREFIXES, text_encoders):
        model = _unwrap(encoder)
        _refuse_other_networks(model)
        for path, layer in lora_layers(model).items():
            name = f"{prefix}_{path.removesuffix('.base_layer').replace('.', '_')}"
            down, up, scale = _factors(layer, alpha)
            out[f"{name}.lora_down.weight"] = down.contiguous()
            out[f"{name}.lora_up.weight"] = up.contiguous()
            out[f"{name}.alpha"] = torch.tensor(scale * down.shape[0], dtype=down.dtype)
    return out


def kohya_state_dict(
    denoiser: nn.Module, text_encoders: Sequence[nn.Module] = (), alpha: float | None = None
) -> dict[str, torch.Tensor]:
    """The whole LoRA in kohya's layout; ``alpha`` None takes each layer's own."""
    return {**denoiser_state_dict(denoiser, alpha), **text_encoder_state_dict(text_encoders, alpha)}


# --------------------------------------------------------------------------- writing diffusers' layout


def diffusers_state_dict(
    denoiser: nn.Module, text_encoders: Sequence[nn.Module] = (), alpha: float | None = None
) -> dict[str, torch.Tensor]:
    """PEFT names as ``StableDiffusion3Pipeline.save_lora_weights`` writes them (``transformer.<module>.lora_A.weight``,
    ``text_encoder.…`` / ``text_encoder_2.…``), α/r baked into ``lora_B``: diffusers' SD 3 loader rejects ``.alpha``
    keys ("Invalid LoRA checkpoint") and reads the rest at scale 1. ComfyUI reads these names too
    (``model_lora_keys_unet``: ``transformer.`` + ``mmdit_to_diffusers``). T5's LoRA, if any, is left out:
    diffusers cannot load it."""
    groups: list[tuple[str, nn.Module]] = [("transformer", denoiser), *zip(DIFFUSERS_TEXT_ENCODERS[:2], text_encoders)]
    out: dict[str, torch.Tensor] = {}
    for component, module in groups:
        model = _unwrap(module)
        _refuse_other_networks(model)
        for path, layer in lora_layers(model).items():
            down, up, scale = _factors(layer, alpha)
            key = f"{component}.{path.removesuffix('.base_layer')}"
            out[f"{key}.lora_A.weight"] = down.contiguous()
            out[f"{key}.lora_B.weight"] = (up.float() * scale).to(up.dtype).contiguous()
    return out


# --------------------------------------------------------------------------- reading (Continue from LoRA)


def is_diffusers_layout(sd: Mapping[str, torch.Tensor]) -> bool:
    return bool(sd) and all(k.startswith(("transformer.", *(f"{c}." for c in DIFFUSERS_TEXT_ENCODERS))) for k in sd)


def _assign(layer: nn.Module, down: torch.Tensor, up: torch.Tensor, scale: float, name: str) -> None:
    """Copy one module's factors into a peft layer, ``up`` rescaled so the layer's own scaling gives ``scale``."""
    a_param = layer.lora_A[ADAPTER].weight
    b_param = layer.lora_B[ADAPTER].weight
    if down.shape != a_param.shape or up.shape != b_param.shape:
        raise LoraFormatError(
            f"{name}: the file has rank {down.shape[0]} (down {tuple(down.shape)}, up {tuple(up.shape)}), the network "
            f"has {tuple(a_param.shape)} / {tuple(b_param.shape)}; set network.rank to the file's rank to continue from it"
        )
    ratio = scale / float(layer.scaling[ADAPTER])
    a_param.copy_(down.to(a_param.dtype))
    b_param.copy_((up.float() * ratio).to(b_param.dtype))


def _split_fused(
    name: str, down: torch.Tensor, up: torch.Tensor, alpha: float, slices: int, network_rank: int
) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """Each slice's (down, up, scale) of a fused module, in either form (see the module docstring)."""
    rows = down.shape[0]
    out_rows = up.shape[0] // slices
    scale = alpha / rows  # what every reader applies to the whole module
    if rows == slices * network_rank and rows != network_rank:
        r = network_rank
        for i in range(slices):
            for j in range(slices):
                if i != j and up[i * out_rows:(i + 1) * out_rows, j * r:(j + 1) * r].any():
                    raise LoraFormatError(
                        f"{name}: rank {rows} = {slices} × the network's {r}, but its up is not block-diagonal, so it "
                        f"cannot be split into {slices} LoRAs of rank {r}; set network.rank to {rows}"
                    )
        return [(down[i * r:(i + 1) * r], up[i * out_rows:(i + 1) * out_rows, i * r:(i + 1) * r], scale) for i in range(slices)]
    # kohya's own: one down shared by the slices, the up split by rows
    return [(down, up[i * out_rows:(i + 1) * out_rows], scale) for i in range(slices)]


def _text_targets(text_encoders: Sequence[nn.Module]) -> dict[str, nn.Module]:
    targets: dict[str, nn.Module] = {}
    for prefix, encoder in zip(TEXT_ENCODER_PREFIXES, text_encoders):
        for path, layer in lora_layers(_unwrap(encoder)).items():
            path = path.removesuffix(".base_layer")
            targets[f"{prefix}_{path.replace('.', '_')}"] = layer
            if path.startswith("text_model."):  # files written without CLIP's text_model level
                targets.setdefault(f"{prefix}_{path.removeprefix('text_model.').replace('.', '_')}", layer)
    return targets


def load_into(
    sd: Mapping[str, torch.Tensor],
    denoiser: nn.Module,
    text_encoders: Sequence[nn.Module] = (),
    *,
    strict: bool = True,
    skipped: list[str] | None = None,
) -> int:
    """Copy a LoRA file's tensors (kohya or diffusers layout) into already-injected peft LoRA layers; returns the
    number of file modules set. ``strict``: a module that matches no trained layer is an error; otherwise its name
    goes to ``skipped``."""
    if not any(k.endswith((".lora_down.weight", ".lora_A.weight")) for k in sd):
        raise LoraFormatError("the file holds no LoRA weights (no lora_down / lora_up or lora_A / lora_B tensors)")
    if is_diffusers_layout(sd):
        return _load_diffusers_layout(sd, denoiser, text_encoders, strict=strict, skipped=skipped)
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in sd.items():
        module, _, part = key.partition(".")
        parts.setdefault(module, {})[part] = value
    model = _unwrap(denoiser)
    layers = {p.removesuffix(".base_layer"): m for p, m in lora_layers(model).items()}
    by_name: dict[str, tuple[convert.Piece, dict[int, nn.Module]]] = {}
    for path, slot in slots(model.config).items():
        if path in layers:
            by_name.setdefault(slot.name, (slot.piece, {}))[1][slot.index] = layers[path]
    text_targets = _text_targets(text_encoders)
    unknown: list[str] = []
    count = 0
    with torch.no_grad():
        for module, tensors in sorted(parts.items()):
            if "lora_down.weight" not in tensors or "lora_up.weight" not in tensors:
                raise LoraFormatError(
                    f"{module}: not a plain LoRA module ({', '.join(sorted(tensors))}); SD 3.5 continues from plain LoRA "
                    "files only (network.type 'lora')"
                )
            down, up = tensors["lora_down.weight"].float(), tensors["lora_up.weight"].float()
            alpha = float(tensors["alpha"]) if "alpha" in tensors else float(down.shape[0])
            if module in text_targets:
                _assign(text_targets[module], down, up, alpha / down.shape[0], module)
            elif module in by_name:
                piece, slot_layers = by_name[module]
                if piece.swapped:
                    up = convert.swap_halves(up)
                if piece.fused:
                    network_rank = next(iter(slot_layers.values())).lora_A[ADAPTER].weight.shape[0]
                    split = _split_fused(module, down, up, alpha, len(piece.diffusers), network_rank)
                    for i, (d, u, scale) in enumerate(split):
                        if i in slot_layers:
                            _assign(slot_layers[i], d, u, scale, f"{module} ({piece.diffusers[i]})")
                else:
                    _assign(slot_layers[0], down, up, alpha / down.shape[0], module)
            else:
                unknown.append(module)
                continue
            count += 1
    _report_unknown(unknown, len(parts), strict, skipped)
    return count


def _load_diffusers_layout(
    sd: Mapping[str, torch.Tensor], denoiser: nn.Module, text_encoders: Sequence[nn.Module], *, strict: bool,
    skipped: list[str] | None,
) -> int:
    """PEFT-layout tensors (α/r baked in: scale 1) into the peft layers."""
    groups = {"transformer": _unwrap(denoiser), **{c: _unwrap(te) for c, te in zip(DIFFUSERS_TEXT_ENCODERS, text_encoders)}}
    targets = {
        f"{component}.{path.removesuffix('.base_layer')}": layer
        for component, model in groups.items()
        for path, layer in lora_layers(model).items()
    }
    modules = sorted({k.rsplit(".lora_", 1)[0] for k in sd if ".lora_" in k})
    unknown = [m for m in modules if m not in targets]
    with torch.no_grad():
        for module in modules:
            if module in targets:
                down, up = sd[f"{module}.lora_A.weight"].float(), sd[f"{module}.lora_B.weight"].float()
                _assign(targets[module], down, up, 1.0, module)
    _report_unknown(unknown, len(modules), strict, skipped)
    return len(modules) - len(unknown)


def _report_unknown(unknown: list[str], total: int, strict: bool, skipped: list[str] | None) -> None:
    if unknown and strict:
        raise LoraFormatError(
            f"{len(unknown)} of {total} LoRA modules match no layer trained here, e.g. {', '.join(unknown[:3])}; "
            "check the base model (SD 3.5 Large / Medium) and network.target_modules"
        )
    if skipped is not None:
        skipped.extend(unknown)


def load_file(
    path: str | Path, network: NetworkConfig, denoiser: nn.Module, text_encoders: Sequence[nn.Module], skipped: list[str]
) -> int:
    """Continue from LoRA: the file's modules into the injected network (:func:`load_into`, those matching no
    trained layer go to ``skipped``)."""
    if network.type != "lora":
        raise LoraFormatError(f"SD 3.5 trains plain LoRA only: set network.type to 'lora' (it is {network.type!r})")
    sd = read_lora_file(path)[0]
    return load_into(sd, denoiser, text_encoders, strict=False, skipped=skipped)
