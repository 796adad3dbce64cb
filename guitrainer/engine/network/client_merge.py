"""How the clients merge a kohya / LyCORIS file into a model: the rules ComfyUI's ``weight_adapter`` and A1111/Forge's
built-in Lora extension apply, for the module layouts guitrainer can check.

Per module (fp32, from the file's tensors, as the clients' ``intermediate_dtype``):

* LoRA / LoCon: diff = up.flatten(1) @ down.flatten(1), scale alpha / down.shape[0] (1 without alpha);
* LoHa: diff = (w1_a @ w1_b) * (w2_a @ w2_b), scale alpha / w1_b.shape[0];
* LoKr: w1 = lokr_w1 or w1_a @ w1_b, w2 likewise; diff = kron(w1, w2); scale alpha / (the inner size of the last
  split factor), 1 when no factor is split;
* ``dora_scale`` [1, in, ...] beside any of them: W' = (W + scale * diff) * dora_scale / ||W + scale * diff||
  per input column (LyCORIS ``dora_wd``).

Layouts other trainers write that these rules do not cover (Tucker cores ``hada_t1`` / ``lokr_t2`` /
``lora_mid``, a ``dora_scale`` per output channel, full ``diff`` weights, norm layers) are named by
:func:`unsupported`, not guessed at.
"""

from __future__ import annotations

import torch
from torch import nn

from guitrainer.engine.network import lora

#: which clients read each network type (and what writes it)
CLIENTS = {
    "lora": "ComfyUI, A1111/Forge, kohya sd-scripts and diffusers read it",
    "locon": "ComfyUI, A1111/Forge, kohya sd-scripts (conv_dim) and diffusers read it",
    "loha": "ComfyUI and A1111/Forge read it (built-in LyCORIS support); kohya sd-scripts through LyCORIS; diffusers cannot",
    "lokr": "ComfyUI and A1111/Forge read it (built-in LyCORIS support); kohya sd-scripts through LyCORIS; diffusers cannot",
    "dora": "ComfyUI and A1111/Forge read it (dora_scale per input channel); kohya sd-scripts through LyCORIS; "
    "diffusers loads it but applies the magnitude per output channel, so it does not look as trained there",
}


#: the parts of each layout the rules read (``alpha`` and ``dora_scale`` may join any)
LAYOUTS: dict[str, tuple[frozenset[str], ...]] = {
    "lora": (frozenset({"lora_down.weight", "lora_up.weight"}),),
    "loha": (frozenset({"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"}),),
    "lokr": tuple(
        frozenset({*w1, *w2})
        for w1 in (("lokr_w1",), ("lokr_w1_a", "lokr_w1_b"))
        for w2 in (("lokr_w2",), ("lokr_w2_a", "lokr_w2_b"))
    ),
}
#: what a part that is not read means, for the message
_NAMED = {"hada_t1": "a Tucker core (LoHa use_tucker)", "hada_t2": "a Tucker core (LoHa use_tucker)",
          "lokr_t2": "a Tucker core (LoKr use_tucker)", "lora_mid.weight": "a Tucker core (LoCon use_tucker)",
          "diff": "a full weight difference (LyCORIS full)", "w_norm": "norm-layer weights", "b_norm": "norm-layer weights"}


def file_kind(sd: dict[str, torch.Tensor]) -> str:
    """The network type of a kohya/LyCORIS state dict."""
    if any(".hada_" in k for k in sd):
        return "loha"
    if any(".lokr_" in k for k in sd):
        return "lokr"
    if any(k.endswith(".dora_scale") for k in sd):
        return "dora"
    convs = any(k.endswith("lora_down.weight") and v.dim() == 4 and v.shape[-1] > 1 for k, v in sd.items())
    return "locon" if convs else "lora"


def grouped(sd: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """``{module: {part: tensor}}`` of a state dict (``lora_unet_x.lora_down.weight`` -> x, ``lora_down.weight``)."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in sd.items():
        module, _, part = key.partition(".")
        out.setdefault(module, {})[part] = value
    return out


def unsupported(parts: dict[str, torch.Tensor], weight: torch.Tensor) -> str:
    """Why the rules here cannot merge this module ("" when they can)."""
    core = set(parts) - {"alpha", "dora_scale"}
    if not any(core == set(layout) for layouts in LAYOUTS.values() for layout in layouts):
        odd = sorted(core - {p for layouts in LAYOUTS.values() for layout in layouts for p in layout})
        what = next((_NAMED[p] for p in odd if p in _NAMED), None)
        return what or f"an unknown layout ({', '.join(sorted(core))})"
    scale = parts.get("dora_scale")
    if scale is not None and (scale.dim() < 2 or scale.shape[0] != 1 or scale.shape[1] != weight.shape[1]):
        return "a dora_scale per output channel (LyCORIS wd_on_out)"
    return ""


def module_weight(parts: dict[str, torch.Tensor], weight: torch.Tensor) -> torch.Tensor:
    """The merged weight of one module (fp32), by the clients' rules (check :func:`unsupported` first)."""
    f = {k: v.float() for k, v in parts.items()}
    alpha = float(f["alpha"]) if "alpha" in f else None
    if "lora_up.weight" in f:
        down, up = f["lora_down.weight"], f["lora_up.weight"]
        diff, scale = (up.flatten(1) @ down.flatten(1)).reshape(weight.shape), (alpha / down.shape[0] if alpha else 1.0)
    elif "hada_w1_a" in f:
        diff = ((f["hada_w1_a"] @ f["hada_w1_b"]) * (f["hada_w2_a"] @ f["hada_w2_b"])).reshape(weight.shape)
        scale = alpha / f["hada_w1_b"].shape[0] if alpha else 1.0
    else:
        dim = None
        w1 = f["lokr_w1"] if "lokr_w1" in f else f["lokr_w1_a"] @ f["lokr_w1_b"]
        dim = f["lokr_w1_b"].shape[0] if "lokr_w1" not in f else dim
        w2 = f["lokr_w2"] if "lokr_w2" in f else f["lokr_w2_a"] @ f["lokr_w2_b"]
        dim = f["lokr_w2_b"].shape[0] if "lokr_w2" not in f else dim
        w1 = w1[:, :, None, None] if w2.dim() == 4 else w1
        diff, scale = torch.kron(w1, w2).reshape(weight.shape), (alpha / dim if alpha and dim else 1.0)
    merged = weight + scale * diff
    if "dora_scale" in f:
        norm = merged.transpose(0, 1).reshape(merged.shape[1], -1).norm(dim=1)
        merged = merged * (f["dora_scale"].flatten() / norm).view(1, -1, *[1] * (merged.dim() - 2))
    return merged


def weight_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Module path -> every Linear / Conv2d of ``model`` (what a file's module may patch)."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Conv2d)}


def merge_file(
    sd: dict[str, torch.Tensor], unet: nn.Module, text_encoders: list[nn.Module]
) -> tuple[int, list[str], dict[str, str]]:
    """Merge a kohya/LyCORIS state dict into the models' weights in place.

    Returns (modules merged, keys that match no layer, ``{module: why not merged}`` for layouts these rules do not
    cover); those modules are left out.
    """
    targets = lora.kohya_targets(unet, text_encoders, weight_layers)
    unread: list[str] = []
    skipped: dict[str, str] = {}
    merged = 0
    with torch.no_grad():
        for module, parts in grouped(sd).items():
            name = lora.resolve_module(module, targets, len(text_encoders))
            if name is None:
                unread += [f"{module}.{p}" for p in parts]
                continue
            layer = targets[name]
            why = unsupported(parts, layer.weight)
            if why:
                skipped[module] = why
                continue
            layer.weight.copy_(module_weight(parts, layer.weight.float()).to(layer.weight.dtype))
            merged += 1
    return merged, sorted(unread), skipped
