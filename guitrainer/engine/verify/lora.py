"""Prove a written LoRA loads elsewhere: diffusers' ``load_lora_weights`` must reproduce our model (DESIGN §5).

:func:`verify_lora` builds a diffusers pipeline of the base model, loads the file the way diffusers users
(and, by the same key conventions, ComfyUI and A1111) do, and compares the UNet and text encoder outputs on
fixed random inputs against a reference:

* the in-memory trained model (``reference``: the trainer's peft-injected modules), or
* without one (the Output page's Verify button), the same file applied by our own loader
  (:func:`guitrainer.engine.network.lora.load_kohya_lora`), so two independent readers must agree.

One copy of the base model is used for everything: outputs without the LoRA, with diffusers' reading,
then (LoRA removed again) with ours.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.engine.models.loading import LoadedModel, load_base_model
from guitrainer.engine.network import lora

log = logging.getLogger(__name__)

#: relative error of one rounding to the file's dtype, times a safety factor (outputs sum many products)
_ROUNDING = {"fp32": 0.0, "fp16": 4.0 * 2.0**-11, "bf16": 4.0 * 2.0**-8}
_ATOL = 1e-5


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of :func:`verify_lora`, with the verdict in plain words in ``message``.

    Attributes:
        max_abs_diff_unet: largest |diffusers - reference| over the UNet output.
        max_abs_diff_te: the same over the text encoder outputs (None when the file has no text encoder part).
        keys_total: tensors in the file.
        keys_unused: tensor names diffusers did not apply to any layer.
        ok: every key used and the outputs agree within ``tolerance``.
        message: e.g. "diffusers reads this file: every key used, outputs match within 3e-07".
        lora_effect: how much the LoRA changes the UNet output (0 would mean it does nothing).
        lora_effect_te: the same for the text encoder outputs.
        tolerance: the largest difference accepted for the UNet output.
        reference: "trained model" or "our loader".
        save_precision: dtype of the file's tensors ("fp32", "fp16", "bf16").
    """

    max_abs_diff_unet: float
    max_abs_diff_te: float | None
    keys_total: int
    keys_unused: tuple[str, ...]
    ok: bool
    message: str
    lora_effect: float = 0.0
    lora_effect_te: float = 0.0
    tolerance: float = 0.0
    reference: str = "our loader"
    save_precision: str = "fp32"


def _base(base: Any) -> LoadedModel:
    if isinstance(base, LoadedModel):
        if lora.lora_layers(base.unet):
            raise ValueError("verify_lora needs the base model without LoRA layers; pass the trained one as `reference`")
        return copy.deepcopy(base)
    if isinstance(base, (str, Path)):
        from guitrainer.config import ModelConfig

        return load_base_model(ModelConfig(base=str(base), family="auto"))
    model_cfg = getattr(base, "model", base)  # a TrainingConfig or a ModelConfig
    return load_base_model(model_cfg)


def _pipeline(m: LoadedModel) -> Any:
    if len(m.text_encoders) == 2:
        from diffusers import StableDiffusionXLPipeline

        return StableDiffusionXLPipeline(
            vae=m.vae,
            text_encoder=m.text_encoders[0],
            text_encoder_2=m.text_encoders[1],
            tokenizer=m.tokenizers[0] if m.tokenizers else None,
            tokenizer_2=m.tokenizers[1] if len(m.tokenizers) > 1 else None,
            unet=m.unet,
            scheduler=m.noise_scheduler,
        )
    from diffusers import StableDiffusionPipeline

    return StableDiffusionPipeline(
        vae=m.vae,
        text_encoder=m.text_encoders[0],
        tokenizer=m.tokenizers[0] if m.tokenizers else None,
        unet=m.unet,
        scheduler=m.noise_scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


@dataclass
class _Inputs:
    sample: torch.Tensor
    timestep: torch.Tensor
    hidden: torch.Tensor
    added: dict[str, torch.Tensor] | None
    ids: list[torch.Tensor]


def _inputs(unet: nn.Module, text_encoders: list[nn.Module], seed: int) -> _Inputs:
    """Fixed random inputs: a small latent (every block still runs), random text states and token ids."""
    g = torch.Generator().manual_seed(seed)
    c = unet.config
    levels = 2 ** (len(c.down_block_types) - 1)
    side = max(levels, min(int(c.sample_size), 32) // levels * levels)
    sample = torch.randn(1, c.in_channels, side, side, generator=g)
    hidden = torch.randn(1, 77, c.cross_attention_dim, generator=g)
    added = None
    if c.addition_embed_type == "text_time":
        n_text = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
        px = float(side * 8)
        added = {
            "text_embeds": torch.randn(1, n_text, generator=g),
            "time_ids": torch.tensor([[px, px, 0.0, 0.0, px, px]]),
        }
    ids = []
    for te in text_encoders:
        length = min(77, int(te.config.max_position_embeddings))
        ids.append(torch.randint(0, int(te.config.vocab_size), (1, length), generator=g))
    return _Inputs(sample, torch.tensor([500]), hidden, added, ids)


def _on(x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    p = next(module.parameters())
    return x.to(p.device, p.dtype) if x.is_floating_point() else x.to(p.device)


@torch.no_grad()
def _unet_out(unet: nn.Module, x: _Inputs) -> torch.Tensor:
    added = {k: _on(v, unet) for k, v in x.added.items()} if x.added else None
    out = unet(_on(x.sample, unet), x.timestep.to(x.sample.device), _on(x.hidden, unet), added_cond_kwargs=added)
    return out.sample.float().cpu()


@torch.no_grad()
def _te_out(text_encoders: list[nn.Module], x: _Inputs) -> list[torch.Tensor]:
    """Every text encoder's last and penultimate hidden states and pooled / projected output."""
    outs: list[torch.Tensor] = []
    for te, ids in zip(text_encoders, x.ids):
        o = te(_on(ids, te), output_hidden_states=True)
        pooled = getattr(o, "text_embeds", None)
        pooled = pooled if pooled is not None else o.pooler_output
        outs += [o.last_hidden_state, o.hidden_states[-2], pooled]
    return [t.float().cpu() for t in outs]


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((float((x - y).abs().max()) for x, y in zip(a, b)), default=0.0)


class _EvalMode:
    """Put modules in eval mode (no dropout) and restore their previous mode afterwards."""

    def __init__(self, modules: list[nn.Module]):
        self.modules = modules
        self.modes: list[bool] = []

    def __enter__(self) -> None:
        self.modes = [m.training for m in self.modules]
        for m in self.modules:
            m.eval()

    def __exit__(self, *exc: object) -> None:
        for m, mode in zip(self.modules, self.modes):
            m.train(mode)


def _loaded_layer_names(unet: nn.Module, text_encoders: list[nn.Module]) -> set[str]:
    """kohya names of the layers a loader gave a LoRA (any adapter name)."""
    def layers(model: nn.Module) -> dict[str, nn.Module]:
        return {n: m for n, m in model.named_modules() if _has_lora(m)}

    return set(lora.kohya_targets(unet, text_encoders, layers))


def _has_lora(m: nn.Module) -> bool:
    a = getattr(m, "lora_A", None)
    return isinstance(a, nn.ModuleDict) and len(a) > 0


def _file_dtype(sd: dict[str, torch.Tensor]) -> str:
    dtypes = {t.dtype for k, t in sd.items() if not k.endswith(".alpha")}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if dtypes == {dt}:
            return name
    return "fp32" if torch.float32 in dtypes else "fp16"


def verify_lora(path: str | Path, base: Any, reference: LoadedModel | None = None, *, seed: int = 0) -> VerifyResult:
    """Load ``path`` with diffusers' ``load_lora_weights`` into a pipeline of ``base`` and compare outputs.

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
    from guitrainer.engine.network import client_merge
    from guitrainer.engine.verify import variants as verify_variants

    if client_merge.file_kind(sd_kohya) in ("loha", "lokr", "dora"):  # diffusers cannot read them as the clients do
        return verify_variants.verify_variant_file(path, base, reference, seed=seed)
    raw = lora.read_lora(weights)[0]
    precision = _file_dtype(raw)
    m = _base(base)
    for mod in (m.unet, *m.text_encoders):
        torch.nn.Module.to(mod, "cpu", torch.float32)
        mod.eval()
    pipe = _pipeline(m)
    x = _inputs(m.unet, m.text_encoders, seed)
    base_unet = _unet_out(m.unet, x)
    base_te = _te_out(m.text_encoders, x)

    file_modules = sorted({lora._module_of(k)[0] for k in sd_kohya if k.endswith(".lora_down.weight")})
    has_te = any(n.startswith("lora_te") for n in file_modules)
    try:
        pipe.load_lora_weights(str(path) if path.is_dir() else str(weights))
    except Exception as e:  # noqa: BLE001 - any refusal by diffusers is the verdict
        msg = f"diffusers could not read this file: {str(e).strip().splitlines()[0][:300]}"
        return VerifyResult(float("inf"), None, len(raw), tuple(sorted(raw)), False, msg, save_precision=precision)
    loaded = _loaded_layer_names(m.unet, m.text_encoders)
    unused_modules = [n for n in file_modules if lora.resolve_module(n, dict.fromkeys(loaded), len(m.text_encoders)) is None]
    unused_keys = _original_keys(raw, sd_kohya, unused_modules)
    theirs_unet = _unet_out(m.unet, x)
    theirs_te = _te_out(m.text_encoders, x)
    effect = float((theirs_unet - base_unet).abs().max())

    if reference is not None:
        ref_name = "trained model"
        with _EvalMode([reference.unet, *reference.text_encoders]):
            ours_unet = _unet_out(reference.unet, x)
            ours_te = _te_out(list(reference.text_encoders), x)
        rel = _ROUNDING.get(precision, 0.0)
    else:
        ref_name = "our loader"
        pipe.unload_lora_weights()
        lora.inject_for_file(m.unet, m.text_encoders, sd_kohya)
        lora.load_kohya_lora(sd_kohya, m.unet, m.text_encoders, strict=False)
        ours_unet = _unet_out(m.unet, x)
        ours_te = _te_out(m.text_encoders, x)
        rel = 0.0  # both readers apply the same rounded numbers
    diff_unet = float((theirs_unet - ours_unet).abs().max())
    diff_te = _max_diff(theirs_te, ours_te) if has_te else None
    te_effect = _max_diff(theirs_te, base_te) if has_te else 0.0
    tol_unet = _ATOL * max(1.0, float(ours_unet.abs().max())) + rel * effect
    tol_te = _ATOL * max(1.0, max((float(t.abs().max()) for t in ours_te), default=1.0)) + rel * te_effect
    close = diff_unet <= tol_unet and (diff_te is None or diff_te <= tol_te)
    ok = close and not unused_keys
    kind = client_merge.file_kind(sd_kohya)
    message = _message(close, unused_keys, diff_unet, diff_te, tol_unet, effect, ref_name) + f". {kind}: {client_merge.CLIENTS[kind]}."
    log.info("verify %s: %s", path, message)
    return VerifyResult(
        diff_unet, diff_te, len(raw), tuple(unused_keys), ok, message, effect, te_effect, tol_unet, ref_name, precision
    )


def _original_keys(raw: dict[str, torch.Tensor], sd_kohya: dict[str, torch.Tensor], modules: list[str]) -> list[str]:
    """The file's own tensor names of the given (kohya-named) modules."""
    if not modules:
        return []
    if set(raw) == set(sd_kohya):
        return sorted(k for k in raw if lora._module_of(k)[0] in modules)
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
