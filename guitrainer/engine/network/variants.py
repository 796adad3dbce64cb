"""Network variants beyond plain LoRA: LoCon, LoHa, LoKr (peft layers) and DoRA (peft LoRA + a magnitude).

Why peft and not the lycoris-lora package: peft is already the engine's adapter library (injection, dropout,
fp32 master weights, resume by ``named_parameters``), its LoHa/LoKr layers hold exactly the factors LyCORIS
writes (``hada_w1_a`` [out, r], ``hada_w1_b`` [r, in*kh*kw]; ``lokr_w1``, ``lokr_w2`` / ``lokr_w2_a``,
``lokr_w2_b``) with the same scale alpha / rank, so the file is a renaming (:mod:`guitrainer.engine.network.lycoris_keys`).

DoRA keeps a magnitude per channel on one of two axes (``network.dora_layout``), because the readers disagree
on which one a file holds (README, "Which program reads which file"):

* "column" (the default): ``dora_scale`` [1, in], each input column of V = W + scale * up @ down normalised, the
  weight ComfyUI, A1111 and Forge merge (LyCORIS ``dora_wd`` with ``wd_on_output=False``). The layer's input is
  scaled per channel by ``magnitude / ||V||_column``, so it computes ``V * dora_scale / ||V||_column`` exactly.
* "row": ``dora_scale`` [out, 1], each output row of V normalised, as peft's ``use_dora`` and LyCORIS' default
  ``wd_on_output=True`` do. The layer's output without its bias is scaled per channel by
  ``magnitude / ||V||_row``: ``(V x) * s + b = (diag(s) V) x + b``, the weight LyCORIS merges.

Either way the norm is detached, as the DoRA paper suggests, and the magnitude starts at the base weight's
norms, so the layer starts as the base layer. Not peft's ``use_dora`` for rows: one implementation for both axes
keeps one parameter name (:data:`DORA_PARAM`), one resume and one export.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from guitrainer.core.model.lora_format import text_encoder_targets, unet_targets

ADAPTER = "default"
#: the DoRA magnitude's parameter name on a peft LoRA layer ("lora_" so lora_parameters() and resume see it)
DORA_PARAM = "lora_dora_scale"
#: the attribute a DoRA layer keeps its layout in ("column" or "row", ``network.dora_layout``)
DORA_LAYOUT_ATTR = "dora_layout"
DORA_LAYOUTS = ("column", "row")
#: the attribute a LoKr layer keeps the factor it was split with in (-1: the most balanced split)
LOKR_FACTOR_ATTR = "lokr_factor"
#: parameter-name markers of every variant's trainable tensors
TRAINABLE_MARKERS = ("lora_", "hada_", "lokr_")


def is_conv_kernel(module: nn.Module) -> bool:
    """A convolution whose kernel is bigger than 1x1 (kohya gives these conv_dim / conv_alpha)."""
    return isinstance(module, nn.Conv2d) and tuple(module.kernel_size) != (1, 1)


def target_paths(model: nn.Module, suffixes: Sequence[str]) -> dict[str, nn.Module]:
    """Module path -> Linear/Conv2d of ``model`` whose path is, or ends with ``.``, one of ``suffixes`` (peft's rule)."""
    out: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Linear, nn.Conv2d)) or "lora_" in name:
            continue
        if any(name == s or name.endswith(f".{s}") for s in suffixes):
            out[name] = module
    return out


def _peft_config(network: Any, paths: dict[str, nn.Module]) -> Any:
    """The peft config of ``network.type`` for exactly ``paths``: rank / alpha, conv rank / alpha on kxk convs."""
    from peft import LoHaConfig, LoKrConfig, LoraConfig

    convs = [n for n, m in paths.items() if is_conv_kernel(m)]
    rank_pattern = {re.escape(n): int(network.conv_rank) for n in convs}
    alpha_pattern = {re.escape(n): float(network.conv_alpha) for n in convs}
    common: dict[str, Any] = dict(
        r=int(network.rank), target_modules=sorted(paths), rank_pattern=rank_pattern, alpha_pattern=alpha_pattern
    )
    kind = network.type
    if kind in ("locon", "dora", "lora"):
        return LoraConfig(lora_alpha=float(network.alpha), lora_dropout=float(network.dropout),
                          init_lora_weights="gaussian", **common)
    drops = dict(rank_dropout=float(network.rank_dropout), module_dropout=float(network.module_dropout))
    if kind == "loha":
        return LoHaConfig(alpha=float(network.alpha), **drops, **common)
    if kind == "lokr":
        return LoKrConfig(alpha=float(network.alpha), decompose_factor=int(network.lokr_factor), **drops, **common)
    raise ValueError(f"`network.type` must be one of lora, locon, loha, lokr, dora; got {kind!r}")


def inject(model: nn.Module, network: Any, suffixes: Sequence[str]) -> int:
    """Add ``network.type``'s adapter to ``model``'s layers named by ``suffixes``; returns how many layers got one."""
    from peft import inject_adapter_in_model

    paths = target_paths(model, suffixes)
    if not paths:
        return 0
    inject_adapter_in_model(_peft_config(network, paths), model, adapter_name=ADAPTER)
    _mark(model, network.type, int(network.lokr_factor), network.dora_layout)
    return len(paths)


def _mark(model: nn.Module, kind: str, lokr_factor: int, dora_layout: str) -> None:
    """What a file must say about the layers just injected: DoRA's axis (and its magnitude), LoKr's factor."""
    for layer in adapter_layers(model).values():
        if kind == "dora":
            add_dora(layer, dora_layout)
        if kind == "lokr":
            setattr(layer, LOKR_FACTOR_ATTR, lokr_factor)


def inject_exact(
    model: nn.Module, kind: str, ranks: dict[str, int], lokr_factor: int = -1, lokr_split_w1: bool = False,
    dora_layout: str = "column",
) -> None:
    """Add ``kind``'s adapter at exactly the module paths of ``ranks``, each with its own rank and alpha = rank
    (DoRA's magnitude on ``dora_layout``'s axis).

    Used to rebuild a network from a file (:func:`guitrainer.engine.verify.variants.rebuild_from_file`): the
    loader then sets each layer's factors and re-expresses the file's scale.
    """
    from peft import LoHaConfig, LoKrConfig, LoraConfig, inject_adapter_in_model

    if not ranks:
        return
    r = max(ranks.values())
    common: dict[str, Any] = dict(
        r=r, target_modules=sorted(ranks), rank_pattern={re.escape(n): v for n, v in ranks.items() if v != r},
        alpha_pattern={re.escape(n): float(v) for n, v in ranks.items() if v != r},
    )
    if kind == "loha":
        config = LoHaConfig(alpha=float(r), **common)
    elif kind == "lokr":
        config = LoKrConfig(alpha=float(r), decompose_factor=lokr_factor, decompose_both=lokr_split_w1, **common)
    else:
        config = LoraConfig(lora_alpha=float(r), init_lora_weights=False, **common)
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    _mark(model, kind, lokr_factor, dora_layout)


def remove_adapters(model: nn.Module) -> None:
    """Put every adapter layer's base layer back in its place (the base weights were never changed)."""
    for path, layer in list(adapter_layers(model).items()):
        parent, _, child = path.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, layer.get_base_layer())
    for attr in ("peft_config", "_hf_peft_config_loaded"):
        if attr in vars(model):
            delattr(model, attr)


def inject_unet(unet: nn.Module, network: Any) -> int:
    return inject(unet, network, unet_targets(network.type, network.target_modules))


def inject_text_encoder(text_encoder: nn.Module, network: Any) -> int:
    return inject(text_encoder, network, text_encoder_targets(network.type))


def adapter_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Module path -> peft tuner layer (LoRA, LoHa or LoKr) holding our adapter."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return {
        name: m for name, m in model.named_modules()
        if isinstance(m, BaseTunerLayer) and ADAPTER in getattr(m, "scaling", {})
    }


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every variant's trainable tensors (LoRA, LoHa, LoKr factors and DoRA magnitudes), in a stable order."""
    return [p for n, p in model.named_parameters() if any(k in n for k in TRAINABLE_MARKERS)]


def layer_kind(layer: nn.Module) -> str:
    """"lora", "dora", "loha" or "lokr" of one peft layer."""
    if hasattr(layer, DORA_PARAM):
        return "dora"
    if hasattr(layer, "hada_w1_a"):
        return "loha"
    if hasattr(layer, "lokr_w1"):
        return "lokr"
    return "lora"


def network_kind(models: Iterable[nn.Module]) -> str:
    """The network type of injected models: "lora" (linear layers only), "locon", "loha", "lokr" or "dora"."""
    kinds: set[str] = set()
    conv = False
    for model in models:
        for layer in adapter_layers(model).values():
            kinds.add(layer_kind(layer))
            conv = conv or is_conv_kernel(layer.get_base_layer())
    for kind in ("dora", "loha", "lokr"):
        if kind in kinds:
            return kind
    return "locon" if conv else "lora"


# --------------------------------------------------------------------------- DoRA


def lora_delta(layer: nn.Module) -> torch.Tensor:
    """scale * up @ down in the base weight's shape (fp32)."""
    down = layer.lora_A[ADAPTER].weight.float()
    up = layer.lora_B[ADAPTER].weight.float()
    base = layer.get_base_layer().weight
    delta = up.flatten(1) @ down.flatten(1)
    return (delta * float(layer.scaling[ADAPTER])).reshape(base.shape)


def column_norm(weight: torch.Tensor) -> torch.Tensor:
    """||W[:, i, ...]|| for each input channel i: shape [in]."""
    return weight.transpose(0, 1).reshape(weight.shape[1], -1).norm(dim=1)


def row_norm(weight: torch.Tensor) -> torch.Tensor:
    """||W[o, ...]|| for each output channel o: shape [out]."""
    return weight.reshape(weight.shape[0], -1).norm(dim=1)


def dora_norm(weight: torch.Tensor, layout: str) -> torch.Tensor:
    """The norms DoRA divides by on ``layout``'s axis ("column": [in], "row": [out])."""
    return row_norm(weight) if layout == "row" else column_norm(weight)


def dora_layout(layer: nn.Module) -> str:
    """"column" or "row": the axis a DoRA layer's magnitude is on."""
    return str(getattr(layer, DORA_LAYOUT_ATTR, "column"))


def _dora_scale(layer: nn.Module) -> torch.Tensor:
    """magnitude / ||W + scale * up @ down|| on the layer's axis, the norm detached (as the DoRA paper suggests)."""
    merged = layer.get_base_layer().weight.float() + lora_delta(layer)
    return getattr(layer, DORA_PARAM) / dora_norm(merged, dora_layout(layer)).detach()


def _per_channel(values: torch.Tensor, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``values`` [channels] shaped to multiply ``x`` along its channel axis (a conv's second, a Linear's last)."""
    if isinstance(layer.get_base_layer(), nn.Conv2d):
        return values.view(1, -1, 1, 1).to(x.dtype)
    return values.to(x.dtype)


def _dora_pre_hook(layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
    """Column layout: scale the layer's input (positional or ``x=``) per input channel by magnitude / column norm."""
    x = args[0] if args else kwargs["x"]
    scaled = x * _per_channel(_dora_scale(layer), layer, x)
    if args:
        return (scaled, *args[1:]), kwargs
    return args, {**kwargs, "x": scaled}


def _dora_post_hook(layer: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], out: torch.Tensor) -> torch.Tensor:
    """Row layout: scale the layer's output less its bias per output channel by magnitude / row norm."""
    scale = _per_channel(_dora_scale(layer), layer, out)
    bias = layer.get_base_layer().bias
    if bias is None:
        return out * scale
    b = _per_channel(bias, layer, out)
    return (out - b) * scale + b


def add_dora(layer: nn.Module, layout: str = "column") -> None:
    """Turn a peft LoRA layer into a DoRA layer on ``layout``'s axis: magnitude = the base weight's norms there
    (no change at start)."""
    if layout not in DORA_LAYOUTS:
        raise ValueError(f"`network.dora_layout` must be one of {', '.join(DORA_LAYOUTS)}; got {layout!r}")
    base = layer.get_base_layer().weight
    magnitude = dora_norm(base.detach().float(), layout).to(base.device)
    layer.register_parameter(DORA_PARAM, nn.Parameter(magnitude))
    setattr(layer, DORA_LAYOUT_ATTR, layout)
    if layout == "row":
        layer.register_forward_hook(_dora_post_hook, with_kwargs=True)
    else:
        layer.register_forward_pre_hook(_dora_pre_hook, with_kwargs=True)


# --------------------------------------------------------------------------- what a layer adds


def effective_delta(layer: nn.Module) -> torch.Tensor:
    """W_effective - W of one adapter layer, fp32, in the base weight's shape: what a client's merge must give."""
    kind = layer_kind(layer)
    with torch.no_grad():
        base = layer.get_base_layer().weight.float()
        if kind == "dora":
            merged = base + lora_delta(layer)
            layout = dora_layout(layer)
            scale = getattr(layer, DORA_PARAM).float() / dora_norm(merged, layout)
            shape = (-1, *[1] * (base.dim() - 1)) if layout == "row" else (1, -1, *[1] * (base.dim() - 2))
            return merged * scale.view(shape) - base
        if kind == "lora":
            return lora_delta(layer)
        return layer.get_delta_weight(ADAPTER).float().reshape(base.shape)
