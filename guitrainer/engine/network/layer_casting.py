"""fp8 storage of frozen weights: layers cast up to the compute dtype one at a time, in a form training can
backpropagate through (``precision.base_weights = "fp8"``)."""

from __future__ import annotations

from typing import Any

import torch

#: layers whose weights stay in the compute dtype under fp8 storage: norms, embeddings and the LoRA itself
FP8_SKIP_PATTERNS = ("pos_embed", "patch_embed", "norm", "embeddings", "^proj_in$", "^proj_out$", "lora_")


def cast_layerwise(module: torch.nn.Module, storage: torch.dtype, compute: torch.dtype, skip: tuple[str, ...]) -> None:
    """Linear / Conv weights stored in ``storage`` and cast to ``compute`` around each forward (layers matching
    ``skip`` left alone), as diffusers' layerwise casting and kohya's ``--fp8_base`` do.

    The cast copy is put in the layer's ``_parameters`` for its forward and the stored weight put back after it.
    Training needs this form: autograd saves the cast copy for the backward pass, a tensor of its own. diffusers'
    ``apply_layerwise_casting`` instead swaps the dtype of the parameter autograd saved (``Module.to``), so a
    backward through a frozen layer read float8 data ("expected scalar type Half but found Float8_e4m3fn" under
    fp16). It also works on fake tensors, so the memory measurement runs the trainer's own casting.
    """
    for m in cast_layers(module, skip):
        _hook(m, storage, compute)


def cast_layers(module: torch.nn.Module, skip: tuple[str, ...]) -> list[torch.nn.Module]:
    """The layers :func:`cast_layerwise` stores in the storage dtype: the Linear / Conv layers of ``module`` whose
    path (or a parent's) matches none of ``skip``."""
    import re

    layers = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d, torch.nn.Linear)
    found: list[torch.nn.Module] = []

    def visit(m: torch.nn.Module, prefix: str) -> None:
        if any(re.search(p, prefix) for p in skip):
            return
        if isinstance(m, layers):
            found.append(m)
            return
        for name, child in m.named_children():
            visit(child, f"{prefix}.{name}" if prefix else name)

    visit(module, "")
    return found


def stored_parameters(module: torch.nn.Module, skip: tuple[str, ...]) -> int:
    """How many of ``module``'s parameters :func:`cast_layerwise` stores in the storage dtype (weights and biases of
    :func:`cast_layers`); the rest (norms, embeddings, the skipped layers) keep the compute dtype."""
    return sum(p.numel() for m in cast_layers(module, skip) for k in ("weight", "bias")
               if (p := m._parameters.get(k)) is not None)


def _hook(m: torch.nn.Module, storage: torch.dtype, compute: torch.dtype) -> None:
    keys = [k for k in ("weight", "bias") if m._parameters.get(k) is not None]
    for k in keys:
        m._parameters[k] = torch.nn.Parameter(m._parameters[k].detach().to(storage), requires_grad=False)
    stored: dict[str, torch.nn.Parameter] = {}

    def up(mod: torch.nn.Module, _args: Any) -> None:
        for k in keys:
            p = mod._parameters[k]
            # a forward cut short (checkpointing's early stop) left the compute copy: store it again, as
            # diffusers' hook does at this layer's next forward
            stored[k] = p if p.dtype == storage else torch.nn.Parameter(p.detach().to(storage), requires_grad=False)
            mod._parameters[k] = torch.nn.Parameter(stored[k].detach().to(compute), requires_grad=False)

    def down(mod: torch.nn.Module, _args: Any, _out: Any) -> None:
        for k in keys:
            mod._parameters[k] = stored.pop(k)

    m.register_forward_pre_hook(up)
    m.register_forward_hook(down)
