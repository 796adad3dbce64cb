"""Measure a training step's peak memory: the ground truth the VRAM estimator is checked against.

Two ways, one step function (the UNet families'; the transformer families, Flux.1 and SD 3.5, run their own step
through the family seam in :mod:`.family_step`, measured the same two ways):

* **CUDA**: real tensors, a warm-up step, then ``torch.cuda.max_memory_allocated`` (and ``..._reserved``)
  over one more step.
* **Tracked fake tensors** (no GPU needed, seconds even for SDXL): the model is built on ``meta``,
  materialised with ``to_empty`` under :class:`~torch._subclasses.fake_tensor.FakeTensorMode` (no real memory),
  LoRA is injected with peft, and one full step (forward, backward, clipping, optimizer step) runs under
  :class:`StorageTracker`, a dispatch mode that counts the bytes of every live tensor storage (rounded to the
  CUDA caching allocator's 512-byte blocks) and keeps the peak.

Fake tensors on a ``cuda`` device cannot run on a CPU-only torch build (device guards need CUDA), so the fake
step runs on fake *CPU* tensors and mixed precision is simulated by :class:`CudaAutocastEmulation`, a torch-function
mode that applies CUDA autocast's casting policy (matmul / conv / linear / attention in fp16 or bf16; norms,
losses, ``exp`` etc. in fp32; ``cat`` / ``stack`` promote). Attention goes through SDPA, which on CPU picks the
flash kernel: like CUDA's flash / memory-efficient kernels it saves O(tokens) (output + logsumexp), never the
tokens² attention matrix.

LoRA is injected with the engine's own :func:`~guitrainer.engine.network.lora.inject_unet_lora` /
:func:`~guitrainer.engine.network.lora.inject_text_encoder_lora` and cast like the trainer does (fp32 master weights), so
the measured parameter set is exactly the one training trains. The step runs the trainer's own parts from
:mod:`guitrainer.engine.amp_step` (noise draw, UNet forward and loss, GradScaler backward, unscale, clip, update);
only its inputs are made here (random latents / pixels and token ids: no dataset or text cache exists), and on
fake tensors two things stand in (:mod:`guitrainer.engine.memory.modes`): :class:`ScalerStandIn` for the
GradScaler, whose inf check must read a value, and :class:`FakeScalars`, which answers the ``.item()`` calls of
optimizers such as Adafactor. On CUDA the real ``torch.amp.GradScaler`` runs.

bitsandbytes' 8-bit optimizers cannot run on fake tensors, but bitsandbytes (>= 0.50: backends/cpu/ops.py) runs them on CPU: their
state is **measured** by :func:`bnb_state_bytes`, a real optimizer step on real CPU tensors, one pair per
distinct LoRA shape (state is allocated per tensor, so the total is exact), built by the engine's
:func:`~guitrainer.engine.optim.build_optimizer`. The fake step itself runs a stateless SGD for the update.
Only where bitsandbytes cannot be used is the state taken from the estimator's formula
(:func:`guitrainer.core.memory.estimate.optimizer_state_bytes`); the result then says so in ``analytic_optimizer_state``.

:func:`profile_cpu_step` measures a real CPU step with ``torch.profiler`` (allocator events, no tracker): the
independent check of :class:`StorageTracker`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.checkpoint

from guitrainer.base.units import format_bytes
from guitrainer.core.families.registry import facts
from guitrainer.core.memory import network, specs
from guitrainer.core.model.vae_choice import vae_fp16_safe
from guitrainer.engine import amp_step
from guitrainer.engine.families.stable_diffusion import added_conditioning
from guitrainer.engine.memory.model_spec import build_on_meta, component_configs
from guitrainer.engine.memory.modes import (
    CUDA_BLOCK,
    CudaAutocastEmulation,
    FakeScalars,
    ScalerStandIn,
    StorageTracker,
)
from guitrainer.engine.memory.step_parts import (
    MemoryMeasurement,
    init_optimizer_state,
    lora_parameters,
    make_optimizer,
    param_bytes,
)
from guitrainer.engine.models.vae import vae_needs_fp32
from guitrainer.engine.network.layer_casting import FP8_SKIP_PATTERNS, cast_layerwise

log = logging.getLogger(__name__)



_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _family(config: Any) -> str:
    fam = str(config.model.family)
    return specs.resolve_family(fam, str(config.model.base))


def inject_engine_lora(unet: torch.nn.Module, text_encoders: list[torch.nn.Module], network: Any) -> None:
    """The trainer's LoRA on (meta) modules: the engine's injection, then fp32 master weights like the trainer.

    ``network`` is ``config.network``; ``text_encoders`` are the ones whose LoRA is trained (may be empty).
    """
    from diffusers.training_utils import cast_training_params

    from guitrainer.engine.network import lora, variants

    n = network
    with torch.device("meta"):
        if getattr(n, "type", "lora") != "lora":  # LoCon, LoHa, LoKr, DoRA: the trainer's own injection
            variants.inject_unet(unet, n)
            for te in text_encoders:
                variants.inject_text_encoder(te, n)
        else:
            lora.inject_unet_lora(unet, n.rank, n.alpha, n.dropout, n.target_modules)
            for te in text_encoders:
                lora.inject_text_encoder_lora(te, n.rank, n.alpha, n.dropout)
    cast_training_params([unet, *text_encoders], dtype=torch.float32)


#: optimizers whose step reads tensor values on the host (``.item()``): they cannot step fake tensors, so the
#: tracked step runs a stateless SGD and their state is measured by a real step (:func:`bnb_state_bytes`)
STATE_MEASURED_APART = ("Prodigy", "DAdaptAdam")


def _state_measured_apart(name: str) -> bool:
    return name.endswith("8bit") or name in STATE_MEASURED_APART


def _state_storages(state: dict[str, Any]) -> dict[int, torch.UntypedStorage]:
    return {
        t.untyped_storage().data_ptr(): t.untyped_storage()
        for t in state.values()
        if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes()
    }


def bnb_state_bytes(opt_cfg: Any, shapes: Iterable[tuple[int, ...]], block: int = CUDA_BLOCK) -> int | None:
    """Bytes of a bitsandbytes 8-bit optimizer's state over trainable tensors of ``shapes``, from a real step.

    The same works for any optimizer the engine builds (Prodigy and DAdaptAdam, whose steps cannot run on
    fake tensors, are measured this way too). bitsandbytes runs on CPU: one optimizer (the engine's :func:`~guitrainer.engine.optim.build_optimizer` with
    ``opt_cfg``) over two real fp32 tensors per distinct shape takes one step with random gradients. A storage
    held by one tensor's state is per-tensor (counted once per tensor of that shape); one held by several
    (the shared quantisation maps) is counted once. Each storage is rounded up to ``block`` bytes.
    Returns None when bitsandbytes cannot be used here (the engine would fall back to AdamW).
    """
    from guitrainer.engine.optim import build_optimizer

    counts = Counter(tuple(int(d) for d in s) for s in shapes)
    gen = torch.Generator().manual_seed(0)
    params = [
        torch.nn.Parameter(torch.randn(shape, generator=gen) * 0.02) for shape in counts for _ in range(2)
    ]
    if not params:
        return 0
    optimizer, used = build_optimizer(opt_cfg, [{"params": params}])
    if used != opt_cfg.name:
        return None
    for prm in params:
        prm.grad = torch.randn(prm.shape, generator=gen) * 1e-3
    optimizer.step()
    owners: dict[int, set[int]] = {}
    storages: dict[int, torch.UntypedStorage] = {}
    for i, prm in enumerate(params):
        for ptr, st in _state_storages(optimizer.state[prm]).items():
            owners.setdefault(ptr, set()).add(i)
            storages[ptr] = st
    total = 0
    for ptr, st in storages.items():
        nbytes = -(-st.nbytes() // block) * block
        (first, *others) = owners[ptr]
        if others:
            total += nbytes  # shared by the optimizer's tensors
        elif first % 2 == 0:  # the first of the two samples of its shape stands for every tensor of that shape
            total += nbytes * counts[tuple(params[first].shape)]
    return total


def measure_training_step(
    config: Any, *, method: str = "auto", block: int = CUDA_BLOCK, blocks: Iterable[int] | None = None
) -> MemoryMeasurement:
    """Peak memory of one training step for ``config`` (a TrainingConfig).

    Transformer families (Flux.1, SD 3.5) are measured through the family seam by :mod:`.family_step`; ``blocks``
    runs them at reduced depth (how many blocks each of the family's block lists keeps; None: the released model).

    Args:
        config: the exact config; family, resolution, batch, rank, targets, optimizer, precision,
            checkpointing and caching are honoured.
        method: "cuda" (real step on the GPU), "fake" (tracked fake tensors, no GPU), "cpu" (real CPU tensors
            tracked the same way: slow, for checking the fake simulation on small models) or "auto".
        block: allocation rounding of the fake / cpu tracker (512 like the CUDA allocator; 1 = raw bytes).
    """
    if getattr(config.precision, "base_weights", "auto") in ("int8", "nf4"):
        raise NotImplementedError(
            f"the memory check cannot build {config.precision.base_weights} frozen weights yet (bitsandbytes' "
            "layers do not run on the tracker's fake tensors): the bar's figure for them follows bitsandbytes' "
            "own layout, and a real run's peak is in its log"
        )
    if method == "auto":
        method = "cuda" if torch.cuda.is_available() else "fake"
    t0 = time.perf_counter()
    if facts(_family(config)).architecture == "transformer":
        from guitrainer.engine.memory import family_step

        depth = None if blocks is None else tuple(blocks)
        if method == "cuda":
            result = family_step.measure_cuda(config, blocks=depth)
        elif method in ("fake", "cpu"):
            result = family_step.measure(config, fake=method == "fake", block=block, blocks=depth)
        else:
            raise ValueError(f"method must be 'auto', 'cuda', 'fake' or 'cpu', not {method!r}")
    elif method == "cuda":
        result = _measure_cuda(config)
    elif method in ("fake", "cpu"):
        result = _measure_tracked(config, fake=method == "fake", block=block)
    else:
        raise ValueError(f"method must be 'auto', 'cuda', 'fake' or 'cpu', not {method!r}")
    result.seconds = time.perf_counter() - t0
    log.info("measured %s step: peak %s in %.1f s", method, format_bytes(result.peak), result.seconds)
    return result


@dataclass
class _Run:
    denoiser: torch.nn.Module
    vae: torch.nn.Module | None
    text_encoders: list[torch.nn.Module]
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scaler: Any = None  # fp16: the GradScaler (CUDA) or its stand-in on fake / CPU tensors


def _build(config: Any, emulate_autocast: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """Build every component on ``meta`` (no memory) and inject the engine's LoRA: ``[unet, vae | None, *text_encoders]``.

    With ``emulate_autocast``, checkpointed blocks recompute under :class:`CudaAutocastEmulation` (real
    autocast state is restored by torch.utils.checkpoint itself; a torch-function mode is not).
    """
    family = _family(config)
    p, net = config.precision, config.network
    wdtype = _DTYPES[p.training]
    # as the trainer on a GPU: SDXL's own VAE stays fp32 under fp16, an fp16-safe one (force_upcast false) does not
    upcasts = facts(family).precision.vae_upcast
    vae_dtype = torch.float32 if vae_needs_fp32(p.training, upcasts, not vae_fp16_safe(config), "cuda") else wdtype
    cfgs = component_configs(family)
    ckpt_kwargs: dict[str, Any] = {"use_reentrant": False}
    if emulate_autocast and p.training != "fp32":
        ckpt_kwargs["context_fn"] = lambda: (contextlib.nullcontext(), CudaAutocastEmulation(wdtype))
    unet = build_on_meta(family, "unet", wdtype)
    train_te = bool(net.train_text_encoder)
    tes: list[torch.nn.Module] = []
    if train_te or not p.cache_text_encoder_outputs:
        tes = [build_on_meta(family, part, wdtype) for part in ("text_encoder", "text_encoder_2") if part in cfgs]
    inject_engine_lora(unet, tes if train_te else [], net)  # as the trainer: inject, fp32 cast, then checkpointing
    if p.base_weights == "fp8":  # as the trainer: frozen Linear / Conv weights stored in float8
        for module in (unet, *tes):
            cast_layerwise(module, torch.float8_e4m3fn, wdtype, FP8_SKIP_PATTERNS)
    if p.gradient_checkpointing:
        unet.enable_gradient_checkpointing(functools.partial(torch.utils.checkpoint.checkpoint, **ckpt_kwargs))
        if train_te:
            for te in tes:
                te.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt_kwargs)
    unet.train()
    for te in tes:
        te.train(train_te)
    vae = None if p.cache_latents else build_on_meta(family, "vae", vae_dtype)
    from diffusers import DDPMScheduler

    info = {
        "family": family, "wdtype": wdtype, "vae_dtype": vae_dtype, "ucfg": cfgs["unet"],
        "scheduler": DDPMScheduler(num_train_timesteps=1000),
    }  # fmt: skip
    return [unet, vae, *tes], info


def _materialise(config: Any, modules: list[Any], device: str, real_8bit: bool) -> _Run:
    """``to_empty`` on ``device`` (fake when a FakeTensorMode is active) and make the optimizer."""
    for m in modules:
        if m is not None:
            m.to_empty(device=device)
    unet, vae, *tes = modules
    params = lora_parameters([unet, *tes])
    scaler: Any = None
    if config.precision.training == "fp16":
        scaler = torch.amp.GradScaler("cuda") if device == "cuda" else ScalerStandIn()
    return _Run(unet, vae, tes, params, make_optimizer(config.optimizer, params, real_8bit), scaler)


def _step(config: Any, run: _Run, info: dict[str, Any], device: str, autocast: Any) -> None:
    """One training step through the trainer's own parts (:mod:`guitrainer.engine.amp_step`): latents and text
    conditioning as the trainer makes them, then noise, UNet forward and loss, backward (scaled under fp16),
    unscale, clip, update."""
    b, res = config.schedule.batch_size, config.dataset.resolution
    ucfg, wdtype = info["ucfg"], info["wdtype"]
    if run.vae is not None:  # the trainer's uncached path: the frozen VAE, outside autocast, latents in wdtype
        with torch.no_grad():
            pixels = torch.randn(b, 3, res, res, device=device, dtype=info["vae_dtype"])
            latents = (run.vae.encode(pixels).latent_dist.sample() * 0.18215).to(wdtype)
            del pixels
    else:  # cached latents are stored in the compute dtype
        latents = torch.randn(b, 4, res // 8, res // 8, device=device, dtype=wdtype)
    with autocast:
        text, pooled = _text_conditioning(config, run, ucfg, b, device, wdtype)
        if ucfg.get("addition_embed_type") == "text_time" and pooled is None:
            n_pooled = ucfg["projection_class_embeddings_input_dim"] - 6 * ucfg["addition_time_embed_dim"]
            pooled = torch.randn(b, n_pooled, device=device, dtype=wdtype)
        added = added_conditioning(pooled, None, res, torch.device(device), text.dtype)
        drawn = amp_step.draw_noise(info["scheduler"], latents)
        loss = amp_step.prediction_loss(run.denoiser, info["scheduler"], "epsilon", latents, drawn, text, added)
        del drawn, text, pooled, added
        amp_step.backward(loss, run.scaler)
    del loss
    amp_step.finish_step(run.optimizer, run.params, run.scaler, config.schedule.max_grad_norm, foreach=True)


def _text_conditioning(
    config: Any, run: _Run, ucfg: dict[str, Any], b: int, device: str, wdtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(hidden states, pooled) as the trainer feeds the UNet: from the text encoders, or cached embeddings."""
    if not run.text_encoders:
        return torch.randn(b, 77, ucfg["cross_attention_dim"], device=device, dtype=wdtype), None
    ids = torch.zeros(b, 77, dtype=torch.long, device=device)
    with torch.set_grad_enabled(bool(config.network.train_text_encoder)):
        outs = [te(ids, output_hidden_states=True) for te in run.text_encoders]
    if len(outs) == 2:
        return torch.cat([outs[0].hidden_states[-2], outs[1].hidden_states[-2]], dim=-1), outs[1].text_embeds
    return outs[0].last_hidden_state, None


def _randomise(run: _Run) -> None:
    """to_empty leaves garbage; NaNs / infs would only change the numbers, not the allocations."""
    with torch.no_grad():
        for m in (run.denoiser, run.vae, *run.text_encoders):
            if m is not None:
                for prm in m.parameters():
                    prm.normal_(0.0, 0.02)


def _8bit_state(config: Any, params: list[torch.nn.Parameter], block: int) -> tuple[int, str, bool]:
    """(bytes, note, from the formula) of an 8-bit (or Prodigy / DAdaptAdam) optimizer's state: measured by a
    real step on CPU tensors if it can."""
    name = config.optimizer.name
    shapes = [tuple(prm.shape) for prm in params]
    measured = bnb_state_bytes(config.optimizer, shapes, block)
    if measured is not None:
        real, why = ("bitsandbytes", "bitsandbytes") if name.endswith("8bit") else (name, f"{name}'s step reads values")
        return measured, (
            f"{name} state ({format_bytes(measured)}) measured from a real {real} step on CPU tensors of the "
            f"LoRA's {len(set(shapes))} distinct shapes ({why}: it cannot run on fake tensors)"
        ), False
    analytic = network.optimizer_state_bytes(name, shapes)
    return analytic, f"{name} state ({format_bytes(analytic)}) from the estimator's formula: bitsandbytes unavailable", True


def _measure_tracked(config: Any, fake: bool, block: int) -> MemoryMeasurement:
    from torch._subclasses.fake_tensor import FakeTensorMode

    half = config.precision.training != "fp32"
    if fake:
        notes = ["fake tensors on CPU with CUDA autocast's casting policy emulated; SDPA saves O(tokens)"]
    else:
        notes = ["real CPU tensors (random weights), every storage tracked; CUDA autocast emulated"]
    tracker = StorageTracker(block)
    modules, info = _build(config, emulate_autocast=half)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    with fake_mode, FakeScalars() if fake else contextlib.nullcontext(), tracker:
        run = _materialise(config, modules, "cpu", real_8bit=False)
        del modules
        if not fake:
            _randomise(run)
        # parameters materialised before the tracker saw an op (to_empty runs under it; this is a safety net)
        for m in (run.denoiser, run.vae, *run.text_encoders):
            if m is not None:
                for prm in m.parameters():
                    tracker.track(prm)
        init_optimizer_state(run)
        state = sum(
            -(-t.untyped_storage().nbytes() // block) * block
            for s in run.optimizer.state.values()
            for t in s.values()
            if isinstance(t, torch.Tensor)  # moments and the 0-dim step counters
        )
        # the stored weights, before a forward casts any of them up (fp8 storage)
        frozen = param_bytes([run.denoiser, run.vae, *run.text_encoders], lora=False, block=block)
        lora = param_bytes([run.denoiser, *run.text_encoders], lora=True, block=block)
        tracker.reset_peak()
        static = tracker.live
        autocast = CudaAutocastEmulation(info["wdtype"]) if half else contextlib.nullcontext()
        _step(config, run, info, "cpu", autocast)
        peak = tracker.peak
    extra, analytic = 0, False
    if _state_measured_apart(config.optimizer.name):  # the step ran a stateless SGD: add the real state
        extra, note, analytic = _8bit_state(config, run.params, block)
        notes.append(note)
    return MemoryMeasurement(
        peak=peak + extra,
        static=static + extra,
        frozen_weights=frozen,
        lora_weights=lora,
        optimizer_state=state + extra,
        lora_parameter_count=sum(prm.numel() for prm in run.params),
        method="fake" if fake else "cpu",
        analytic_optimizer_state=analytic,
        notes=notes,
    )


def profile_cpu_step(config: Any) -> int:
    """Peak bytes allocated above the starting level during one real CPU training step, from ``torch.profiler``.

    The independent check of :class:`StorageTracker`: the same model, LoRA and step as ``method="cpu"`` (optimizer
    state initialised, gradients None), with no dispatch mode active; the allocator's own events
    (``profile_memory=True``) are replayed in time order. Comparable with ``measure_training_step(config,
    method="cpu", block=1).activations``. 8-bit optimizers run a stateless SGD here too. Slow for big models.
    """
    from torch.profiler import ProfilerActivity, profile

    half = config.precision.training != "fp32"
    modules, info = _build(config, emulate_autocast=half)
    run = _materialise(config, modules, "cpu", real_8bit=False)
    del modules
    _randomise(run)
    init_optimizer_state(run)
    autocast = CudaAutocastEmulation(info["wdtype"]) if half else contextlib.nullcontext()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _step(config, run, info, "cpu", autocast)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:  # nbytes() is positive for an allocation, negative for a free
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def _measure_cuda(config: Any) -> MemoryMeasurement:
    """Measure on the GPU the run would train on (``precision.gpu_index``; automatic: the current one)."""
    from guitrainer.core.device.hardware import choose_training_gpu

    wanted = int(config.precision.gpu_index)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if wanted >= 0 else []
    choice = choose_training_gpu(wanted, device_type="cuda", num_processes=1, gpu_names=names)
    with torch.cuda.device(choice.index if choice.index is not None else torch.cuda.current_device()):
        return _measure_cuda_here(config)


def _measure_cuda_here(config: Any) -> MemoryMeasurement:
    half = config.precision.training != "fp32"
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    modules, info = _build(config)
    run = _materialise(config, modules, "cuda", real_8bit=True)
    del modules
    _randomise(run)

    def autocast() -> Any:
        return torch.autocast("cuda", dtype=info["wdtype"]) if half else contextlib.nullcontext()

    _step(config, run, info, "cuda", autocast())  # warm-up: optimizer state, cuBLAS workspace, kernels
    torch.cuda.synchronize()
    static = torch.cuda.memory_allocated() - before
    storages: dict[int, torch.UntypedStorage] = {}
    for s in run.optimizer.state.values():
        storages.update(_state_storages(s))  # bitsandbytes' quantisation maps are shared: count them once
    state = sum(st.nbytes() for st in storages.values())
    torch.cuda.reset_peak_memory_stats()
    _step(config, run, info, "cuda", autocast())
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    reserved = torch.cuda.max_memory_reserved()
    result = MemoryMeasurement(
        peak=peak,
        static=static,
        frozen_weights=param_bytes([run.denoiser, run.vae, *run.text_encoders], lora=False),
        lora_weights=param_bytes([run.denoiser, *run.text_encoders], lora=True),
        optimizer_state=state,
        lora_parameter_count=sum(prm.numel() for prm in run.params),
        reserved=reserved,
        method="cuda",
        notes=[f"{torch.cuda.get_device_name()}: peak after a warm-up step"],
    )
    del run
    torch.cuda.empty_cache()
    return result
