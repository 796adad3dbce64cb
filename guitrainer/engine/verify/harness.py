"""What both verifiers share: a fresh base model, fixed inputs, the outputs compared, the tolerances and the result.

A verifier (:mod:`~guitrainer.engine.verify.lora` for LoRA and LoCon through diffusers,
:mod:`~guitrainer.engine.verify.variants` for LoHa, LoKr and DoRA by the clients' merge rules) takes a fresh
copy of the base model (:func:`fresh_base_model`), runs its UNet and text encoders on the same fixed random
inputs (:func:`fixed_inputs`, :func:`unet_output`, :func:`text_encoder_outputs`) with and without the file, and
compares the outputs against a reference within :data:`ATOL` plus the file's rounding (:data:`ROUNDING`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.engine.models.loading import load_base_model
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network import lora
from guitrainer.engine.verify.readers import ReaderVerdict

#: relative error of one rounding to the file's dtype, times a safety factor (outputs sum many products)
ROUNDING = {"fp32": 0.0, "fp16": 4.0 * 2.0**-11, "bf16": 4.0 * 2.0**-8}
#: the difference allowed between two outputs, relative to the larger of 1 and the reference's largest value
ATOL = 1e-5


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of :func:`~guitrainer.engine.verify.verify_lora`, with the verdict in plain words in ``message``.

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
        readers: how each program reads the file (LoHa, LoKr, DoRA files; :mod:`~guitrainer.engine.verify.readers`).
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
    readers: tuple[ReaderVerdict, ...] = ()


def fresh_base_model(base: Any) -> LoadedModel:
    """A copy of the base model that a verifier may change: on the CPU, in fp32, in eval mode.

    Args:
        base: a LoadedModel without LoRA layers (deep-copied, never changed), a ModelConfig / TrainingConfig,
            or a model path ("demo", a diffusers folder).
    Raises:
        ValueError: ``base`` already has LoRA layers (the trained model belongs in ``reference``).
    """
    if isinstance(base, LoadedModel):
        if lora.lora_layers(base.denoiser):
            raise ValueError("verify_lora needs the base model without LoRA layers; pass the trained one as `reference`")
        m = copy.deepcopy(base)
    elif isinstance(base, (str, Path)):
        from guitrainer.config import ModelConfig

        m = load_base_model(ModelConfig(base=str(base), family="auto"))
    else:
        m = load_base_model(getattr(base, "model", base))  # a TrainingConfig or a ModelConfig
    for mod in (m.denoiser, *m.text_encoders):
        torch.nn.Module.to(mod, "cpu", torch.float32)
        mod.eval()
    return m


def base_family(base: Any) -> str:
    """The family of ``base`` (as :func:`fresh_base_model` takes it) without loading it: a LoadedModel's own, else
    ``model.family``, or what the base model's files say when that is "auto" (SD 1.5 when they say nothing)."""
    if isinstance(base, LoadedModel):
        return base.family
    from guitrainer.core.memory.specs import resolve_family

    if isinstance(base, (str, Path)):
        return resolve_family("auto", str(base))
    model = getattr(base, "model", base)  # a TrainingConfig or a ModelConfig
    return resolve_family(str(getattr(model, "family", "auto")), str(model.base))


def diffusers_pipeline(m: LoadedModel) -> Any:
    """A diffusers pipeline (SDXL with two text encoders, else SD 1.x) over ``m``'s own modules, for ``load_lora_weights``."""
    if len(m.text_encoders) == 2:
        from diffusers import StableDiffusionXLPipeline

        return StableDiffusionXLPipeline(
            vae=m.vae,
            text_encoder=m.text_encoders[0],
            text_encoder_2=m.text_encoders[1],
            tokenizer=m.tokenizers[0] if m.tokenizers else None,
            tokenizer_2=m.tokenizers[1] if len(m.tokenizers) > 1 else None,
            unet=m.denoiser,
            scheduler=m.noise_scheduler,
        )
    from diffusers import StableDiffusionPipeline

    return StableDiffusionPipeline(
        vae=m.vae,
        text_encoder=m.text_encoders[0],
        tokenizer=m.tokenizers[0] if m.tokenizers else None,
        unet=m.denoiser,
        scheduler=m.noise_scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


@dataclass
class Inputs:
    """The fixed random inputs every output is computed on (:func:`fixed_inputs`)."""

    sample: torch.Tensor
    timestep: torch.Tensor
    hidden: torch.Tensor
    added: dict[str, torch.Tensor] | None
    ids: list[torch.Tensor]


def fixed_inputs(unet: nn.Module, text_encoders: list[nn.Module], seed: int) -> Inputs:
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
    return Inputs(sample, torch.tensor([500]), hidden, added, ids)


def _on(x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    p = next(module.parameters())
    return x.to(p.device, p.dtype) if x.is_floating_point() else x.to(p.device)


@torch.no_grad()
def unet_output(unet: nn.Module, x: Inputs) -> torch.Tensor:
    """The UNet's output on ``x``, as fp32 on the CPU."""
    added = {k: _on(v, unet) for k, v in x.added.items()} if x.added else None
    out = unet(_on(x.sample, unet), x.timestep.to(x.sample.device), _on(x.hidden, unet), added_cond_kwargs=added)
    return out.sample.float().cpu()


@torch.no_grad()
def text_encoder_outputs(text_encoders: list[nn.Module], x: Inputs) -> list[torch.Tensor]:
    """Every text encoder's last and penultimate hidden states and pooled / projected output."""
    outs: list[torch.Tensor] = []
    for te, ids in zip(text_encoders, x.ids):
        o = te(_on(ids, te), output_hidden_states=True)
        pooled = getattr(o, "text_embeds", None)
        pooled = pooled if pooled is not None else o.pooler_output
        outs += [o.last_hidden_state, o.hidden_states[-2], pooled]
    return [t.float().cpu() for t in outs]


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest absolute difference between paired tensors (0 for none)."""
    return max((float((x - y).abs().max()) for x, y in zip(a, b)), default=0.0)


class EvalMode:
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


def file_dtype(sd: dict[str, torch.Tensor]) -> str:
    """The save precision of a file's tensors ("fp32", "fp16", "bf16"), its alphas left out."""
    dtypes = {t.dtype for k, t in sd.items() if not k.endswith(".alpha")}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if dtypes == {dt}:
            return name
    return "fp32" if torch.float32 in dtypes else "fp16"
