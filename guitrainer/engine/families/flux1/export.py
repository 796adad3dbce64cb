"""The Flux LoRA file: kohya's names in BFL's original layout, written from our (split) peft LoRA and read back
into it, and the file's metadata as sd-scripts writes it.

**The layout every reader shares.** sd-scripts (``networks/lora_flux.py``), ComfyUI (``comfy/lora.py``
``model_lora_keys_unet``: ``lora_unet_<BFL path, . -> _>`` for every weight of the model) and Forge read
``lora_unet_double_blocks_N_img_attn_qkv``, ``…_txt_attn_qkv``, ``…_img_attn_proj``, ``…_img_mlp_0``,
``…_img_mod_lin``, ``lora_unet_single_blocks_N_linear1``, ``…_linear2``, ``…_modulation_lin``, and
``lora_te1_text_model_encoder_layers_N_…`` for CLIP-L; each with ``.lora_down.weight`` [r, in],
``.lora_up.weight`` [out, r] and a 0-dim ``.alpha``; the merge is ``W += (alpha / down.shape[0]) · up @ down``.
diffusers' ``FluxLoraLoaderMixin`` converts the same names (it splits the fused ones back).

**Fused modules.** peft trains diffusers' modules, which split what BFL fuses: ``to_q``, ``to_k``, ``to_v``
(and, in a single block, ``proj_mlp``) are the row blocks of one BFL weight (:mod:`.convert`). Their k LoRAs
``(A_j [r_j, in], B_j [out_j, r_j], scale s_j = alpha_j / r_j)`` are written as one LoRA of rank R = Σ r_j:

* ``down = cat(A_1 … A_k)`` — [R, in];
* ``up`` block-diagonal — [Σ out, R]: ``B_j · (s_j / s)`` in slot j's rows and its own rank columns, zeros
  elsewhere (a slot not trained here: zero rows);
* ``alpha = s · R`` with ``s = s_1`` — k times the trained alpha for equal ranks.

Then a reader's ``(alpha / down.shape[0]) · up @ down = s · Σ_j (rows of slot j) (s_j / s) · B_j A_j``: slot j's
rows get exactly ``s_j · B_j A_j``, the delta peft trained for that module, and the other rows nothing — the
merged weight equals the trained one to the last rounding of a matrix product. The alpha is what makes it
so: sd-scripts' own ``split_qkv`` saves this same block-diagonal form but keeps the rank-r alpha, so every
reader, dividing by ``down.shape[0] = 3r``, applies those layers 3–4x weaker than trained
(kohya-ss/sd-scripts#2204, "Is alpha calculated correctly?"). A block-diagonal ``up`` also tells diffusers'
converter to chunk the down per slice instead of sharing it.

**Reading back** (Continue from LoRA): our files, sd-scripts' split_qkv files (block-diagonal, read with their
written alpha, as every reader merges them) and kohya's ordinary fused files (one shared down of rank r: copied
to each split module, the up split by rows) all load into the split peft LoRA, each module keeping the delta
the file means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.engine import flow_matching
from guitrainer.engine.families.flux1 import convert
from guitrainer.engine.network.lora import (
    ADAPTER,
    LoraFormatError,
    kohya_module_name,
    lora_layers,
    read_lora_file,
)

UNET_PREFIX = "lora_unet"
CLIP_PREFIX = "lora_te1"  # sd-scripts' LORA_PREFIX_TEXT_ENCODER_CLIP
T5_PREFIX = "lora_te3"  # sd-scripts' LORA_PREFIX_TEXT_ENCODER_T5 ("make ComfyUI compatible")
#: what other trainers call CLIP-L's LoRA (ComfyUI reads both)
CLIP_ALIASES = ("lora_te1", "lora_te")
IMPLEMENTATION = "https://github.com/black-forest-labs/flux"
_PEFT_PREFIXES = ("base_model.model.", "module.")


def kohya_name(bfl_module: str) -> str:
    """``double_blocks.0.img_attn.qkv`` -> ``lora_unet_double_blocks_0_img_attn_qkv``."""
    return f"{UNET_PREFIX}_{bfl_module.replace('.', '_')}"


def _own_name(name: str) -> str:
    for prefix in _PEFT_PREFIXES:
        name = name.removeprefix(prefix)
    return name


def _unwrapped(model: nn.Module) -> nn.Module:
    """The model inside a DistributedDataParallel wrapper (its config and module names are the model's)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _layer_parts(layer: nn.Module, alpha: float | None) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(A, B, scale) of a peft LoRA layer: ``alpha`` (None: the layer's own) over its rank."""
    down = layer.lora_A[ADAPTER].weight.detach()
    up = layer.lora_B[ADAPTER].weight.detach()
    a = float(alpha) if alpha is not None else float(layer.lora_alpha[ADAPTER])
    return down, up, a / down.shape[0]


def _swap_rows(t: torch.Tensor) -> torch.Tensor:
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def _fused(piece: convert.Piece, trained: dict[int, tuple[torch.Tensor, torch.Tensor, float]]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(down, up, alpha) of one fused BFL module from its trained slots (module docstring: why it is exact)."""
    slots = sorted(trained)
    scale = trained[slots[0]][2]
    downs = [trained[j][0] for j in slots]
    rank = sum(d.shape[0] for d in downs)
    first_up = trained[slots[0]][1]
    up = torch.zeros(sum(piece.rows), rank, dtype=first_up.dtype, device=first_up.device)
    offsets = [sum(piece.rows[:j]) for j in range(len(piece.rows))]
    col = 0
    for j in slots:
        down_j, up_j, scale_j = trained[j]
        r = down_j.shape[0]
        up[offsets[j]: offsets[j] + piece.rows[j], col: col + r] = up_j * (scale_j / scale) if scale_j != scale else up_j
        col += r
    return torch.cat(downs, dim=0), up, scale * rank


def kohya_state_dict(
    denoiser: nn.Module, text_encoders: Sequence[nn.Module] = (), alpha: float | None = None, *, to_cpu: bool = True,
    pieces: Sequence[convert.Piece] | None = None,
) -> dict[str, torch.Tensor]:
    """The trained LoRA in kohya's Flux layout (detached; on the CPU unless ``to_cpu`` is False, e.g. for a
    model on ``meta``), in the LoRA parameters' dtype.

    ``alpha`` is every module's trained alpha (None: each peft layer's own); fused modules get theirs scaled
    as the module docstring says. CLIP-L is written under ``lora_te1_``, a T5 LoRA (never trained here by
    default) under ``lora_te3_``. ``pieces``: the model's layout table (None: Flux.1's, from the denoiser); a
    Flux-derived family with other layers (Chroma) passes its own.
    """
    denoiser = _unwrapped(denoiser)
    if pieces is None:
        pieces = convert.layout(convert.shape_of_model(denoiser))[0]
    index = {name: (piece, i) for piece in pieces for i, name in enumerate(piece.diffusers)}
    grouped: dict[str, tuple[convert.Piece, dict[int, tuple[torch.Tensor, torch.Tensor, float]]]] = {}
    for name, layer in lora_layers(denoiser).items():
        own = _own_name(name)
        if own not in index:
            raise LoraFormatError(f"{own}: a LoRA on a layer the Flux file layout has no name for")
        piece, slot = index[own]
        grouped.setdefault(piece.bfl, (piece, {}))[1][slot] = _layer_parts(layer, alpha)
    out: dict[str, torch.Tensor] = {}
    for bfl, (piece, trained) in grouped.items():
        if piece.fused:
            down, up, file_alpha = _fused(piece, trained)
        else:
            down, up, scale = trained[0]
            up = _swap_rows(up) if piece.swap_halves else up
            file_alpha = scale * down.shape[0]
        key = kohya_name(bfl)
        out[f"{key}.lora_down.weight"] = down.contiguous()
        out[f"{key}.lora_up.weight"] = up.contiguous()
        out[f"{key}.alpha"] = torch.tensor(float(file_alpha), dtype=down.dtype, device=down.device)
    for prefix, encoder in zip((CLIP_PREFIX, T5_PREFIX), text_encoders):
        for name, layer in lora_layers(_unwrapped(encoder)).items():
            down, up, scale = _layer_parts(layer, alpha)
            key = kohya_module_name(prefix, _own_name(name)) if prefix == CLIP_PREFIX else f"{prefix}_{_own_name(name).replace('.', '_')}"
            out[f"{key}.lora_down.weight"] = down.contiguous()
            out[f"{key}.lora_up.weight"] = up.contiguous()
            out[f"{key}.alpha"] = torch.tensor(scale * down.shape[0], dtype=down.dtype, device=down.device)
    return {k: v.cpu() for k, v in out.items()} if to_cpu else out


# --------------------------------------------------------------------------- reading a file back


def _modules(sd: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in sd.items():
        module, _, part = key.partition(".")
        parts.setdefault(module, {})[part] = value
    return parts


def _set(layer: nn.Module, down: torch.Tensor, up: torch.Tensor, scale: float, module: str) -> None:
    """Copy (down, up) into a peft layer so that its delta is ``scale · up @ down``."""
    a_param, b_param = layer.lora_A[ADAPTER].weight, layer.lora_B[ADAPTER].weight
    if tuple(down.shape) != tuple(a_param.shape) or tuple(up.shape) != tuple(b_param.shape):
        raise LoraFormatError(
            f"{module}: the file has rank {down.shape[0]} (down {tuple(down.shape)}, up {tuple(up.shape)}), the network "
            f"rank {a_param.shape[0]} (down {tuple(a_param.shape)}); set network.rank to the file's rank to continue from it"
        )
    a_param.copy_(down.to(a_param.dtype))
    b_param.copy_((up.float() * (scale / float(layer.scaling[ADAPTER]))).to(b_param.dtype))


def _fused_into(
    module: str, piece: convert.Piece, tensors: dict[str, torch.Tensor], layers: dict[int, nn.Module]
) -> None:
    """One fused module of a file into the split peft layers of its slots (shared down, or block-diagonal)."""
    down, up = tensors["lora_down.weight"].float(), tensors["lora_up.weight"].float()
    rank = down.shape[0]
    scale = float(tensors["alpha"]) / rank if "alpha" in tensors else 1.0
    offsets = [sum(piece.rows[:j]) for j in range(len(piece.rows))]
    rows = {j: up[offsets[j]: offsets[j] + piece.rows[j]] for j in range(len(piece.rows))}
    for j, block in rows.items():
        if j not in layers and block.abs().max() > 0:
            raise LoraFormatError(f"{module}: the file changes {piece.diffusers[j]}, a layer this network does not "
                                  "train; choose network.target_modules to include it")
    slots = sorted(layers)
    net_rank = int(layers[slots[0]].lora_A[ADAPTER].weight.shape[0])
    if rank == net_rank:  # one down shared by every slot (kohya's own fused LoRA)
        for j in slots:
            _set(layers[j], down, rows[j], scale, module)
        return
    if rank != net_rank * len(slots):
        raise LoraFormatError(f"{module}: rank {rank} fits neither one LoRA of rank {net_rank} shared by its "
                              f"{len(slots)} parts nor one per part: set network.rank to the file's, and "
                              "network.target_modules to the layers it was trained on")
    for c, j in enumerate(slots):  # block-diagonal: slot j's rank columns, in slot order (ours, kohya's split_qkv)
        cols = slice(c * net_rank, (c + 1) * net_rank)
        others = torch.cat([rows[i][:, cols] for i in rows if i != j])
        if others.abs().max() > 0:
            raise LoraFormatError(f"{module}: rank {rank} is {len(slots)} x {net_rank} but the up weight is not "
                                  "block-diagonal over the parts; it cannot be split into this network's layers")
        _set(layers[j], down[cols], rows[j][:, cols], scale, module)


def load_kohya_lora(
    sd: Mapping[str, torch.Tensor], denoiser: nn.Module, text_encoders: Sequence[nn.Module] = (),
    *, strict: bool = True, skipped: list[str] | None = None, pieces: Sequence[convert.Piece] | None = None,
) -> int:
    """Copy a kohya Flux LoRA (ours, or sd-scripts') into the already injected split peft LoRA; returns how many
    of the file's modules were set. Modules that match no trained layer raise :class:`LoraFormatError`
    (``strict``) or are appended to ``skipped``. ``pieces`` as for :func:`kohya_state_dict`."""
    denoiser = _unwrapped(denoiser)
    table = pieces if pieces is not None else convert.layout(convert.shape_of_model(denoiser))[0]
    by_name = {kohya_name(p.bfl): p for p in table}
    unet_layers = {_own_name(n): m for n, m in lora_layers(denoiser).items()}
    clip_layers: dict[str, nn.Module] = {}
    if text_encoders:
        for n, m in lora_layers(_unwrapped(text_encoders[0])).items():
            for prefix in CLIP_ALIASES:
                clip_layers[kohya_module_name(prefix, _own_name(n))] = m
    modules = _modules(sd)
    if not any("lora_down.weight" in p for p in modules.values()):
        raise LoraFormatError("the file holds no LoRA weights (no lora_down / lora_up tensors)")
    unknown: list[str] = []
    done = 0
    with torch.no_grad():
        for module, tensors in sorted(modules.items()):
            if set(tensors) - {"lora_down.weight", "lora_up.weight", "alpha"} or "lora_up.weight" not in tensors:
                raise LoraFormatError(f"{module} is not a plain LoRA module ({', '.join(sorted(tensors))})")
            piece = by_name.get(module)
            slots = {j: unet_layers[n] for j, n in enumerate(piece.diffusers) if n in unet_layers} if piece else {}
            if piece is not None and slots:
                if piece.fused:
                    _fused_into(module, piece, tensors, slots)
                else:
                    up = tensors["lora_up.weight"]
                    scale = float(tensors["alpha"]) / tensors["lora_down.weight"].shape[0] if "alpha" in tensors else 1.0
                    _set(slots[0], tensors["lora_down.weight"], _swap_rows(up) if piece.swap_halves else up, scale, module)
            elif module in clip_layers:
                down = tensors["lora_down.weight"]
                scale = float(tensors["alpha"]) / down.shape[0] if "alpha" in tensors else 1.0
                _set(clip_layers[module], down, tensors["lora_up.weight"], scale, module)
            else:
                unknown.append(module)
                continue
            done += 1
    if unknown and strict:
        raise LoraFormatError(f"{len(unknown)} of {len(modules)} LoRA modules match no layer trained here, e.g. "
                              f"{', '.join(unknown[:3])}; check the base model family and network.target_modules")
    if skipped is not None:
        skipped.extend(unknown)
    return done


def load_lora_file(
    path: Path, network: NetworkConfig, denoiser: nn.Module, text_encoders: Sequence[nn.Module], skipped: list[str],
    *, pieces: Sequence[convert.Piece] | None = None, label: str = "Flux.1",
) -> int:
    """Continue from LoRA: a kohya Flux file (our layout, sd-scripts') into the injected split LoRA; modules that
    match no trained layer go to ``skipped``. Only plain LoRA (``network.type`` lora) and kohya's names.
    ``pieces`` as for :func:`kohya_state_dict`; ``label`` the family the messages name."""
    if network.type != "lora":
        raise LoraFormatError(f"{label} LoRAs are plain LoRA here: set network.type to lora (not {network.type}) to "
                              "continue from a file")
    sd, _meta = read_lora_file(path)
    if sd and all(k.startswith(("transformer.", "text_encoder.")) for k in sd):
        raise LoraFormatError(f"{Path(path).name} is a diffusers-format {label} LoRA; continue from a kohya-format file "
                              "(lora_unet_double_blocks_… names, as this app, sd-scripts and ComfyUI write)")
    return load_kohya_lora(sd, denoiser, text_encoders, strict=False, skipped=skipped, pieces=pieces)


# --------------------------------------------------------------------------- metadata


def metadata(config: TrainingConfig, settings: flow_matching.FlowSettings, *, dev: bool, apply_t5_attn_mask: bool) -> dict[str, str]:
    """Flux's part of the file's metadata, under sd-scripts' names (``train_network.py`` and
    ``FluxNetworkTrainer.update_metadata``; every value through ``str()`` as sd-scripts does)."""
    values: dict[str, Any] = {
        "ss_base_model_version": "flux1",
        "ss_model_type": "flux",
        "ss_network_module": "networks.lora_flux",
        "modelspec.architecture": f"flux-1-{'dev' if dev else 'schnell'}/lora",
        "modelspec.implementation": IMPLEMENTATION,
        "ss_timestep_sampling": settings.timestep_sampling,
        "ss_discrete_flow_shift": settings.shift,
        "ss_sigmoid_scale": settings.sigmoid_scale,
        "ss_logit_mean": settings.logit_mean,
        "ss_logit_std": settings.logit_std,
        "ss_model_prediction_type": settings.model_prediction_type,
        "ss_weighting_scheme": settings.weighting_scheme,
        "ss_guidance_scale": float(config.flow.guidance_scale),  # written for schnell too, as sd-scripts does
        "ss_apply_t5_attn_mask": apply_t5_attn_mask,
    }
    return {k: str(v) for k, v in values.items()}
