"""LoCon, LoHa, LoKr and DoRA tensors under the keys kohya / LyCORIS write and ComfyUI, A1111/Forge read.

Per module ``<prefix>_<path with . as _>``, the same names as plain LoRA (:func:`guitrainer.engine.network.lora.kohya_module_name`;
SDXL's UNet in the original layout, :mod:`guitrainer.engine.network.kohya_names`):

* LoRA / LoCon: ``lora_down.weight`` [r, in] or [r, in, kh, kw], ``lora_up.weight`` [out, r] or [out, r, 1, 1], ``alpha``;
  a client adds ``alpha / r * up @ down``.
* DoRA: the same plus ``dora_scale``, on the axis ``network.dora_layout`` chose: [1, in] ([1, in, 1, 1] for
  convs) for "column", where ComfyUI and A1111/Forge set ``W' = (W + alpha / r * up @ down) * dora_scale / ||.||_column``;
  [out, 1] ([out, 1, 1, 1]) for "row", where LyCORIS sets ``W' = V * dora_scale / ||V||_row`` (V = W + alpha / r *
  up @ down). ``ss_network_args`` says which (``wd_on_output``, LyCORIS' name).
* LoHa: ``hada_w1_a`` [out, r], ``hada_w1_b`` [r, in*kh*kw], ``hada_w2_a``, ``hada_w2_b``, ``alpha``;
  delta = ``alpha / r * (w1_a @ w1_b) * (w2_a @ w2_b)`` reshaped to W.
* LoKr: ``lokr_w1`` (or ``lokr_w1_a`` / ``lokr_w1_b``), ``lokr_w2`` (or ``lokr_w2_a`` / ``lokr_w2_b``), ``alpha``;
  delta = ``scale * kron(w1, w2)`` where the clients take scale = alpha / r only when a factor is split
  (r = the split's inner size) and 1 otherwise; then alpha / r is folded into ``lokr_w1`` here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import torch
from torch import nn

from guitrainer.engine.network import variants
from guitrainer.engine.network.kohya_names import UnetNames
from guitrainer.engine.network.lora import LoraFormatError, kohya_module_name, kohya_targets, te_prefixes

ADAPTER = variants.ADAPTER
#: how a message names each DoRA layout's axis
_AXIS_WORDS = {"column": "input channel (dora_layout column)", "row": "output channel (dora_layout row)"}
#: kohya's ss_network_module per type (locon is kohya's own networks.lora with conv_dim)
NETWORK_MODULES = {"lora": "networks.lora", "locon": "networks.lora", "loha": "lycoris.kohya",
                   "lokr": "lycoris.kohya", "dora": "lycoris.kohya"}


def _t(p: torch.Tensor) -> torch.Tensor:
    return p.detach().cpu().contiguous()


def _lora_tensors(layer: nn.Module) -> dict[str, torch.Tensor]:
    down = _t(layer.lora_A[ADAPTER].weight)
    out = {
        "lora_down.weight": down,
        "lora_up.weight": _t(layer.lora_B[ADAPTER].weight),
        "alpha": torch.tensor(float(layer.lora_alpha[ADAPTER]), dtype=down.dtype),
    }
    if hasattr(layer, variants.DORA_PARAM):
        magnitude = _t(getattr(layer, variants.DORA_PARAM))
        out["dora_scale"] = magnitude.reshape(dora_scale_shape(layer.get_base_layer().weight.shape, variants.dora_layout(layer)))
    return out


def dora_scale_shape(weight_shape: Sequence[int], layout: str) -> tuple[int, ...]:
    """The file's ``dora_scale`` shape for a weight of ``weight_shape``: [1, in, 1...] (column) or [out, 1, 1...] (row)."""
    ones = [1] * (len(weight_shape) - 2)
    return (int(weight_shape[0]), 1, *ones) if layout == "row" else (1, int(weight_shape[1]), *ones)


def file_dora_layout(scale: torch.Tensor, weight_shape: Sequence[int]) -> str:
    """"column" or "row" for a file's ``dora_scale`` beside a weight of ``weight_shape`` ("" when it is neither)."""
    shape = tuple(scale.shape)
    if shape == dora_scale_shape(weight_shape, "column") or shape == (int(weight_shape[1]),) and weight_shape[0] != weight_shape[1]:
        return "column"
    if shape == dora_scale_shape(weight_shape, "row") or shape == (int(weight_shape[0]),):
        return "row"
    return ""


def _loha_tensors(layer: nn.Module) -> dict[str, torch.Tensor]:
    out = {name: _t(getattr(layer, name)[ADAPTER]) for name in ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")}
    out["alpha"] = torch.tensor(float(layer.alpha[ADAPTER]), dtype=out["hada_w1_a"].dtype)
    return out


def _lokr_tensors(layer: nn.Module) -> dict[str, torch.Tensor]:
    names = ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b")
    out = {name: _t(getattr(layer, name)[ADAPTER]) for name in names if ADAPTER in getattr(layer, name)}
    if ADAPTER in layer.lokr_t2:
        raise ValueError("LoKr with a Tucker core (lokr_t2) is not written; train without use_effective_conv2d")
    scale = float(layer.scaling[ADAPTER])
    split = "lokr_w1_b" in out or "lokr_w2_b" in out
    if split:
        # the clients divide alpha by the inner size of the split factor (w2_b's, else w1_b's); make it give our scale
        inner = (out.get("lokr_w2_b") if "lokr_w2_b" in out else out["lokr_w1_b"]).shape[0]
        alpha = scale * inner
    else:
        # both factors full: the clients apply scale 1, so the scale goes into w1
        out["lokr_w1"] = (out["lokr_w1"].float() * scale).to(out["lokr_w1"].dtype)
        alpha = 1.0
    dtype = next(iter(out.values())).dtype
    out["alpha"] = torch.tensor(float(alpha), dtype=dtype)
    return out


def layer_tensors(layer: nn.Module) -> dict[str, torch.Tensor]:
    """One adapter layer's tensors under their kohya/LyCORIS suffixes."""
    kind = variants.layer_kind(layer)
    if kind == "loha":
        return _loha_tensors(layer)
    if kind == "lokr":
        return _lokr_tensors(layer)
    return _lora_tensors(layer)


def variant_state_dict(unet: nn.Module, text_encoders: Sequence[nn.Module] = ()) -> dict[str, torch.Tensor]:
    """The kohya/LyCORIS state dict (CPU, params' dtype) of every adapter layer of ``unet`` and ``text_encoders``."""
    out: dict[str, torch.Tensor] = {}
    groups: list[tuple[str, nn.Module]] = [("lora_unet", unet)]
    if any(variants.adapter_layers(te) for te in text_encoders):
        groups += list(zip(te_prefixes(len(text_encoders)), text_encoders))
    unet_names = UnetNames(unet)
    for prefix, model in groups:
        for path, layer in variants.adapter_layers(model).items():
            module = unet_names.name(path) if model is unet else kohya_module_name(prefix, path)
            out.update({f"{module}.{suffix}": t for suffix, t in layer_tensors(layer).items()})
    return out


def network_metadata(unet: nn.Module, text_encoders: Sequence[nn.Module] = ()) -> dict[str, str]:
    """``ss_network_module`` / ``ss_network_args`` / dims as kohya_ss writes them for this network's type."""
    kind = variants.network_kind([unet, *text_encoders])
    linear: dict[str, float] = {}
    conv: dict[str, float] = {}
    for model in (unet, *text_encoders):
        for layer in variants.adapter_layers(model).values():
            alpha = layer.lora_alpha[ADAPTER] if hasattr(layer, "lora_alpha") else layer.alpha[ADAPTER]
            target = conv if variants.is_conv_kernel(layer.get_base_layer()) else linear
            target.setdefault("dim", int(layer.r[ADAPTER]))
            target.setdefault("alpha", float(alpha))
    args: dict[str, str] = {}
    if kind != "locon":
        args["algo"] = {"dora": "lora"}.get(kind, kind)
    if conv:
        args["conv_dim"] = str(int(conv["dim"]))
        args["conv_alpha"] = f"{conv['alpha']:g}"
    args.update(_lycoris_args(kind, [unet, *text_encoders]))
    meta = {"ss_network_module": NETWORK_MODULES[kind], "ss_network_args": json.dumps(args)}
    if linear:
        meta["ss_network_dim"] = str(int(linear["dim"]))
        meta["ss_network_alpha"] = f"{linear['alpha']:g}"
    return meta


def _lycoris_args(kind: str, models: Sequence[nn.Module]) -> dict[str, str]:
    """The LyCORIS network_args (sd-scripts' ``--network_args``, strings as typed there) that differ from LyCORIS'
    defaults and change what the file holds or how it was trained: LoKr's ``factor`` (-1 by default), DoRA's
    ``dora_wd`` and ``wd_on_output`` (LyCORIS' default True: the row layout), LoHa / LoKr's ``rank_dropout`` and
    ``module_dropout`` (0 by default). Read off the layers, so a file says what it is whatever the config said."""
    layers = [layer for model in models for layer in variants.adapter_layers(model).values()]
    if not layers:
        return {}
    first = layers[0]
    args: dict[str, str] = {}
    if kind == "lokr":
        factor = int(getattr(first, variants.LOKR_FACTOR_ATTR, -1))
        if factor != -1:
            args["factor"] = str(factor)
    if kind == "dora":
        args["dora_wd"] = "True"
        args["wd_on_output"] = str(variants.dora_layout(first) == "row")
    if kind in ("loha", "lokr"):
        for name in ("rank_dropout", "module_dropout"):
            value = float(getattr(first, name, {}).get(ADAPTER, 0.0))
            if value:
                args[name] = f"{value:g}"
    return args


def has_variant(unet: nn.Module, text_encoders: Sequence[nn.Module] = ()) -> bool:
    """True when the models hold anything but plain linear LoRA (then :func:`variant_state_dict` writes the file)."""
    return variants.network_kind([unet, *text_encoders]) != "lora"


# --------------------------------------------------------------------------- reading back (continue from a file)

_FACTORS = {
    "loha": ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"),
    "lokr": ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b"),
}


def _file_kind(parts: dict[str, torch.Tensor]) -> str:
    if "hada_w1_a" in parts:
        return "loha"
    if any(p.startswith("lokr_") for p in parts):
        return "lokr"
    return "dora" if "dora_scale" in parts else "lora"


def _file_scale(kind: str, parts: dict[str, torch.Tensor]) -> float:
    """The scale the clients apply to a module's product (the same rules the writer targets)."""
    alpha = float(parts["alpha"]) if "alpha" in parts else None
    if kind == "loha":
        return alpha / parts["hada_w1_b"].shape[0] if alpha is not None else 1.0
    if kind == "lokr":
        split = parts.get("lokr_w2_b", parts.get("lokr_w1_b"))
        return alpha / split.shape[0] if alpha is not None and split is not None else 1.0
    return alpha / parts["lora_down.weight"].shape[0] if alpha is not None else 1.0


def _copy(param: torch.Tensor, value: torch.Tensor, module: str, what: str) -> None:
    if tuple(value.shape) != tuple(param.shape):
        raise LoraFormatError(
            f"{module}.{what}: the file's shape {tuple(value.shape)} differs from this network's {tuple(param.shape)}; "
            "use the file's network.rank, conv_rank and lokr_factor to continue from it"
        )
    param.copy_(value.to(param.dtype))


def _load_module(layer: nn.Module, module: str, parts: dict[str, torch.Tensor]) -> None:
    """Set one adapter layer from a file's tensors so the layer's weight is the file's (the scale is re-expressed)."""
    ours, theirs = variants.layer_kind(layer), _file_kind(parts)
    compatible = theirs == ours or (ours == "dora" and theirs == "lora")
    read = {"alpha", *_FACTORS.get(ours, ("lora_down.weight", "lora_up.weight")), *(("dora_scale",) if ours == "dora" else ())}
    if compatible and set(parts) - read:
        raise LoraFormatError(
            f"{module} holds {', '.join(sorted(set(parts) - read))}, which a {ours} network here has no place for"
        )
    if not compatible:
        raise LoraFormatError(
            f"{module} is {theirs} in the file but {ours} here: set network.type to {theirs} to continue from it"
        )
    ratio = _file_scale(theirs, parts) / float(layer.scaling[ADAPTER])
    if ours in _FACTORS:
        names = [n for n in _FACTORS[ours] if ADAPTER in getattr(layer, n)]
        if set(names) != {p for p in parts if p in _FACTORS[ours]}:
            raise LoraFormatError(f"{module}: the file's {theirs} factors differ from this network's; "
                                  "use the file's network.rank and lokr_factor")
        for i, name in enumerate(names):  # the first factor carries the scale ratio
            _copy(getattr(layer, name)[ADAPTER], parts[name].float() * (ratio if i == 0 else 1.0), module, name)
        return
    _copy(layer.lora_A[ADAPTER].weight, parts["lora_down.weight"], module, "lora_down.weight")
    _copy(layer.lora_B[ADAPTER].weight, parts["lora_up.weight"].float() * ratio, module, "lora_up.weight")
    if ours == "dora":
        magnitude = getattr(layer, variants.DORA_PARAM)
        layout = variants.dora_layout(layer)
        if "dora_scale" in parts:
            theirs_layout = file_dora_layout(parts["dora_scale"], layer.get_base_layer().weight.shape)
            if theirs_layout and theirs_layout != layout:
                raise LoraFormatError(
                    f"{module}: the file keeps DoRA's magnitude per {_AXIS_WORDS[theirs_layout]}, this network per "
                    f"{_AXIS_WORDS[layout]}: set network.dora_layout to {theirs_layout} to continue from it"
                )
            _copy(magnitude, parts["dora_scale"].flatten(), module, "dora_scale")
        else:  # a plain LoRA: the magnitude that keeps W + dW as it was
            merged = layer.get_base_layer().weight.float() + variants.lora_delta(layer)
            magnitude.copy_(variants.dora_norm(merged, layout))


def load_variant_file(
    state_dict: dict[str, torch.Tensor],
    unet: nn.Module,
    text_encoders: Sequence[nn.Module] = (),
    *,
    skipped: list[str] | None = None,
) -> int:
    """Copy a kohya/LyCORIS file into already injected LoCon/LoHa/LoKr/DoRA layers; returns the modules set.

    A plain LoRA continues a LoCon or DoRA network (the convolutions start fresh; DoRA's magnitude is set so the
    weight is the LoRA's). Modules that match no layer are appended to ``skipped``. Raises
    :class:`LoraFormatError` for another network type or other ranks, naming the setting to change.
    """
    from guitrainer.engine.network.lora import resolve_module

    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        module, _, part = key.partition(".")
        grouped.setdefault(module, {})[part] = value
    targets = kohya_targets(unet, text_encoders, variants.adapter_layers)
    count = 0
    with torch.no_grad():
        for module, parts in sorted(grouped.items()):
            name = resolve_module(module, targets, len(text_encoders))
            if name is None:
                if skipped is not None:
                    skipped.append(module)
                continue
            _load_module(targets[name], module, parts)
            count += 1
    return count


def layer_suffixes(layer: nn.Module) -> list[str]:
    """The key suffixes :func:`layer_tensors` writes for one layer, without touching tensors (works on meta)."""
    kind = variants.layer_kind(layer)
    if kind == "loha":
        return [*_FACTORS["loha"], "alpha"]
    if kind == "lokr":
        return [n for n in _FACTORS["lokr"] if ADAPTER in getattr(layer, n)] + ["alpha"]
    return ["lora_down.weight", "lora_up.weight", "alpha"] + (["dora_scale"] if kind == "dora" else [])


def key_names(unet: nn.Module, text_encoders: Sequence[nn.Module] = ()) -> list[str]:
    """Every key the file of these (injected) models holds, in the writer's order."""
    out: list[str] = []
    groups = [("lora_unet", unet), *zip(te_prefixes(len(text_encoders)), text_encoders)]
    unet_names = UnetNames(unet)
    for prefix, model in groups:
        for path, layer in variants.adapter_layers(model).items():
            module = unet_names.name(path) if model is unet else kohya_module_name(prefix, path)
            out += [f"{module}.{s}" for s in layer_suffixes(layer)]
    return out
