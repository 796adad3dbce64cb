"""How the clients merge a kohya / LyCORIS file into a model: the rules of ComfyUI's ``weight_adapter`` (which Forge
copies), A1111's built-in Lora extension and LyCORIS' own modules, for the module layouts guitrainer can check.

Per module, ``scale`` = alpha / rank (1 without alpha):

* LoRA / LoCon: diff = up.flatten(1) @ down.flatten(1), rank = down.shape[0];
* LoHa: diff = (w1_a @ w1_b) * (w2_a @ w2_b), rank = w1_b.shape[0];
* LoKr: w1 = lokr_w1 or w1_a @ w1_b, w2 likewise; diff = kron(w1, w2); rank = the inner size of the last split
  factor, and scale 1 when no factor is split;
* ``dora_scale`` beside any of them, V = W + scale * diff:

  - ComfyUI / Forge (``weight_decompose``): [1, in] -> V * dora_scale / ||V||_column; a dora_scale whose first
    size is the weight's output size -> V * dora_scale / ||W||_row, the base weight's row norm, not V's;
  - A1111 (``apply_weight_decompose``): V * dora_scale / ||V||_column, whatever dora_scale's shape (an [out, 1]
    one broadcasts over the columns);
  - LyCORIS (``weight_decompose``, ``wd_on_out`` as its loader builds it: True): V * dora_scale / ||V||_row.

Where the arithmetic happens differs too: ComfyUI computes in fp32 from the file's tensors (its
``intermediate_dtype``); A1111 computes LoHa and LoKr in the file's dtype and adds them to the weight in it
(``weight.to(updown.dtype) + updown``), LoRA in the model's dtype; LyCORIS in fp32 here (its modules'
parameters are fp32). :func:`module_weight` applies one reader's rules, :data:`READERS` names them.

Layouts other trainers write that these rules do not cover (Tucker cores ``hada_t1`` / ``lokr_t2`` /
``lora_mid``, full ``diff`` weights, norm layers) are named by :func:`unsupported`, not guessed at.
"""

from __future__ import annotations

import torch
from torch import nn

from guitrainer.core.memory.network import factorization  # LyCORIS' split, as peft has it
from guitrainer.engine.network import lora

#: the readers whose merge rules :func:`module_weight` applies
READERS = ("comfyui", "a1111", "lycoris")


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
    if scale is not None and scale.numel() not in (weight.shape[0], weight.shape[1]):
        return f"a dora_scale of shape {tuple(scale.shape)}, neither per input nor per output channel"
    return ""


def dora_layout(scale: torch.Tensor, weight: torch.Tensor) -> str:
    """"row" when a dora_scale holds one value per output channel ([out, 1, ...]), else "column" ([1, in, ...])."""
    return "row" if scale.dim() >= 2 and scale.shape[0] == weight.shape[0] and scale.shape[0] != 1 else "column"


def _diff(f: dict[str, torch.Tensor], shape: torch.Size) -> tuple[torch.Tensor, float]:
    """One module's un-scaled weight difference, in the dtype of ``f``'s tensors, and the scale alpha implies."""
    alpha = float(f["alpha"]) if "alpha" in f else None
    if "lora_up.weight" in f:
        down, up = f["lora_down.weight"], f["lora_up.weight"]
        return (up.flatten(1) @ down.flatten(1)).reshape(shape), (alpha / down.shape[0] if alpha else 1.0)
    if "hada_w1_a" in f:
        diff = ((f["hada_w1_a"] @ f["hada_w1_b"]) * (f["hada_w2_a"] @ f["hada_w2_b"])).reshape(shape)
        return diff, (alpha / f["hada_w1_b"].shape[0] if alpha else 1.0)
    dim = None
    w1 = f["lokr_w1"] if "lokr_w1" in f else f["lokr_w1_a"] @ f["lokr_w1_b"]
    dim = f["lokr_w1_b"].shape[0] if "lokr_w1" not in f else dim
    w2 = f["lokr_w2"] if "lokr_w2" in f else f["lokr_w2_a"] @ f["lokr_w2_b"]
    dim = f["lokr_w2_b"].shape[0] if "lokr_w2" not in f else dim
    w1 = w1[:, :, None, None] if w2.dim() == 4 else w1
    return torch.kron(w1, w2).reshape(shape), (alpha / dim if alpha and dim else 1.0)


def _norm(v: torch.Tensor, axis: str) -> torch.Tensor:
    """||v|| per output row ([out, 1, ...]) or per input column ([1, in, ...]), shaped to divide ``v``."""
    if axis == "row":
        return v.reshape(v.shape[0], -1).norm(dim=1).reshape(-1, *[1] * (v.dim() - 1))
    return v.transpose(0, 1).reshape(v.shape[1], -1).norm(dim=1).reshape(1, -1, *[1] * (v.dim() - 2))


def module_weight(parts: dict[str, torch.Tensor], weight: torch.Tensor, reader: str = "comfyui") -> torch.Tensor:
    """The merged weight of one module by ``reader``'s rules (one of :data:`READERS`), returned in fp32.

    ``weight`` is the model's weight (its dtype is the model's). Check :func:`unsupported` first. LyCORIS'
    loader cannot build a column dora_scale at all (:func:`lycoris_problem`): its rule
    here is what its module computes once built.
    """
    base = weight.float()
    low = reader == "a1111" and ("hada_w1_a" in parts or any(k.startswith("lokr_") for k in parts))
    dtype = next(v.dtype for k, v in parts.items() if k != "alpha") if low else torch.float32
    f = {k: v.to(dtype) for k, v in parts.items()}
    diff, scale = _diff(f, weight.shape)
    merged = base.to(dtype) + diff * scale  # A1111: weight.to(updown.dtype) + updown, in the file's dtype
    if "dora_scale" in f:
        magnitude = f["dora_scale"]
        layout = dora_layout(magnitude, weight)
        if reader == "comfyui" and layout == "row":  # ComfyUI normalises by the base weight's rows, not V's
            norm = _norm(base, "row").to(dtype) + torch.finfo(weight.dtype).eps
            merged = merged * (magnitude.reshape(-1, *[1] * (merged.dim() - 1)) / norm)
        elif reader == "lycoris":  # built with wd_on_out=True: V's rows
            merged = merged * (magnitude.reshape(-1, *[1] * (merged.dim() - 1)) / _norm(merged, "row"))
        else:  # V's columns; A1111 divides an [out, 1] dora_scale by [1, in] norms: it broadcasts
            shaped = magnitude if magnitude.dim() == merged.dim() else magnitude.reshape(1, -1, *[1] * (merged.dim() - 2))
            merged = merged * (shaped / _norm(merged, "column"))
    return merged.float()


def weight_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Module path -> every Linear / Conv2d of ``model`` (what a file's module may patch)."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Conv2d)}


def merge_file(
    sd: dict[str, torch.Tensor], unet: nn.Module, text_encoders: list[nn.Module], reader: str = "comfyui"
) -> tuple[int, list[str], dict[str, str]]:
    """Merge a kohya/LyCORIS state dict into the models' weights in place, by ``reader``'s rules.

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
            layer.weight.copy_(module_weight(parts, layer.weight, reader).to(layer.weight.dtype))
            merged += 1
    return merged, sorted(unread), skipped


def _lycoris_lokr_factor(parts: dict[str, torch.Tensor]) -> int:
    """The factor LyCORIS' ``LokrModule.make_module_from_state_dict`` guesses from a module's factor shapes.

    Its rule: the Kronecker product's size is w1's times w2's (w2_b's second size counts a conv kernel in); -1
    when w1's shape is that size's most balanced split, else the larger side of w1 (or of w2) if it divides both
    sizes and is one of each pair's factors, else the smaller of the two."""
    w1 = tuple(parts["lokr_w1"].shape) if "lokr_w1" in parts else (parts["lokr_w1_a"].shape[0], parts["lokr_w1_b"].shape[1])
    w2 = tuple(parts["lokr_w2"].shape[:2]) if "lokr_w2" in parts else (parts["lokr_w2_a"].shape[0], parts["lokr_w2_b"].shape[1])
    out_dim, in_dim = w1[0] * w2[0], w1[1] * w2[1]
    if w1[0] == factorization(out_dim, -1)[0] and w1[1] == factorization(in_dim, -1)[0]:
        return -1
    for f in (max(w1), max(w2)):
        if out_dim % f == 0 and in_dim % f == 0 and f in (w1[0], w2[0]) and f in (w1[1], w2[1]):
            return f
    return min(max(w1), max(w2))


def lycoris_problem(parts: dict[str, torch.Tensor], module: nn.Module) -> str:
    """Why LyCORIS' ``create_network_from_weights`` cannot build this module ("" when it can), from its modules' code.

    A dora_scale per input column: it builds one per output row (``wd_on_out=True``) and the copy fails. LoKr:
    it rebuilds the module with the factor it guesses (:func:`_lycoris_lokr_factor`); where that factor splits
    the layer otherwise than the file, the copy fails.
    """
    scale = parts.get("dora_scale")
    if scale is not None and dora_layout(scale, module.weight) == "column":
        return "it builds dora_scale per output row and cannot copy this per-input-column one"
    if not any(k.startswith("lokr_") for k in parts):
        return ""
    factor = _lycoris_lokr_factor(parts)
    out_dim, in_dim = int(module.weight.shape[0]), int(module.weight.shape[1])
    want = (factorization(out_dim, factor)[0], factorization(in_dim, factor)[0])
    w1 = tuple(parts["lokr_w1"].shape) if "lokr_w1" in parts else (parts["lokr_w1_a"].shape[0], parts["lokr_w1_b"].shape[1])
    if w1 != want:
        return (f"its LoKr factor guess ({factor}, from shapes that count the {module.weight.shape[-1]}x"
                f"{module.weight.shape[-1]} kernel in) splits it as w1 {list(want)}, the file as {list(w1)}")
    return ""


def lycoris_double_scale(parts: dict[str, torch.Tensor]) -> bool:
    """True for a LoHa module whose alpha / rank is not 1: LyCORIS' merge multiplies its product by it twice."""
    if "hada_w1_b" not in parts or "alpha" not in parts:
        return False
    return abs(float(parts["alpha"]) / parts["hada_w1_b"].shape[0] - 1.0) > 1e-6
