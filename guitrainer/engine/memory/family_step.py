"""Peak memory of one training step of a transformer family (Flux.1, SD 3.5, …), through the family seam.

The UNet families are measured by :mod:`.measure`'s own step (DDPM noise, ``UNet2DConditionModel``); the
transformer families differ in everything the step touches — packing, flow matching, text conditioning — and the
family (:class:`~guitrainer.engine.families.base.Family`) already says all of it. So this step asks the family:

* :meth:`~guitrainer.engine.families.base.Family.meta_model`: the architecture on ``meta``, from the shipped
  configs, optionally at reduced depth (fewer blocks, full width);
* ``denoiser_targets`` / ``trainable_text_encoders`` / ``storage_skip_patterns``: the LoRA and the fp8 storage, as
  :func:`guitrainer.engine.session._prepare_model` sets them up;
* ``encode_text``, ``draw``, ``predict``, ``loss``: the step itself, as :class:`guitrainer.engine.amp_step.AmpStep`
  runs it.

Cached text outputs are random tensors of the shapes ``encode_text`` makes (found by encoding on ``meta``), and the
encoders are not built; uncached, the encoders are materialised and run every step on token ids of the lengths the
family's encoding asks for (:class:`IdsTokenizer`, a stand-in: no tokenizer files are needed). Cached latents are
random; uncached, the VAE encodes random pixels. On fake tensors (no memory, no GPU) the step runs under
:class:`~guitrainer.engine.memory.modes.StorageTracker` like the UNet families'; on CUDA it is a real step with
random weights, measured by ``torch.cuda.max_memory_allocated`` after a warm-up step.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.utils.checkpoint

from guitrainer.config import TrainingConfig
from guitrainer.engine import amp_step
from guitrainer.engine.families import registry
from guitrainer.engine.families.base import Family, TextConditioning
from guitrainer.engine.memory.modes import (
    CUDA_BLOCK,
    CudaAutocastEmulation,
    FakeScalars,
    ScalerStandIn,
    StorageTracker,
)
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network.layer_casting import cast_layerwise

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class IdsTokenizer:
    """A tokenizer stand-in: token ids (zeros) of the length asked for (``max_length``, else 77), every one attended
    (the attention mask a family that masks its padding reads, as Chroma does)."""

    model_max_length = 77

    def __call__(self, captions: Sequence[str], *, max_length: int | None = None, **_: Any) -> SimpleNamespace:
        length = int(max_length or self.model_max_length)
        ids = torch.zeros(len(captions), length, dtype=torch.long)
        return SimpleNamespace(input_ids=ids, attention_mask=torch.ones_like(ids))


@dataclass
class _Run:
    family: Family
    model: LoadedModel
    text_encoders: list[torch.nn.Module]  # the ones on the device: uncached or trained
    trained: list[torch.nn.Module]
    cached_text: dict[str, tuple[tuple[int, ...], torch.dtype]]  # name -> (shape, dtype) when the text is cached
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer | None = None
    scaler: Any = None


def _text_shapes(fam: Family, m: LoadedModel, batch: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The shapes ``encode_text`` gives a batch, from an encoding on ``meta`` (no memory)."""
    with torch.no_grad(), FakeScalars():
        out = fam.encode_text(m, m.text_encoders, ["a"] * batch, torch.device("meta"))
    return {k: (tuple(v.shape), v.dtype) for k, v in out.items()}


def build(config: TrainingConfig, blocks: Sequence[int] | None = None, *, emulate_autocast: bool = False) -> _Run:
    """The model on ``meta`` as the trainer prepares it: compute dtype, LoRA (fp32 master weights), fp8 storage,
    gradient checkpointing. With ``emulate_autocast`` checkpointed blocks recompute under
    :class:`CudaAutocastEmulation` (fake / CPU tensors)."""
    from diffusers.training_utils import cast_training_params

    from guitrainer.core.memory.specs import config_family
    from guitrainer.engine.network import lora, variants

    fam = registry.family(config_family(config))
    p, n = config.precision, config.network
    wdtype = _DTYPES[p.training]
    m = fam.meta_model(config, blocks)
    m.tokenizers = [IdsTokenizer() for _ in m.text_encoders]
    torch.nn.Module.to(m.denoiser, wdtype)
    torch.nn.Module.to(m.vae, wdtype)
    for te in m.text_encoders:
        te.to(dtype=wdtype)
    trained = [m.text_encoders[i] for i in fam.trainable_text_encoders(m)] if n.train_text_encoder else []
    cached = p.cache_text_encoder_outputs and not trained
    shapes = _text_shapes(fam, m, config.schedule.batch_size) if cached else {}
    encoders = [] if cached else list(m.text_encoders)
    with torch.device("meta"):
        if n.type != "lora":
            variants.inject(m.denoiser, n, fam.denoiser_targets(n))
            for te in trained:
                variants.inject(te, n, fam.text_encoder_targets(m, m.text_encoders.index(te), n))
        else:
            lora.inject_lora(m.denoiser, n.rank, n.alpha, n.dropout, fam.denoiser_targets(n))
            for te in trained:
                targets = fam.text_encoder_targets(m, m.text_encoders.index(te), n)
                lora.inject_text_encoder_lora(te, n.rank, n.alpha, n.dropout, targets)
    cast_training_params([m.denoiser, *trained], dtype=torch.float32)
    if p.base_weights == "fp8":  # as the trainer's store_fp8: the family's skip list and the LoRA stay
        for module in (m.denoiser, *encoders):
            cast_layerwise(module, torch.float8_e4m3fn, wdtype, (*fam.storage_skip_patterns, "lora_"))
    if p.gradient_checkpointing:
        kwargs: dict[str, Any] = {"use_reentrant": False}
        if emulate_autocast and p.training != "fp32":
            kwargs["context_fn"] = lambda: (contextlib.nullcontext(), CudaAutocastEmulation(wdtype))
        m.denoiser.enable_gradient_checkpointing(functools.partial(torch.utils.checkpoint.checkpoint, **kwargs))
        for te in trained:
            te.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    m.denoiser.train()
    for te in m.text_encoders:
        te.train(te in trained)
    if p.cache_latents:
        m.vae = None
    return _Run(fam, m, encoders, trained, shapes, [])


def _modules(run: _Run) -> list[torch.nn.Module]:
    return [x for x in (run.model.denoiser, run.model.vae, *run.text_encoders) if x is not None]


def _materialise(config: TrainingConfig, run: _Run, device: str, real: bool) -> None:
    from guitrainer.engine.memory.step_parts import lora_parameters, make_optimizer

    for module in _modules(run):
        module.to_empty(device=device)
        tie = getattr(module, "tie_weights", None)
        if tie is not None:  # to_empty gives each user of a tied weight its own copy (T5's embedding): tie it again
            tie()
    if real:
        with torch.no_grad():
            for module in _modules(run):
                for prm in module.parameters():
                    prm.normal_(0.0, 0.02)
    run.params = lora_parameters([run.model.denoiser, *run.trained])
    run.optimizer = make_optimizer(config.optimizer, run.params, real_8bit=real)
    if config.precision.training == "fp16":
        run.scaler = torch.amp.GradScaler("cuda") if device == "cuda" else ScalerStandIn()


def _latents(config: TrainingConfig, run: _Run, device: str, wdtype: torch.dtype) -> torch.Tensor:
    b, res = config.schedule.batch_size, config.dataset.resolution
    facts = run.family.facts
    side = res // facts.latent_downscale
    vae = run.model.vae
    if vae is None:  # cached latents, stored in the compute dtype
        return torch.randn(b, facts.latent_channels, side, side, device=device, dtype=wdtype)
    with torch.no_grad():  # the trainer's uncached path: the frozen VAE encodes the batch
        pixels = torch.randn(b, 3, res, res, device=device, dtype=next(vae.parameters()).dtype)
        mean, std = run.family.latent_distribution(vae, pixels)
        del pixels
        return run.family.to_model_latents(vae, mean + std * torch.randn_like(std)).to(wdtype)


def _text(config: TrainingConfig, run: _Run, device: str, wdtype: torch.dtype) -> TextConditioning:
    if run.cached_text:
        return {k: torch.randn(shape, device=device, dtype=wdtype if dt.is_floating_point else dt)
                for k, (shape, dt) in run.cached_text.items()}
    captions = ["a"] * config.schedule.batch_size
    with torch.set_grad_enabled(bool(run.trained)):
        return run.family.encode_text(run.model, run.text_encoders, captions, torch.device(device))


def step(config: TrainingConfig, run: _Run, device: str, autocast: Any) -> None:
    """One training step: latents, then under autocast the text conditioning, the family's draw, prediction and
    loss, the backward pass (scaled under fp16); unscale, clip, update."""
    wdtype = _DTYPES[config.precision.training]
    latents = _latents(config, run, device, wdtype)
    fam, m = run.family, run.model
    with autocast:
        text = _text(config, run, device, wdtype)
        draw = fam.draw(config, m, latents, None)
        prediction = fam.predict(config, m.denoiser, m, draw, text, {})
        loss = fam.loss(config, m, prediction, draw, latents)
        del draw, prediction, text
        amp_step.backward(loss, run.scaler)
    del loss, latents
    assert run.optimizer is not None
    amp_step.finish_step(run.optimizer, run.params, run.scaler, config.schedule.max_grad_norm, foreach=True)


def measure(config: TrainingConfig, *, fake: bool = True, block: int = CUDA_BLOCK,
            blocks: Sequence[int] | None = None) -> Any:
    """A :class:`~guitrainer.engine.memory.measure.MemoryMeasurement` of one step of ``config``'s transformer family,
    on tracked fake (or real, ``fake=False``) CPU tensors; ``blocks`` at reduced depth (see :func:`build`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from guitrainer.engine.memory.step_parts import MemoryMeasurement, init_optimizer_state, param_bytes

    half = config.precision.training != "fp32"
    run = build(config, blocks, emulate_autocast=half)
    tracker = StorageTracker(block)
    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    with mode, FakeScalars() if fake else contextlib.nullcontext(), tracker:
        _materialise(config, run, "cpu", real=not fake)
        for module in _modules(run):
            for prm in module.parameters():
                tracker.track(prm)
        init_optimizer_state(run)  # type: ignore[arg-type]  # it reads .params and .optimizer only
        assert run.optimizer is not None
        state = sum(-(-t.untyped_storage().nbytes() // block) * block for s in run.optimizer.state.values()
                    for t in s.values() if isinstance(t, torch.Tensor))
        frozen = param_bytes(_modules(run), lora=False, block=block)  # type: ignore[arg-type]
        lora = param_bytes([run.model.denoiser, *run.trained], lora=True, block=block)
        tracker.reset_peak()
        static = tracker.live
        wdtype = _DTYPES[config.precision.training]
        step(config, run, "cpu", CudaAutocastEmulation(wdtype) if half else contextlib.nullcontext())
        peak = tracker.peak
    depth = "" if blocks is None else f" at reduced depth (blocks {tuple(int(b) for b in blocks)})"
    return MemoryMeasurement(
        peak=peak, static=static, frozen_weights=frozen, lora_weights=lora, optimizer_state=state,
        lora_parameter_count=sum(prm.numel() for prm in run.params), method="fake" if fake else "cpu",
        notes=[f"{run.family.facts.label} step through the family seam{depth}; fake tensors on CPU with CUDA "
               "autocast's casting policy emulated" if fake else "real CPU tensors"],
    )


def measure_cuda(config: TrainingConfig, *, blocks: Sequence[int] | None = None, steps: int = 2) -> Any:
    """A real step on the current CUDA GPU (random weights): peak ``max_memory_allocated`` over the step after a
    warm-up step; ``step_seconds`` the mean of ``steps`` timed steps after the warm-up."""
    from guitrainer.engine.memory.step_parts import MemoryMeasurement, param_bytes

    half = config.precision.training != "fp32"
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run = build(config, blocks)
    _materialise(config, run, "cuda", real=True)
    wdtype = _DTYPES[config.precision.training]

    def autocast() -> Any:
        return torch.autocast("cuda", dtype=wdtype) if half else contextlib.nullcontext()

    step(config, run, "cuda", autocast())  # warm-up: optimizer state, cuBLAS workspace, kernels
    torch.cuda.synchronize()
    static = torch.cuda.memory_allocated() - before
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(max(1, steps)):
        step(config, run, "cuda", autocast())
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / max(1, steps)
    assert run.optimizer is not None
    state = sum(t.untyped_storage().nbytes() for s in run.optimizer.state.values() for t in s.values()
                if isinstance(t, torch.Tensor))
    result = MemoryMeasurement(
        peak=torch.cuda.max_memory_allocated() - before, static=static,
        frozen_weights=param_bytes(_modules(run), lora=False),  # type: ignore[arg-type]
        lora_weights=param_bytes([run.model.denoiser, *run.trained], lora=True), optimizer_state=state,
        lora_parameter_count=sum(prm.numel() for prm in run.params), reserved=torch.cuda.max_memory_reserved(),
        method="cuda", notes=[f"{torch.cuda.get_device_name()}: {seconds:.3f} s/step after a warm-up step"],
    )
    result.step_seconds = seconds
    del run
    torch.cuda.empty_cache()
    return result
