"""Numerics monitor: how close each block of the UNet and text encoder runs to its dtype's limit, how much
of the LoRA gradients underflows in fp16, and where an inf/NaN was born.

Nothing is installed on ordinary steps. Three entry points, each used on few steps:

* :meth:`NumericsMonitor.watch` (a context manager) on a **sampled** step (the first, then every
  ``every`` steps; :func:`guitrainer.core.precision.numerics.is_sampled`): forward hooks on every module record the
  largest absolute output as a 0-dim tensor (no host sync per module); they are removed when the block
  exits. :meth:`NumericsMonitor.measure_gradients` then counts the LoRA gradients that are zero or
  subnormal in fp16 after loss scaling, and :meth:`NumericsMonitor.finish` turns it all into a
  :class:`~guitrainer.core.precision.numerics.NumericsSnapshot` (one host sync).
* :meth:`NumericsMonitor.diagnose` on a **skipped** step (the GradScaler found inf/NaN gradients) or a NaN
  loss: the step's forward and backward are replayed from the random state captured before it
  (:class:`RngState`), with hooks that stop at the first non-finite module output (forward order) or, when
  every output is finite, note the first non-finite gradient of a module's output (backward order). The
  first module's output is recomputed in fp32 to say by how much it overflowed. The random state after
  the step is put back, so monitoring never changes training.

The fp32 recompute runs the module itself with its weights swapped for fp32 copies for that one call
(no ``copy.deepcopy``, which would copy every hook and whatever a bound-method hook holds).
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from guitrainer.core.precision.numerics import (
    DEFAULT_EVERY,
    DTYPE_MAX,
    FP16_MAX,
    FP16_TINY,
    NonFinite,
    NumericsSnapshot,
    TensorFinding,
    block_of,
    is_sampled,
)

#: modules never called themselves (their children are): no hook
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)
#: the fp32 recompute of the first non-finite module is skipped for modules with more values than this
_RECOMPUTE_MAX_PARAMS = 50_000_000


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The floating tensors of a module's output: a tensor, a tuple/list, or a dict-like (ModelOutput)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.numel():
            yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel():
                yield v
    elif isinstance(value, Mapping):
        for v in value.values():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel():
                yield v


def _all_finite(values: Any) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in _tensors(values))


def _kind(t: torch.Tensor) -> str:
    return "nan" if bool(torch.isnan(t).any()) else "inf"


@dataclass
class RngState:
    """Every random stream a training step draws from (torch CPU and CUDA, Python, numpy), to replay a step."""

    cpu: torch.Tensor
    cuda: list[torch.Tensor]
    python: Any
    numpy: Any

    @classmethod
    def capture(cls) -> RngState:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        return cls(torch.get_rng_state(), cuda, random.getstate(), np.random.get_state())

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        np.random.set_state(self.numpy)


class _Found(Exception):
    """Raised from a forward hook to end a diagnosis replay at the first non-finite output."""


class NumericsMonitor:
    """Per-block headroom and gradient underflow on sampled steps; the birthplace of an inf/NaN on demand.

    Args:
        models: name -> module, e.g. ``{"unet": unet, "te": text_encoder}`` (the unwrapped modules, not DDP).
        lora_params: name -> trainable LoRA parameter (for the underflow share and the last-resort search).
        precision: the compute dtype, "fp16", "bf16" or "fp32".
        every: sample every this many steps (0: only the diagnoses of skipped steps and NaN losses).
    """

    def __init__(
        self,
        models: Mapping[str, nn.Module],
        lora_params: Mapping[str, torch.Tensor],
        precision: str,
        every: int = DEFAULT_EVERY,
    ):
        self.models = dict(models)
        self.lora_params = dict(lora_params)
        self.precision = precision
        self.every = int(every)
        self.limit = DTYPE_MAX[precision]
        self._handles: list[Any] = []
        self._names: list[str] = []  # "<model>.<path>" of each hooked module, in registration order
        self._blocks: list[str] = []  # the block of each hooked module
        self._peaks: list[tuple[int, torch.Tensor]] = []  # (module index, 0-dim max |output|) in call order
        self._underflow: float | None = None
        self._step = 0
        #: steps on which hooks were installed (:meth:`watch` and :meth:`diagnose`), for tests and the log
        self.installed_steps: list[int] = []
        self.last: NumericsSnapshot | None = None

    # ------------------------------------------------------------------ sampling
    def is_sampled(self, step: int) -> bool:
        return is_sampled(step, self.every)

    @property
    def hooks_installed(self) -> int:
        """Hook handles alive right now (0 outside :meth:`watch` and :meth:`diagnose`)."""
        return len(self._handles)

    def _modules(self) -> Iterator[tuple[int, str, nn.Module]]:
        self._names, self._blocks = [], []
        for model_name, model in self.models.items():
            for path, module in model.named_modules():
                if isinstance(module, _CONTAINERS):
                    continue
                self._names.append(f"{model_name}.{path}" if path else model_name)
                self._blocks.append(block_of(model_name, path))
                yield len(self._names) - 1, path, module

    def _remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    @contextlib.contextmanager
    def watch(self, step: int) -> Iterator[None]:
        """Record every module's largest |output| during the block (the step's forward and backward)."""
        self._step = step
        self._peaks = []
        self._underflow = None
        self.installed_steps.append(step)
        peaks = self._peaks

        def make(index: int) -> Callable[..., None]:
            def hook(_module: nn.Module, _args: Any, output: Any) -> None:
                for t in _tensors(output):
                    peaks.append((index, t.detach().abs().amax()))

            return hook

        try:
            for index, _path, module in self._modules():
                self._handles.append(module.register_forward_hook(make(index)))
            yield
        finally:
            self._remove_hooks()

    def measure_gradients(self, scale: float = 1.0) -> float | None:
        """Share of the LoRA gradients' values that are zero or subnormal in fp16 after loss scaling.

        Call after the backward passes and before ``zero_grad``: with gradients still scaled, ``scale=1``;
        after ``GradScaler.unscale_``, the scale of the step. Tensors whose gradient is zero everywhere are
        left out (``lora_A`` while ``lora_B`` is still all zero at the start: nothing underflowed there).
        Only fp16 runs have a share (None otherwise).
        """
        if self.precision != "fp16":
            return None
        threshold = FP16_TINY / float(scale)
        grads = [p.grad.detach() for p in self.lora_params.values() if p.grad is not None]
        if not grads:
            self._underflow = None
            return None
        # two small tensors to the host, not two syncs per parameter
        nonzero = torch.stack([torch.count_nonzero(g) for g in grads]).cpu().tolist()
        small = torch.stack([torch.count_nonzero(g.abs() < threshold) for g in grads]).cpu().tolist()
        kept = [i for i, n in enumerate(nonzero) if n]
        total = sum(grads[i].numel() for i in kept)
        self._underflow = sum(small[i] for i in kept) / total if total else None
        return self._underflow

    def finish(self, nonfinite: NonFinite | None = None) -> NumericsSnapshot:
        """The sampled step's per-block headroom (dtype max / largest |activation|), in forward order."""
        values: list[float] = []
        by_device: dict[torch.device, list[int]] = {}
        for k, (_, v) in enumerate(self._peaks):
            by_device.setdefault(v.device, []).append(k)
        if self._peaks:
            values = [0.0] * len(self._peaks)
            for positions in by_device.values():  # one transfer per device (one device, but for CPU-parked parts)
                got = torch.stack([self._peaks[k][1].float() for k in positions]).cpu().tolist()
                for k, v in zip(positions, got):
                    values[k] = v
        block_peak: dict[str, float] = {}
        for (index, _), v in zip(self._peaks, values):
            block = self._blocks[index]
            v = math.inf if math.isnan(v) else v
            block_peak[block] = max(block_peak.get(block, 0.0), v)
        headroom = tuple((b, self.limit / v if v > 0 else math.inf) for b, v in block_peak.items())
        self._peaks = []
        self.last = NumericsSnapshot(self._step, self.precision, headroom, self._underflow, nonfinite)
        return self.last

    # ------------------------------------------------------------------ diagnosis
    def diagnose(
        self, step: int, replay: Callable[[], Any], before: RngState, *, scale: float | None = None
    ) -> NonFinite | None:
        """Replay the step (``replay()`` runs its forward and backward passes) from the random state
        ``before`` it, and return where the first inf/NaN appeared (None: nothing non-finite this time).

        The random state of the moment of the call is restored afterwards. The replay leaves gradients in
        the LoRA parameters: the caller zeroes them (the step was skipped, or the run stops).
        """
        after = RngState.capture()
        before.restore()
        self.installed_steps.append(step)
        finder = _FirstNonFinite(self, scale)
        try:
            for index, _path, module in self._modules():
                finder.attach(module, self._names[index])
            with contextlib.suppress(_Found):
                replay()
        finally:
            self._remove_hooks()
            after.restore()
        found = finder.found
        if found is None:
            found = self._nonfinite_parameter_grad(scale)
        return found

    def _nonfinite_parameter_grad(self, scale: float | None) -> NonFinite | None:
        for name, p in self.lora_params.items():
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                return NonFinite(name.removesuffix(".weight"), _kind(p.grad), "gradient", self.precision, scale=scale)
        return None


class _FirstNonFinite:
    """The hooks of one diagnosis replay: they stop at the first non-finite output (forward order) and
    note the first non-finite gradient of a module output (backward order)."""

    def __init__(self, monitor: NumericsMonitor, scale: float | None):
        self.monitor = monitor
        self.scale = scale
        self.found: NonFinite | None = None
        self.recomputing = False

    def attach(self, module: nn.Module, name: str) -> None:
        self.monitor._handles.append(module.register_forward_hook(self._forward_hook(name), with_kwargs=True))

    def _forward_hook(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            if self.recomputing or self.found is not None:
                return
            if _all_finite(output):
                for t in _tensors(output):
                    if t.requires_grad:
                        t.register_hook(self._grad_hook(name))
                return
            bad = next(t for t in _tensors(output) if not bool(torch.isfinite(t).all()))
            inside = ""
            inputs_finite = _all_finite(args) and _all_finite(dict(kwargs or {}))
            value = self._recompute(module, args, kwargs) if inputs_finite else None
            if not inputs_finite:
                inside = self._parent_of(name)
            self.found = NonFinite(name, _kind(bad), "activation", self.monitor.precision, value, inside, self.scale)
            raise _Found

        return hook

    def _grad_hook(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if self.found is None and not bool(torch.isfinite(grad).all()):
                self.found = NonFinite(name, _kind(grad), "gradient", self.monitor.precision, scale=self.scale)

        return hook

    def _parent_of(self, name: str) -> str:
        """The nearest enclosing module that computes (not a ModuleList): where a value born between
        children came from."""
        names = set(self.monitor._names)
        parts = name.split(".")
        for k in range(len(parts) - 1, 0, -1):
            candidate = ".".join(parts[:k])
            if candidate in names:
                return candidate
        return parts[0]

    def _recompute(self, module: nn.Module, args: Any, kwargs: Any) -> float | None:
        """The module's largest |output| in fp32 from the same inputs (None if too big, failing or non-finite).

        The module itself runs again (its own hooks too, ours idle), its floating weights swapped for fp32
        copies for the call and the very same tensors put back after: exact, and no copy of the module.
        """
        tensors = [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()]
        if sum(t.numel() for t in tensors) > _RECOMPUTE_MAX_PARAMS:
            return None

        def up(v: Any) -> Any:
            return v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v

        originals = [t.data for t in tensors]
        self.recomputing = True
        try:
            device = tensors[0].device.type if tensors else "cpu"
            with torch.no_grad(), torch.autocast(device, enabled=False):
                for t in tensors:
                    t.data = t.data.float()
                out = module(*[up(a) for a in args], **{k: up(v) for k, v in dict(kwargs or {}).items()})
            peaks = [float(t.abs().amax()) for t in _tensors(out)]
        except Exception:  # noqa: BLE001 -- a module that cannot run alone: the message says no number
            return None
        finally:
            for t, data in zip(tensors, originals):
                t.data = data
            self.recomputing = False
        peak = max(peaks, default=math.nan)
        return peak if math.isfinite(peak) else None


@dataclass(frozen=True)
class StepNumerics:
    """What one optimizer step's monitoring found, ready for :class:`~guitrainer.core.events.StepMetrics`."""

    headroom: tuple[tuple[str, float], ...] = ()
    grad_underflow: float | None = None
    nonfinite: NonFinite | None = None
    message: str = ""

    def metrics_fields(self) -> dict[str, Any]:
        return {
            "headroom": self.headroom,
            "grad_underflow": self.grad_underflow,
            "nonfinite_module": self.nonfinite.module if self.nonfinite is not None else None,
            "numerics_message": self.message,
        }


class StepWatch:
    """The training loop's side of the monitor, one step at a time::

        with watch.begin(step):                 # random state kept; hooks only on a sampled step
            ...forward and backward passes...
        watch.gradients()                       # before unscale_ (gradients still scaled)
        ...unscale, clip, scaler.step / update...
        found = watch.end(skipped=..., nan_loss=..., replay=..., scale=before, scale_after=after)

    ``replay()`` must run the step's forward and backward passes again with the loss multiplied by the
    step's scale ``before`` (not the lowered one): the diagnosis of a skipped step or a NaN loss.
    """

    def __init__(self, monitor: NumericsMonitor):
        self.monitor = monitor
        self.step = 0
        self.sampled = False
        self._rng: RngState | None = None

    def begin(self, step: int) -> contextlib.AbstractContextManager[Any]:
        self.step = step
        self._rng = RngState.capture()
        self.sampled = self.monitor.is_sampled(step)
        return self.monitor.watch(step) if self.sampled else contextlib.nullcontext()

    def gradients(self, scale: float = 1.0) -> None:
        if self.sampled:
            self.monitor.measure_gradients(scale)

    def end(
        self,
        *,
        skipped: bool,
        nan_loss: bool = False,
        replay: Callable[[], Any] | None = None,
        scale: float | None = None,
        scale_after: float | None = None,
    ) -> StepNumerics:
        from guitrainer.core.precision.numerics import skip_message

        found = None
        message = ""
        if (skipped or nan_loss) and replay is not None and self._rng is not None:
            found = self.monitor.diagnose(self.step, replay, self._rng, scale=scale)
            if skipped:
                message = skip_message(self.step, found, scale_after)
            elif found is not None:
                message = f"step {self.step}: loss is NaN; {found.describe()}"
        self._rng = None
        if not self.sampled:
            return StepNumerics(nonfinite=found, message=message)
        snap = self.monitor.finish(found)
        return StepNumerics(snap.headroom, snap.grad_underflow, found, message)

def monitor_for(session: Any) -> NumericsMonitor:
    """The numerics monitor of a run (:class:`~guitrainer.engine.session.Session`): the denoiser, the text
    encoders and, when it computes in the training dtype, the VAE (a VAE kept in fp32 under fp16 has no
    fp16 limit to measure against). Unwrapped modules: hooks on DDP's inner model fire the same."""
    from guitrainer.core.families.registry import facts

    m = session.model
    models: dict[str, nn.Module] = {facts(m.family).architecture: m.denoiser}  # "unet" or "transformer"
    tes = list(m.text_encoders)
    for i, te in enumerate(tes):
        models["te" if len(tes) == 1 else f"te{i + 1}"] = te
    vae_dtype = next((p.dtype for p in m.vae.parameters()), None) if m.vae is not None else None
    if vae_dtype == session.dtype:
        models["vae"] = m.vae
    params = {f"{k}.{n}": p for k, mod in models.items() for n, p in mod.named_parameters() if p.requires_grad}
    return NumericsMonitor(models, params, session.precision, every=session.config.precision.numerics_every)


# --------------------------------------------------------------------------- fp16 save check


def fp16_findings(state_dict: Mapping[str, torch.Tensor]) -> tuple[TensorFinding, ...]:
    """Per floating tensor: values over ±65,504, non-zero values that become 0, values that become subnormal."""
    out: list[TensorFinding] = []
    for name, t in state_dict.items():
        if not t.is_floating_point() or t.numel() == 0:
            continue
        v = t.detach().float()
        h = v.to(torch.float16)
        nonzero = int(torch.count_nonzero(v))
        out.append(
            TensorFinding(
                name=name,
                values=v.numel(),
                peak=float(v.abs().max()),
                over_max=int(torch.count_nonzero(~(v.abs() <= FP16_MAX))),
                to_zero=int(torch.count_nonzero((v != 0) & (h == 0))),
                subnormal=int(torch.count_nonzero((h != 0) & (h.abs() < FP16_TINY))),
                nonzero=nonzero,
            )
        )
    return tuple(out)
