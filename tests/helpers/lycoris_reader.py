"""An independent reader of kohya / LyCORIS LoRA files, written from the published loader semantics.

It follows ComfyUI's ``comfy/lora.py`` key map and ``comfy/weight_adapter`` (lora, loha, lokr,
``weight_decompose`` for ``dora_scale``) and A1111's built-in Lora extension, NOT guitrainer's writer:

* module names: ``lora_unet_`` + the diffusers UNet path with ``.`` as ``_``; ``lora_te_`` (one text encoder)
  or ``lora_te1_`` / ``lora_te2_`` + the CLIP path ``text_model.encoder...`` with ``.`` as ``_``;
* LoRA: diff = up.flatten(1) @ down.flatten(1), scale alpha / down.shape[0] (1 without alpha);
* LoHa: diff = (w1_a @ w1_b) * (w2_a @ w2_b), scale alpha / w1_b.shape[0];
* LoKr: w1 = lokr_w1 or w1_a @ w1_b, w2 likewise; diff = kron(w1, w2) (w1 unsqueezed for 4-d w2);
  scale alpha / (inner size of the last split factor), 1 when no factor is split;
* DoRA (``dora_scale`` beside any of them): W' = (W + scale * diff) * dora_scale / ||W + scale * diff|| per input
  column (dora_scale [1, in, ...]).
Everything is computed in fp32 from the file's tensors, as the clients' ``intermediate_dtype`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def key_map(unet: nn.Module, text_encoders: Sequence[nn.Module]) -> dict[str, nn.Module]:
    """kohya module name -> the Linear / Conv2d it patches (every weight of the models, as ComfyUI maps them)."""
    out: dict[str, nn.Module] = {}
    groups = [("lora_unet_", unet, False)]
    prefixes = ["lora_te_"] if len(text_encoders) == 1 else ["lora_te1_", "lora_te2_"]
    groups += [(p, te, True) for p, te in zip(prefixes, text_encoders)]
    for prefix, model, clip in groups:
        for path, module in model.named_modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                full = path if not clip or path.startswith("text_model.") else "text_model." + path
                out[prefix + full.replace(".", "_")] = module
    return out


def _f(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def _diff(parts: dict[str, torch.Tensor], shape: torch.Size) -> tuple[torch.Tensor, float]:
    """The un-scaled weight difference of one module and the scale alpha implies."""
    alpha = float(parts["alpha"]) if "alpha" in parts else None
    if "lora_up.weight" in parts:
        down, up = _f(parts["lora_down.weight"]), _f(parts["lora_up.weight"])
        diff = (up.flatten(1) @ down.flatten(1)).reshape(shape)
        return diff, (alpha / down.shape[0] if alpha is not None else 1.0)
    if "hada_w1_a" in parts:
        w1 = _f(parts["hada_w1_a"]) @ _f(parts["hada_w1_b"])
        w2 = _f(parts["hada_w2_a"]) @ _f(parts["hada_w2_b"])
        return (w1 * w2).reshape(shape), (alpha / parts["hada_w1_b"].shape[0] if alpha is not None else 1.0)
    dim = None
    if "lokr_w1" in parts:
        w1 = _f(parts["lokr_w1"])
    else:
        dim = parts["lokr_w1_b"].shape[0]
        w1 = _f(parts["lokr_w1_a"]) @ _f(parts["lokr_w1_b"])
    if "lokr_w2" in parts:
        w2 = _f(parts["lokr_w2"])
    else:
        dim = parts["lokr_w2_b"].shape[0]
        w2 = _f(parts["lokr_w2_a"]) @ _f(parts["lokr_w2_b"])
    if w2.dim() == 4:
        w1 = w1[:, :, None, None]
    scale = alpha / dim if alpha is not None and dim is not None else 1.0
    return torch.kron(w1, w2).reshape(shape), scale


def merged_weights(
    state_dict: dict[str, torch.Tensor], unet: nn.Module, text_encoders: Sequence[nn.Module]
) -> tuple[dict[nn.Module, torch.Tensor], set[str]]:
    """Each patched layer's merged fp32 weight, and the file keys that were consumed."""
    targets = key_map(unet, text_encoders)
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        module, _, part = key.partition(".")
        grouped.setdefault(module, {})[part] = value
    merged: dict[nn.Module, torch.Tensor] = {}
    consumed: set[str] = set()
    for module, parts in grouped.items():
        if module not in targets:
            continue
        weight = _f(targets[module].weight.detach())
        diff, scale = _diff(parts, weight.shape)
        calc = weight + scale * diff
        if "dora_scale" in parts:
            norm = calc.transpose(0, 1).reshape(calc.shape[1], -1).norm(dim=1, keepdim=True)
            norm = norm.reshape(calc.shape[1], *[1] * (calc.dim() - 1)).transpose(0, 1)
            calc = calc * (_f(parts["dora_scale"]) / norm)
        merged[targets[module]] = calc
        known = {"lora_up.weight", "lora_down.weight", "alpha", "dora_scale", "hada_w1_a", "hada_w1_b", "hada_w2_a",
                 "hada_w2_b", "lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b"}
        consumed |= {f"{module}.{p}" for p in parts if p in known}
    return merged, consumed
