"""Verify LoHa, LoKr and DoRA files, which diffusers cannot read as the clients do.

The file is merged into a copy of the base weights by the rules ComfyUI's ``weight_adapter`` and A1111/Forge's
built-in Lora extension apply (:func:`merge_file`): every key must be consumed, the merge must change the
outputs and stay finite, and the merged model's outputs must match a reference. Given the trained model, that
is the reference; without one (the Output page's Verify) it is the network rebuilt from the file
(:func:`rebuild_from_file`: peft's LoHa / LoKr layers, our DoRA layer, computing in the forward pass as in
training), so a file whose factors or scale the clients read otherwise than training meant fails. For DoRA,
diffusers' reading is reported too (it maps ``dora_scale`` onto peft's per-output magnitude, so it does not
give the clients' result).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.engine import lora, lycoris_keys, variants
from guitrainer.engine.verify import (
    _ATOL,
    _ROUNDING,
    VerifyResult,
    _base,
    _EvalMode,
    _file_dtype,
    _inputs,
    _max_diff,
    _pipeline,
    _te_out,
    _unet_out,
)

#: which clients read each network type (and what writes it)
CLIENTS = {
    "lora": "ComfyUI, A1111/Forge, kohya sd-scripts and diffusers read it",
    "locon": "ComfyUI, A1111/Forge, kohya sd-scripts (conv_dim) and diffusers read it",
    "loha": "ComfyUI and A1111/Forge read it (built-in LyCORIS support); kohya sd-scripts through LyCORIS; diffusers cannot",
    "lokr": "ComfyUI and A1111/Forge read it (built-in LyCORIS support); kohya sd-scripts through LyCORIS; diffusers cannot",
    "dora": "ComfyUI and A1111/Forge read it (dora_scale per input channel); kohya sd-scripts through LyCORIS; "
    "diffusers loads it but applies the magnitude per output channel, so it does not look as trained there",
}


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


def _module_delta(parts: dict[str, torch.Tensor], weight: torch.Tensor) -> torch.Tensor:
    """The merged weight of one module (fp32), by the clients' rules."""
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


def merge_file(sd: dict[str, torch.Tensor], unet: nn.Module, text_encoders: list[nn.Module]) -> tuple[int, list[str]]:
    """Merge a kohya/LyCORIS state dict into the models' weights in place; returns (modules merged, unread keys)."""
    def layers(model: nn.Module) -> dict[str, nn.Module]:
        return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Conv2d)}

    targets = lora.kohya_targets(unet, text_encoders, layers)
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in sd.items():
        module, _, part = key.partition(".")
        grouped.setdefault(module, {})[part] = value
    unread: list[str] = []
    merged = 0
    with torch.no_grad():
        for module, parts in grouped.items():
            name = lora._resolve(module, targets, len(text_encoders))
            if name is None:
                unread += [f"{module}.{p}" for p in parts]
                continue
            layer = targets[name]
            layer.weight.copy_(_module_delta(parts, layer.weight.float()).to(layer.weight.dtype))
            merged += 1
    return merged, sorted(unread)


def _module_rank(parts: dict[str, torch.Tensor]) -> int:
    """The peft rank that gives a module's factors their file shapes."""
    if "lora_down.weight" in parts:
        return int(parts["lora_down.weight"].shape[0])
    if "hada_w1_b" in parts:
        return int(parts["hada_w1_b"].shape[0])
    if "lokr_w2_b" in parts:
        return int(parts["lokr_w2_b"].shape[0])
    w2 = parts["lokr_w2"]
    return max(int(w2.shape[0]), int(w2.shape[1]))  # peft keeps w2 whole from half its larger side on


def _lokr_factor(layers: dict[nn.Module, dict[str, torch.Tensor]]) -> int:
    """The LoKr factor whose split of each layer's dims gives the file's ``lokr_w1`` shapes (-1 if none fits)."""
    from peft.tuners.lokr.layer import factorization

    shapes = {tuple(p["lokr_w1"].shape) for p in layers.values() if "lokr_w1" in p}
    candidates = [-1, *sorted({d for shape in shapes for d in shape})]

    def fits(f: int) -> bool:
        for layer, parts in layers.items():
            out_dim, in_dim = layer.weight.shape[0], layer.weight.shape[1]
            if "lokr_w1" in parts and tuple(parts["lokr_w1"].shape[:2]) != (
                factorization(out_dim, f)[0], factorization(in_dim, f)[0]
            ):
                return False
        return True

    return next((f for f in candidates if fits(f)), -1)


def rebuild_from_file(sd: dict[str, torch.Tensor], unet: nn.Module, text_encoders: list[nn.Module]) -> int:
    """Inject the file's network into plain models (its type, each module's rank) and load it; returns the modules.

    Raises :class:`~guitrainer.engine.lora.LoraFormatError` when the file's factors fit no such network.
    """
    kind = file_kind(sd)
    kind = "lora" if kind == "locon" else kind

    def layers(model: nn.Module) -> dict[str, nn.Module]:
        return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Conv2d)}

    targets = lora.kohya_targets(unet, text_encoders, layers)
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in sd.items():
        module, _, part = key.partition(".")
        grouped.setdefault(module, {})[part] = value
    found: dict[nn.Module, dict[str, torch.Tensor]] = {}
    for module, parts in grouped.items():
        name = lora._resolve(module, targets, len(text_encoders))
        if name is not None:
            found[targets[name]] = parts
    factor = _lokr_factor(found) if kind == "lokr" else -1
    for model in (unet, *text_encoders):
        ranks = {path: _module_rank(found[m]) for path, m in layers(model).items() if m in found}
        variants.inject_exact(model, kind, ranks, factor)
    return lycoris_keys.load_variant_file(sd, unet, text_encoders)


def verify_variant_file(path: str | Path, base: Any, reference: Any = None, *, seed: int = 0) -> VerifyResult:
    """Verify a LoCon/LoHa/LoKr/DoRA file by the clients' merge rules (see the module text)."""
    sd = lora.read_lora(lora.lora_weights_file(path))[0]
    kind, precision = file_kind(sd), _file_dtype(sd)
    m = _base(base)
    for mod in (m.unet, *m.text_encoders):
        torch.nn.Module.to(mod, "cpu", torch.float32)
        mod.eval()
    x = _inputs(m.unet, m.text_encoders, seed)
    base_unet, base_te = _unet_out(m.unet, x), _te_out(m.text_encoders, x)
    clean = copy.deepcopy(m) if kind == "dora" else None
    notes = [f"{kind}: {CLIENTS[kind]}."]
    ref_name = "trained model"
    if reference is None:
        reference, ref_name = copy.deepcopy(m), "our loader"
        try:
            rebuild_from_file(sd, reference.unet, list(reference.text_encoders))
        except (lora.LoraFormatError, ValueError, RuntimeError) as e:
            reference, ref_name = None, "the clients' merge"
            notes.append(f"guitrainer cannot rebuild the network from this file to compare ({str(e)[:160]}).")
    _count, unread = merge_file(sd, m.unet, m.text_encoders)
    merged_unet, merged_te = _unet_out(m.unet, x), _te_out(m.text_encoders, x)
    effect = float((merged_unet - base_unet).abs().max())
    finite = bool(torch.isfinite(merged_unet).all())
    te_effect = _max_diff(merged_te, base_te)
    ok = not unread and finite and effect > 0
    diff_unet, diff_te, tol = 0.0, None, 0.0
    if reference is not None:
        with _EvalMode([reference.unet, *reference.text_encoders]):
            ours_unet, ours_te = _unet_out(reference.unet, x), _te_out(list(reference.text_encoders), x)
        diff_unet = float((merged_unet - ours_unet).abs().max())
        diff_te = _max_diff(merged_te, ours_te) if any(k.startswith("lora_te") for k in sd) else None
        rel = _ROUNDING.get(precision, 0.0) if ref_name == "trained model" else 0.0  # else both read the same numbers
        tol = _ATOL * max(1.0, float(ours_unet.abs().max())) + rel * effect
        close = diff_unet <= tol and (diff_te is None or diff_te <= tol + rel * te_effect)
        ok = ok and close
        against = "the trained model" if ref_name == "trained model" else "the network as trained, rebuilt from the file"
        notes.append(f"The clients' merge {'matches' if close else 'differs from'} {against} (up to {diff_unet:.1g}).")
    if clean is not None:
        notes.append(_diffusers_on_dora(path, clean, x, merged_unet, effect))
    head = "every key is read by the ComfyUI / A1111 rules" if not unread else f"{len(unread)} keys match no layer (e.g. {unread[0]})"
    if not finite:
        head += "; the merged model gives non-finite outputs"
    if effect == 0:
        head += "; the file does not change the UNet output"
    return VerifyResult(diff_unet, diff_te, len(sd), tuple(unread), ok, " ".join([head + ".", *notes]), effect,
                        te_effect, tol, ref_name, precision)


def _diffusers_on_dora(path: str | Path, clean: Any, x: Any, merged_unet: torch.Tensor, effect: float) -> str:
    """What diffusers makes of a DoRA file, against the clients' merge."""
    pipe = _pipeline(clean)
    try:
        pipe.load_lora_weights(str(lora.lora_weights_file(path)))
    except Exception as e:  # noqa: BLE001 - a refusal is the answer
        return f"diffusers refuses it ({str(e).strip().splitlines()[0][:120]})."
    theirs = _unet_out(clean.unet, x)
    gap = float((theirs - merged_unet).abs().max())
    agree = gap <= _ATOL * max(1.0, float(merged_unet.abs().max())) + 1e-3 * effect
    return "diffusers gives the same outputs." if agree else f"diffusers' outputs differ from the clients' by up to {gap:.2g}."
