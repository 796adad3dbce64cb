"""Prove a written LoRA loads elsewhere: diffusers' ``load_lora_weights`` must reproduce our model (DESIGN §5).

:func:`verify_with_diffusers` builds a diffusers pipeline of the base model, loads the file the way diffusers users
(and, by the same key conventions, ComfyUI and A1111) do, and compares the UNet and text encoder outputs on
fixed random inputs against a reference:

* the in-memory trained model (``reference``: the trainer's peft-injected modules), or
* without one (the Output page's Verify button), the same file applied by our own loader
  (:func:`guitrainer.engine.network.lora.load_kohya_lora`), so two independent readers must agree.

One copy of the base model is used for everything: outputs without the LoRA, with diffusers' reading,
then (LoRA removed again) with ours.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.core.model.variant_readers import READER_NAMES, reader_facts, reads_as_trained
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network import client_merge, lora
from guitrainer.engine.verify.harness import (
    ATOL,
    ROUNDING,
    EvalMode,
    VerifyResult,
    diffusers_pipeline,
    file_dtype,
    fixed_inputs,
    fresh_base_model,
    max_diff,
    text_encoder_outputs,
    unet_output,
)

log = logging.getLogger(__name__)


def _loaded_layer_names(unet: nn.Module, text_encoders: list[nn.Module]) -> set[str]:
    """kohya names of the layers a loader gave a LoRA (any adapter name)."""
    def layers(model: nn.Module) -> dict[str, nn.Module]:
        return {n: m for n, m in model.named_modules() if _has_lora(m)}

    return set(lora.kohya_targets(unet, text_encoders, layers))


def _has_lora(m: nn.Module) -> bool:
    a = getattr(m, "lora_A", None)
    return isinstance(a, nn.ModuleDict) and len(a) > 0


def verify_with_diffusers(
    path: str | Path, base: Any, reference: LoadedModel | None = None, *, seed: int = 0
) -> VerifyResult:
    """Load a LoRA or LoCon file with diffusers' ``load_lora_weights`` into a pipeline of ``base`` and compare outputs.

    Args:
        path: a kohya .safetensors, a diffusers-format file, or a diffusers LoRA folder.
        base: the base model: a LoadedModel without LoRA (copied, not changed), a ModelConfig / TrainingConfig,
            or a model path ("demo", a diffusers folder).
        reference: the trained model (peft LoRA injected) to compare with; None compares with the file as
            applied by our own loader.
        seed: seed of the random inputs.
    """
    path = Path(path)
    weights = lora.lora_weights_file(path)
    sd_kohya, _meta = lora.read_lora_as_kohya(path)
    raw = lora.read_lora(weights)[0]
    precision = file_dtype(raw)
    m = fresh_base_model(base)
    pipe = diffusers_pipeline(m)
    x = fixed_inputs(m.denoiser, m.text_encoders, seed)
    base_unet = unet_output(m.denoiser, x)
    base_te = text_encoder_outputs(m.text_encoders, x)

    file_modules = sorted({lora.module_of(k)[0] for k in sd_kohya if k.endswith(".lora_down.weight")})
    has_te = any(n.startswith("lora_te") for n in file_modules)
    try:
        pipe.load_lora_weights(str(path) if path.is_dir() else str(weights))
    except Exception as e:  # noqa: BLE001 - any refusal by diffusers is the verdict
        msg = f"diffusers could not read this file: {first_line(e, 300)}"
        return VerifyResult(float("inf"), None, len(raw), tuple(sorted(raw)), False, msg, save_precision=precision)
    loaded = _loaded_layer_names(m.denoiser, m.text_encoders)
    unused_modules = [n for n in file_modules if lora.resolve_module(n, dict.fromkeys(loaded), len(m.text_encoders)) is None]
    unused_keys = _original_keys(raw, sd_kohya, unused_modules)
    theirs_unet = unet_output(m.denoiser, x)
    theirs_te = text_encoder_outputs(m.text_encoders, x)
    effect = float((theirs_unet - base_unet).abs().max())

    if reference is not None:
        ref_name = "trained model"
        with EvalMode([reference.denoiser, *reference.text_encoders]):
            ours_unet = unet_output(reference.denoiser, x)
            ours_te = text_encoder_outputs(list(reference.text_encoders), x)
        rel = ROUNDING.get(precision, 0.0)
    else:
        ref_name = "our loader"
        pipe.unload_lora_weights()
        lora.inject_for_file(m.denoiser, m.text_encoders, sd_kohya)
        lora.load_kohya_lora(sd_kohya, m.denoiser, m.text_encoders, strict=False)
        ours_unet = unet_output(m.denoiser, x)
        ours_te = text_encoder_outputs(m.text_encoders, x)
        rel = 0.0  # both readers apply the same rounded numbers
    diff_unet = float((theirs_unet - ours_unet).abs().max())
    diff_te = max_diff(theirs_te, ours_te) if has_te else None
    te_effect = max_diff(theirs_te, base_te) if has_te else 0.0
    tol_unet = ATOL * max(1.0, float(ours_unet.abs().max())) + rel * effect
    tol_te = ATOL * max(1.0, max((float(t.abs().max()) for t in ours_te), default=1.0)) + rel * te_effect
    close = diff_unet <= tol_unet and (diff_te is None or diff_te <= tol_te)
    ok = close and not unused_keys
    kind = client_merge.file_kind(sd_kohya)
    facts = reader_facts(kind)
    readers = ", ".join(READER_NAMES[r] for r in reads_as_trained(kind) if facts[r] == "reads it")
    message = _message(close, unused_keys, diff_unet, diff_te, tol_unet, effect, ref_name) + f". {kind}: {readers} read it."
    log.info("verify %s: %s", path, message)
    return VerifyResult(
        diff_unet, diff_te, len(raw), tuple(unused_keys), ok, message, effect, te_effect, tol_unet, ref_name, precision
    )


def _original_keys(raw: dict[str, torch.Tensor], sd_kohya: dict[str, torch.Tensor], modules: list[str]) -> list[str]:
    """The file's own tensor names of the given (kohya-named) modules."""
    if not modules:
        return []
    if set(raw) == set(sd_kohya):
        return sorted(k for k in raw if lora.module_of(k)[0] in modules)
    return sorted(f"{m}.*" for m in modules)  # a diffusers-format file: name the modules


def _message(
    close: bool, unused: list[str], diff_unet: float, diff_te: float | None, tol: float, effect: float, ref: str
) -> str:
    worst = max(diff_unet, diff_te or 0.0)
    against = "the trained model" if ref == "trained model" else "our own loader"
    if close:
        head = "diffusers reads this file: " + ("every key used" if not unused else f"but {len(unused)} keys were not used")
        text = f"{head}, outputs match {against} " + (f"within {worst:.1g}" if worst > 0 else "exactly")
    else:
        text = (
            f"diffusers reads this file differently: outputs differ from {against} by up to {worst:.3g} "
            f"(allowed {tol:.1g}); it would not look as trained"
        )
        if unused:
            text += f"; {len(unused)} keys were not used"
    if unused:
        text += f" (e.g. {unused[0]})"
    if effect == 0.0:
        text += ". The LoRA does not change the UNet output (all lora_up weights are zero?)"
    return text
