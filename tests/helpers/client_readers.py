"""Test-only readers of LoHa / LoKr / DoRA files, one per client, each written from that client's own code (not from
guitrainer's :mod:`guitrainer.engine.network.client_merge`), where the clients differ from each other:

* ComfyUI ``comfy/weight_adapter/base.py`` ``weight_decompose`` (Forge copies it): everything in fp32 from the
  file's tensors; ``wd_on_output_axis = dora_scale.shape[0] == weight.shape[0]``; on that axis the norm is the
  ORIGINAL weight's rows (``weight.reshape(weight.shape[0], -1).norm(dim=1)``), else the merged weight's columns;
  ``+ finfo(weight.dtype).eps`` on the norm.
* A1111 ``network_hada.py`` / ``network_lokr.py``: the factors ``.to(orig_weight.device)`` only, so the products
  are in the file's dtype; ``finalize_updown`` multiplies by ``calc_scale()`` in it; ``apply_weight_decompose``
  casts the weight to that dtype and divides ``dora_scale`` (whatever its shape) by the merged weight's column
  norms; ``networks.py`` stores ``(weight.to(updown.dtype) + updown).to(weight.dtype)``.
* LyCORIS ``modules/locon.py`` built by ``make_module_from_state_dict`` (``wd_on_out`` left at True):
  ``functional/general.py`` ``_weight_decompose`` with the merged weight's row norms ``+ finfo.eps``.

The module names and factor products are :mod:`helpers.lycoris_reader`'s (ComfyUI's key map).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from helpers.lycoris_reader import key_map


def _product(parts: dict[str, torch.Tensor], shape: torch.Size) -> tuple[torch.Tensor, float]:
    """The un-scaled difference in the dtype of ``parts``' tensors, and alpha / rank (1 without)."""
    alpha = float(parts["alpha"]) if "alpha" in parts else None
    if "lora_up.weight" in parts:
        up, down = parts["lora_up.weight"], parts["lora_down.weight"]
        return (up.reshape(up.shape[0], -1) @ down.reshape(down.shape[0], -1)).reshape(shape), (
            alpha / down.shape[0] if alpha is not None else 1.0)
    if "hada_w1_a" in parts:
        one = parts["hada_w1_a"] @ parts["hada_w1_b"]
        two = parts["hada_w2_a"] @ parts["hada_w2_b"]
        return (one * two).reshape(shape), (alpha / parts["hada_w1_b"].shape[0] if alpha is not None else 1.0)
    rank = None
    w1 = parts.get("lokr_w1")
    if w1 is None:
        w1, rank = parts["lokr_w1_a"] @ parts["lokr_w1_b"], parts["lokr_w1_b"].shape[0]
    w2 = parts.get("lokr_w2")
    if w2 is None:
        w2, rank = parts["lokr_w2_a"] @ parts["lokr_w2_b"], parts["lokr_w2_b"].shape[0]
    if w2.dim() == 4:
        w1 = w1.unsqueeze(2).unsqueeze(2)
    return torch.kron(w1, w2.contiguous()).reshape(shape), (alpha / rank if alpha is not None and rank else 1.0)


def comfyui_weight(parts: dict[str, torch.Tensor], weight: torch.Tensor) -> torch.Tensor:
    """ComfyUI's merged weight (fp32 intermediate), stored in ``weight``'s dtype."""
    f = {k: v.float() for k, v in parts.items()}
    w = weight.float()
    diff, scale = _product(f, w.shape)
    calc = w + diff * scale
    if "dora_scale" in f:
        m = f["dora_scale"]
        if m.shape[0] == calc.shape[0]:
            norm = w.reshape(w.shape[0], -1).norm(dim=1, keepdim=True).reshape(w.shape[0], *[1] * (w.dim() - 1))
        else:
            norm = calc.transpose(0, 1).reshape(calc.shape[1], -1).norm(dim=1, keepdim=True)
            norm = norm.reshape(calc.shape[1], *[1] * (calc.dim() - 1)).transpose(0, 1)
        calc = calc * (m / (norm + torch.finfo(weight.dtype).eps))
    return calc.to(weight.dtype)


def a1111_weight(parts: dict[str, torch.Tensor], weight: torch.Tensor) -> torch.Tensor:
    """A1111's merged weight: LoHa / LoKr in the file's dtype, LoRA in the model's; stored in ``weight``'s dtype."""
    variant = "hada_w1_a" in parts or any(k.startswith("lokr_") for k in parts)
    dtype = next(v.dtype for k, v in parts.items() if k != "alpha") if variant else weight.dtype
    f = {k: v.to(dtype) for k, v in parts.items()}
    updown, scale = _product(f, weight.shape)
    updown = updown * scale
    if "dora_scale" in f:
        orig = weight.to(updown.dtype)
        merged = updown + orig
        norm = merged.transpose(0, 1).reshape(merged.shape[1], -1).norm(dim=1, keepdim=True)
        norm = norm.reshape(merged.shape[1], *[1] * (merged.dim() - 1)).transpose(0, 1)
        updown = merged * (f["dora_scale"] / norm) - orig
    return (weight.to(updown.dtype) + updown).to(weight.dtype)


def lycoris_weight(parts: dict[str, torch.Tensor], weight: torch.Tensor) -> torch.Tensor:
    """LyCORIS' merged weight of a module its loader built (DoRA per output row), fp32."""
    f = {k: v.float() for k, v in parts.items()}
    w = weight.float()
    diff, scale = _product(f, w.shape)
    merged = w + diff * scale
    if "dora_scale" in f:
        norm = merged.reshape(merged.shape[0], -1).norm(dim=1).reshape(merged.shape[0], *[1] * (merged.dim() - 1))
        merged = merged * (f["dora_scale"] / (norm + torch.finfo(merged.dtype).eps))
    return merged


READERS = {"comfyui": comfyui_weight, "a1111": a1111_weight, "lycoris": lycoris_weight}


def merged_weights(
    state_dict: dict[str, torch.Tensor], unet: nn.Module, text_encoders: Sequence[nn.Module], reader: str
) -> dict[nn.Module, torch.Tensor]:
    """Each patched layer's merged weight (fp32) by ``reader``'s rules."""
    targets = key_map(unet, text_encoders)
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        module, _, part = key.partition(".")
        grouped.setdefault(module, {})[part] = value
    return {targets[m]: READERS[reader](parts, targets[m].weight.detach()).float()
            for m, parts in grouped.items() if m in targets}
