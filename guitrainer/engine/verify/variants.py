"""Verify LoCon, LoHa, LoKr and DoRA files, which diffusers cannot read as the clients do.

The file is merged into the base weights by its main reader's rules (:mod:`guitrainer.engine.network.client_merge`:
ComfyUI's, which A1111 shares for these layouts; LyCORIS' for a DoRA file per output row): every key must be
read, the merge must change the outputs and stay finite, and the merged model's outputs must match a
reference. Given the trained model, that is the reference. Without one (the Output page's Verify) it is the
network rebuilt from the file (:func:`rebuild_from_file`: peft's LoHa / LoKr layers, our DoRA layer, computing in
the forward pass as in training): that checks the factors are combined as training combined them (Kronecker
order, conv reshape, the DoRA axis), with the file's own scales; each module's alpha is then checked against the
network alpha the file's metadata states (``ss_network_alpha``, ``conv_alpha``), so an edited alpha shows too.

Then every reader says how it reads the file (:mod:`guitrainer.engine.verify.readers`: ComfyUI / Forge, A1111,
LyCORIS and kohya's networks.lora by their rules, module by module against the same reference), and diffusers
is asked itself: it drops ``dora_scale`` and refuses LoHa / LoKr for SD 1.5 / SDXL.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.core.model.variant_readers import READER_NAMES
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network import lora, lycoris_keys, variants
from guitrainer.engine.network.client_merge import (
    dora_layout,
    file_kind,
    grouped,
    merge_file,
    unsupported,
    weight_layers,
)
from guitrainer.engine.verify.harness import (
    ATOL,
    ROUNDING,
    EvalMode,
    Inputs,
    VerifyResult,
    diffusers_pipeline,
    file_dtype,
    fixed_inputs,
    fresh_base_model,
    max_diff,
    text_encoder_outputs,
    unet_output,
)
from guitrainer.engine.verify.readers import reader_verdicts, trained_deltas

log = logging.getLogger(__name__)


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

    Raises :class:`~guitrainer.engine.network.lora.LoraFormatError` when the file's factors fit no such network.
    """
    kind = file_kind(sd)
    kind = "lora" if kind == "locon" else kind
    targets = lora.kohya_targets(unet, text_encoders, weight_layers)
    found: dict[nn.Module, dict[str, torch.Tensor]] = {}
    for module, parts in grouped(sd).items():
        name = lora.resolve_module(module, targets, len(text_encoders))
        if name is not None:
            why = unsupported(parts, targets[name].weight)
            if why:
                raise lora.LoraFormatError(f"{module} holds {why}")
            found[targets[name]] = parts
    factor = _lokr_factor(found) if kind == "lokr" else -1
    split_w1 = any("lokr_w1_a" in parts for parts in found.values())
    layout = next((dora_layout(p["dora_scale"], m.weight) for m, p in found.items() if "dora_scale" in p), "column")
    for model in (unet, *text_encoders):
        ranks = {path: _module_rank(found[m]) for path, m in weight_layers(model).items() if m in found}
        variants.inject_exact(model, kind, ranks, factor, split_w1, layout)
    return lycoris_keys.load_variant_file(sd, unet, text_encoders)


def alpha_mismatches(sd: dict[str, torch.Tensor], meta: dict[str, str], unet: nn.Module,
                     text_encoders: list[nn.Module]) -> tuple[list[str], str]:
    """Modules whose ``alpha`` differs from the network alpha the file's metadata states (``ss_network_alpha``,
    ``conv_alpha`` for kxk convolutions), and that alpha in words. Nothing to compare: ([], "").

    LoKr files are left out (their alpha is re-expressed per module, :mod:`guitrainer.engine.network.lycoris_keys`), as
    are files with per-block alphas (``block_alphas``).
    """
    try:
        linear = float(meta["ss_network_alpha"])
        args = json.loads(meta.get("ss_network_args") or "{}")
    except (KeyError, ValueError, TypeError):
        return [], ""
    conv = float(args["conv_alpha"]) if "conv_alpha" in args else linear
    if file_kind(sd) == "lokr" or any(k in args for k in ("block_alphas", "conv_block_alphas")):
        return [], ""
    targets = lora.kohya_targets(unet, text_encoders, weight_layers)
    odd = []
    for module, parts in grouped(sd).items():
        name = lora.resolve_module(module, targets, len(text_encoders))
        if "alpha" not in parts or name is None:
            continue
        want = conv if variants.is_conv_kernel(targets[name]) else linear
        if abs(float(parts["alpha"]) - want) > 1e-2 * max(1.0, abs(want)):
            odd.append(f"{module} ({float(parts['alpha']):g})")
    said = f"ss_network_alpha = {linear:g}" + (f", conv_alpha = {conv:g}" if "conv_alpha" in args else "")
    return odd, said


def _reference_outputs(
    sd: dict[str, torch.Tensor], m: LoadedModel, x: Inputs
) -> tuple[tuple[torch.Tensor, list[torch.Tensor]] | None, dict[str, torch.Tensor], str]:
    """The rebuilt network's outputs on ``x`` ((unet, text encoders)), its modules' weight changes, and "" — or
    (None, {}, why not); ``m`` is left plain."""
    try:
        rebuild_from_file(sd, m.denoiser, list(m.text_encoders))
        deltas = trained_deltas(sd, m.denoiser, list(m.text_encoders))
        return (unet_output(m.denoiser, x), text_encoder_outputs(m.text_encoders, x)), deltas, ""
    except (lora.LoraFormatError, ValueError, RuntimeError) as e:
        return None, {}, str(e).split(";")[0][:200]
    finally:
        for model in (m.denoiser, *m.text_encoders):
            variants.remove_adapters(model)


def _main_reader(sd: dict[str, torch.Tensor], m: LoadedModel) -> str:
    """The reader a file is made for: LyCORIS for a DoRA file per output row, else ComfyUI (A1111 shares its rules)."""
    targets = lora.kohya_targets(m.denoiser, list(m.text_encoders), weight_layers)
    for module, parts in grouped(sd).items():
        name = lora.resolve_module(module, targets, len(m.text_encoders))
        if "dora_scale" in parts and name is not None:
            return "lycoris" if dora_layout(parts["dora_scale"], targets[name].weight) == "row" else "comfyui"
    return "comfyui"


def verify_variant_file(
    path: str | Path, base: Any, reference: LoadedModel | None = None, *, seed: int = 0
) -> VerifyResult:
    """Verify a LoCon/LoHa/LoKr/DoRA file by the clients' merge rules (see the module text).

    Holds one copy of the base model: the reference is computed first, then the file is merged into it.
    """
    sd, meta = lora.read_lora(lora.lora_weights_file(path))
    precision = file_dtype(sd)
    m = fresh_base_model(base)
    x = fixed_inputs(m.denoiser, m.text_encoders, seed)
    base_unet, base_te = unet_output(m.denoiser, x), text_encoder_outputs(m.text_encoders, x)
    notes: list[str] = []
    if reference is not None:
        ref_name = "trained model"
        with EvalMode([reference.denoiser, *reference.text_encoders]):
            ours = (unet_output(reference.denoiser, x), text_encoder_outputs(list(reference.text_encoders), x))
        deltas = trained_deltas(sd, reference.denoiser, list(reference.text_encoders))
    else:
        ours, deltas, why = _reference_outputs(sd, m, x)
        ref_name = "our loader" if ours is not None else "none"
        if ours is None:
            notes.append(f"Not compared with the network as trained: guitrainer cannot rebuild it from this file ({why}).")
    tolerance = ROUNDING.get(precision, 0.0) if ref_name == "trained model" else 0.0
    verdicts = reader_verdicts(sd, m.denoiser, list(m.text_encoders), deltas, tolerance, precision) if deltas else []
    theirs = _diffusers_outputs(path, m, x)
    main = _main_reader(sd, m)
    try:
        _count, unread, skipped = merge_file(sd, m.denoiser, m.text_encoders, main)
    except (RuntimeError, KeyError, ValueError) as e:
        message = f"Could not merge this file by the clients' rules: {type(e).__name__}: {str(e)[:200]}."
        return VerifyResult(float("inf"), None, len(sd), tuple(sorted(sd)), False, message, save_precision=precision)
    merged_unet, merged_te = unet_output(m.denoiser, x), text_encoder_outputs(m.text_encoders, x)
    effect = float((merged_unet - base_unet).abs().max())
    finite = bool(torch.isfinite(merged_unet).all())
    te_effect = max_diff(merged_te, base_te)
    ok = not unread and not skipped and finite and effect > 0
    diff_unet, diff_te, tol = 0.0, None, 0.0
    if ours is not None:
        diff_unet = float((merged_unet - ours[0]).abs().max())
        diff_te = max_diff(merged_te, ours[1]) if any(k.startswith("lora_te") for k in sd) else None
        rel = ROUNDING.get(precision, 0.0) if ref_name == "trained model" else 0.0  # else both read the same numbers
        tol = ATOL * max(1.0, float(ours[0].abs().max())) + rel * effect
        close = diff_unet <= tol and (diff_te is None or diff_te <= tol + rel * te_effect)
        ok = ok and close
        against = "the trained model" if ref_name == "trained model" else "the network as trained, rebuilt from the file"
        notes.append(f"The merge by the rules of {READER_NAMES[main]} {'matches' if close else 'differs from'} {against} "
                     f"(outputs up to {diff_unet:.1g} apart).")
    if ref_name != "trained model":
        odd, said = alpha_mismatches(sd, meta, m.denoiser, list(m.text_encoders))
        if odd:
            ok = False
            notes.append(f"{len(odd)} modules have another alpha than the file's metadata states ({said}), e.g. "
                         f"{odd[0]}: the clients apply them at another strength than the network was trained with.")
    lines = [v.words for v in verdicts]
    lines.append(theirs if isinstance(theirs, str) else _diffusers_agreement(theirs, merged_unet, effect))
    message = " ".join([_head(unread, skipped, finite, effect, main) + ".", *notes, "Readers: " + "; ".join(lines) + "."])
    log.info("verify %s: %s", path, message)
    return VerifyResult(diff_unet, diff_te, len(sd), tuple(unread), ok, message, effect, te_effect, tol, ref_name,
                        precision, tuple(verdicts))


def _head(unread: list[str], skipped: dict[str, str], finite: bool, effect: float, main: str) -> str:
    rules = "the ComfyUI / A1111 rules" if main == "comfyui" else f"the rules of {READER_NAMES[main]}"
    head = f"every key is read by {rules}" if not unread else f"{len(unread)} keys match no layer (e.g. {unread[0]})"
    if skipped:
        module, why = next(iter(skipped.items()))
        head += f"; {len(skipped)} modules were not checked: guitrainer does not merge {why} (e.g. {module})"
    if not finite:
        head += "; the merged model gives non-finite outputs"
    if effect == 0:
        head += "; the file does not change the UNet output"
    return head


def _diffusers_outputs(path: str | Path, m: LoadedModel, x: Inputs) -> torch.Tensor | str:
    """diffusers' UNet output with the file loaded into ``m`` (then unloaded again), or its refusal in words."""
    pipe = diffusers_pipeline(m)
    try:
        pipe.load_lora_weights(str(lora.lora_weights_file(path)))
    except Exception as e:  # noqa: BLE001 - a refusal is the answer
        return f"diffusers: refuses it ({first_line(e, 120)})"
    try:
        return unet_output(m.denoiser, x)
    finally:
        pipe.unload_lora_weights()


def _diffusers_agreement(theirs: torch.Tensor, merged_unet: torch.Tensor, effect: float) -> str:
    """What diffusers makes of the file, against the main reader's merge."""
    gap = float((theirs - merged_unet).abs().max())
    agree = gap <= ATOL * max(1.0, float(merged_unet.abs().max())) + 1e-3 * effect
    if agree:
        return "diffusers: gives the same outputs"
    return f"diffusers: loads it, outputs up to {gap:.2g} from the trained ones (it drops dora_scale: a plain LoRA there)"
