"""Fit to this card: the settings that make a run fit a GPU's memory with the least loss of speed, then of
quality, chosen from the estimator — never by trial and out-of-memory errors.

The settings Fit may change are the memory savers (:mod:`guitrainer.core.memory.fit_costs` says what each costs
and why): gradient checkpointing, latent and text-embedding caching, 8-bit AdamW, the frozen weights' format
(fp8 / int8 / nf4), the share of blocks kept in system RAM, the batch size (halved with twice the gradient
accumulation, so the effective batch stays), and a half training precision where the device is recommended one.
What the LoRA is (rank, targets, resolution, the text encoder trained or not) is the user's and is never changed.

Every combination is costed; they are tried fastest first (then by quality cost, then by fewest changes), and the
first one whose estimate fits, whose config is valid, that raises no new error-level precision advice on the
device and whose system-RAM estimate fits this computer (when known) is the choice. So no faster combination
fits. The next ones that fit and differ in what they cost are alternatives the precision lab can measure.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from guitrainer.base.units import format_bytes
from guitrainer.config import TrainingConfig, field_info
from guitrainer.config.coerce import field_choices
from guitrainer.config.precision_choices import choice_label
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.memory import fit_costs as C
from guitrainer.core.memory.estimate import VramBreakdown, device_kind, estimate
from guitrainer.core.memory.offload import offload_saves_memory
from guitrainer.core.memory.specs import ModelSpec, spec_for

log = logging.getLogger(__name__)

#: the shares of blocks in system RAM Fit tries (where moving blocks frees GPU memory)
OFFLOAD_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
#: alternatives kept for the precision lab beside the choice
ALTERNATIVES = 2


@dataclass(frozen=True)
class Card:
    """A GPU known by its memory only (a card chosen from a list, for planning): a CUDA card of that size."""

    total_memory: int


@dataclass(frozen=True)
class Change:
    """One setting Fit changes: its path, label, the value now and the value chosen, and what it costs."""

    path: str
    before: Any
    after: Any
    why: str = ""

    @property
    def label(self) -> str:
        return str(field_info(self.path).metadata.get("label", self.path))

    def shown(self, value: Any) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        if self.path == "precision.offload_blocks":
            return f"{float(value):.0%}"
        return choice_label(self.path, value)

    @property
    def text(self) -> str:
        return f"{self.label}: {self.shown(self.before)} → {self.shown(self.after)}"


@dataclass(frozen=True)
class FitOption:
    """One combination of settings: what it changes, its estimate, its step-time factor and quality cost."""

    changes: tuple[Change, ...]
    estimate: VramBreakdown
    slower: float
    quality: float
    config: TrainingConfig = field(compare=False, repr=False)

    @property
    def total(self) -> int:
        return self.estimate.total


@dataclass(frozen=True)
class FitResult:
    """What Fit chose for ``budget`` bytes: ``best`` (None: nothing fits, ``smallest`` then says how close the
    least memory came), the estimate before, the alternatives for the lab, and notes."""

    budget: int
    before: VramBreakdown
    best: FitOption | None
    alternatives: tuple[FitOption, ...] = ()
    smallest: FitOption | None = None
    notes: tuple[str, ...] = ()
    #: where the card's memory is not what stops it: the fastest option that fits the card, and the system RAM it
    #: needs (over this computer's ``machine_ram``)
    ram_limited: tuple[FitOption, int, int] | None = None

    @property
    def fits(self) -> bool:
        return self.best is not None

    @property
    def summary(self) -> str:
        """One sentence: what fits, by how much it changes the estimate, and the cost."""
        budget = format_bytes(self.budget)
        if self.best is None and self.ram_limited is not None:
            option, need, have = self.ram_limited
            return (f"Settings that fit {budget} exist ({format_bytes(option.total)} estimated), but they need "
                    f"{format_bytes(need)} of system RAM and this computer has {format_bytes(have)}; no memory saver "
                    "lowers that enough (most of it is the base model while it loads): train on a computer with "
                    "more RAM. The settings are shown to plan with.")
        if self.best is None:
            least = f" (the least found: {format_bytes(self.smallest.total)})" if self.smallest else ""
            return (f"Nothing fits {budget}{least} with the savers Fit may change: lower the resolution or the rank, "
                    "or train on a card with more memory.")
        if not self.best.changes:
            return f"Already fits {budget}: {format_bytes(self.before.total)} estimated, nothing to change."
        slower = (f", about {self.best.slower:.2f}× the step time without memory savers" if self.best.slower > 1.001
                  else "")
        return (f"Fits {budget} with {len(self.best.changes)} change{'s' if len(self.best.changes) != 1 else ''}: "
                f"{format_bytes(self.before.total)} → {format_bytes(self.best.total)} estimated{slower}.")


@dataclass(frozen=True)
class _Level:
    """One value of one knob: the settings it sets and its cost."""

    values: tuple[tuple[str, Any], ...]
    cost: C.Cost


def card_budget(device: DeviceInfo) -> tuple[int | None, str]:
    """The memory a run on ``device``'s selected GPU may use: what is free now (other programs, the desktop, hold
    the rest), else its total; and a note saying which. None where the device has no GPU."""
    gpu = device.gpu
    if gpu is None:
        return None, "no GPU on this computer: choose a card to plan for"
    if gpu.free_memory:
        used = gpu.total_memory - gpu.free_memory
        return int(gpu.free_memory), (f"{format_bytes(gpu.free_memory)} free of {format_bytes(gpu.total_memory)} "
                                      f"now ({format_bytes(used)} in use by other programs)")
    return int(gpu.total_memory), f"{format_bytes(gpu.total_memory)} (how much is free could not be read)"


def fit(
    config: TrainingConfig,
    budget: int,
    device: DeviceInfo | None = None,
    *,
    spec: ModelSpec | None = None,
    machine_ram: int | None = None,
    images: int | None = None,
) -> FitResult:
    """The fastest settings for ``config`` whose estimate fits ``budget`` bytes.

    Args:
        config: the settings as the user has them (not changed).
        budget: the bytes the run may use on the GPU (:func:`card_budget` for this card, or a card's size).
        device: the probed machine, when planning for its own GPU: its precision rules apply (no nf4 where
            bitsandbytes has no kernels, no bf16 where the card lacks it). None: a CUDA card of ``budget`` bytes.
        spec: the base model's spec (default: the config's).
        machine_ram: this computer's RAM in bytes: combinations whose system-RAM peak is over it are left out.
        images: training and class images, for the RAM estimate's caches.
    """
    if spec is None:
        spec = spec_for(config)
    target = device if device is not None and device.gpu is not None else Card(int(budget))
    before = estimate(config, spec, target)
    known_errors = _config_errors(config) | _device_errors(device, config)
    options = sorted(_combinations(config, spec, target, device), key=_order)
    chosen: list[FitOption] = []
    smallest: FitOption | None = None
    ram_limited: tuple[FitOption, int, int] | None = None
    for option in options:
        if chosen and len(chosen) > ALTERNATIVES:
            break
        est = estimate(option.config, spec, target)
        option = FitOption(option.changes, est, option.slower, option.quality, option.config)
        if est.total > budget and (chosen or smallest is not None and est.total >= smallest.total):
            continue  # neither a choice nor the least memory so far
        if not _allowed(option, known_errors, device):
            continue
        if est.total > budget:
            smallest = option
            continue
        need = _ram_need(option.config, spec, target, machine_ram, images) if machine_ram else None
        if machine_ram and need is not None and need > machine_ram:
            if ram_limited is None:
                ram_limited = (option, need, machine_ram)
            continue
        if chosen and not _differs(option, chosen):
            continue
        chosen.append(option)
    notes = tuple(before.notes)
    if not chosen:
        return FitResult(int(budget), before, None, (), smallest, notes, ram_limited)
    return FitResult(int(budget), before, chosen[0], tuple(chosen[1:]), None, notes)


def apply(config: TrainingConfig, option: FitOption) -> TrainingConfig:
    """A copy of ``config`` with ``option``'s changes made."""
    out = config.copy()
    for change in option.changes:
        out.set(change.path, change.after)
    return out


# --------------------------------------------------------------------------- the combinations


def knobs(config: TrainingConfig, spec: ModelSpec, target: Any, device: DeviceInfo | None) -> list[list[_Level]]:
    """Each saver's values Fit may choose for ``config``, its current value first. A saver the user has on that
    costs nothing (a cache, 8-bit AdamW) is not turned off; one that costs time or quality may be."""
    p, opt, s, net, d = config.precision, config.optimizer, config.schedule, config.network, config.dataset
    out: list[list[_Level]] = [
        [_Level((("precision.gradient_checkpointing", False),), C.Cost(1.0, 0.0, "")),
         _Level((("precision.gradient_checkpointing", True),), C.CHECKPOINTING)],
        _keep_or(("precision.cache_latents", True), p.cache_latents, C.CACHE_LATENTS),
    ]
    text_cache_allowed = not net.train_text_encoder and not d.shuffle_captions
    out.append(_keep_or(("precision.cache_text_encoder_outputs", True), p.cache_text_encoder_outputs or not
                        text_cache_allowed, C.CACHE_TEXT))
    out.append(_keep_or(("optimizer.name", "AdamW8bit"), opt.name != "AdamW", C.ADAMW_8BIT))
    formats = field_choices(field_info("precision.base_weights")) or (p.base_weights,)
    out.append([_Level((("precision.base_weights", f),), C.BASE_WEIGHTS.get(f, C.Cost(1.0, 0.0, ""))) for f in formats])
    if spec.offload_blocks and offload_saves_memory(device_kind(target)):
        shares = sorted({*OFFLOAD_SHARES, float(p.offload_blocks)})
        out.append([_Level((("precision.offload_blocks", share),), C.Cost(1.0, 0.0, C.OFFLOAD_WHY if share else ""))
                    for share in shares])
    out.append(_batches(s.batch_size, s.gradient_accumulation))
    half = _half_precision(config, device)
    if p.training == "fp32" and half:
        out.append([_Level((("precision.training", "fp32"),), C.Cost(1.0, 0.0, "")),
                    _Level((("precision.training", half),), C.HALF_PRECISION)])
    return out


def _keep_or(value: tuple[str, Any], kept: bool, cost: C.Cost) -> list[_Level]:
    """The saver as it is (when ``kept``: on already, or not allowed), else off and on."""
    path, on = value
    if kept:
        return [_Level(((path, None),), C.Cost(1.0, 0.0, ""))]  # None: left as the config has it
    return [_Level(((path, None),), C.Cost(1.0, 0.0, "")), _Level(((path, on),), cost)]


def _batches(batch: int, accumulation: int) -> list[_Level]:
    """The batch as it is, then halved down to 1, each with the accumulation that keeps the effective batch."""
    out = [_Level((("schedule.batch_size", batch), ("schedule.gradient_accumulation", accumulation)),
                  C.Cost(1.0, 0.0, ""))]
    b, halvings = batch, 0
    while b > 1:
        b, halvings = max(1, b // 2), halvings + 1
        factor = -(-batch // b)  # keeps batch × accumulation at least the user's
        out.append(_Level((("schedule.batch_size", b), ("schedule.gradient_accumulation", accumulation * factor)),
                          C.Cost(C.BATCH_HALVED.slower ** halvings, 0.0, C.BATCH_HALVED.why)))
    return out


def _half_precision(config: TrainingConfig, device: DeviceInfo | None) -> str | None:
    """The half precision the device is recommended (a measurement outranks the rules); bf16 on a card known by
    its size only; None where the device is recommended fp32."""
    if device is None:
        return "bf16"
    from guitrainer.core.precision.measurements import recommended_here

    rec = recommended_here(device, config)
    return rec.training if rec is not None and rec.training != "fp32" else None


def _combinations(config: TrainingConfig, spec: ModelSpec, target: Any, device: DeviceInfo | None) -> Iterable[FitOption]:
    """Every combination of the knobs' values, costed (not yet estimated)."""
    for levels in itertools.product(*knobs(config, spec, target, device)):
        changed = config.copy()
        changes: list[Change] = []
        slower, quality = 1.0, 0.0
        ok = True
        for level in levels:
            slower *= level.cost.slower
            quality += level.cost.quality
            for path, value in level.values:
                if value is None:
                    continue
                if changed.get(path) != value:
                    try:
                        changed.set(path, value)
                    except ValueError:
                        ok = False
                        break
                    # a level without a cost of its own undoes a saver the config had: the card does not need it
                    why = level.cost.why or "not needed to fit this card, and faster without"
                    changes.append(Change(path, config.get(path), value, why))
        if not ok:
            continue
        p = changed.precision
        if p.offload_blocks > 0 and not p.gradient_checkpointing:
            continue  # blocks in RAM need checkpointing (the engine refuses them without)
        slower *= C.offload_slower(p.offload_blocks, _stored_bytes(changed)) if p.offload_blocks else 1.0
        yield FitOption(tuple(changes), VramBreakdown((), spec.family), slower, quality, changed)


def _stored_bytes(config: TrainingConfig) -> float:
    """Bytes per frozen weight as stored (what crosses the bus when a block is copied in)."""
    fmt = config.precision.base_weights
    if fmt in ("fp8", "int8"):
        return 1.0
    if fmt == "nf4":
        return 0.52
    return 4.0 if config.precision.training == "fp32" else 2.0



def _order(option: FitOption) -> tuple[float, float, int]:
    """Fastest first, then the smallest quality cost, then the fewest changes."""
    return (round(option.slower, 6), round(option.quality, 6), len(option.changes))


def _differs(option: FitOption, chosen: Sequence[FitOption]) -> bool:
    """An alternative worth measuring beside the earlier picks: other costly settings (what the lab would time)."""
    costly = ("precision.gradient_checkpointing", "precision.base_weights", "precision.offload_blocks",
              "schedule.batch_size", "precision.training")

    def key(o: FitOption) -> tuple[Any, ...]:
        return tuple(o.config.get(path) for path in costly)

    return all(key(option) != key(c) for c in chosen)


# --------------------------------------------------------------------------- what may not be chosen


def _config_errors(config: TrainingConfig) -> set[str]:
    return {str(e) for e in config.errors()}


def _device_errors(device: DeviceInfo | None, config: TrainingConfig) -> set[str]:
    """Error-level precision advice for ``config`` on ``device`` (none for a card known by its size)."""
    if device is None:
        return set()
    from guitrainer.core.precision.advisor import advise

    return {a.message for a in advise(device, config) if a.level == "error"}


def _allowed(option: FitOption, known: set[str], device: DeviceInfo | None) -> bool:
    """No config error and no error-level advice that the user's own settings do not have already."""
    new = (_config_errors(option.config) | _device_errors(device, option.config)) - known
    if new:
        log.debug("fit: %s left out: %s", [c.text for c in option.changes], min(new))
    return not new


def _ram_need(config: TrainingConfig, spec: ModelSpec, target: Any, machine_ram: int | None,
              images: int | None) -> int | None:
    """The run's system-RAM peak by the estimator (None where it cannot be estimated: not a reason to refuse)."""
    from guitrainer.core.memory.system_ram import estimate_ram

    try:
        return int(estimate_ram(config, spec, target, images=images, machine_total=machine_ram).peak)
    except Exception:  # noqa: BLE001 - an estimate must not stop the choice
        log.exception("system RAM estimate failed in fit")
        return None
