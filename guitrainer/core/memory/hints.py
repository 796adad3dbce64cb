"""One-click fixes for a run that does not fit: config changes that lower the memory estimate, each re-estimated
on a changed copy, and offered only where the precision rules raise no new error for it on this device."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from guitrainer.base.units import MiB, format_bytes
from guitrainer.config import TrainingConfig
from guitrainer.config.precision_choices import choice_label
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.families.registry import facts
from guitrainer.core.memory.estimate import Device, estimate
from guitrainer.core.memory.offload import offload_saves_memory
from guitrainer.core.memory.specs import ModelSpec, spec_for
from guitrainer.core.precision.advisor import advise
from guitrainer.core.precision.lab import times
from guitrainer.core.precision.measurements import MeasurementStore, recommended_here

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hint:
    """A config change that lowers the estimate, and by how much."""

    label: str  # "Gradient checkpointing", "Batch 2 → 1"
    changes: dict[str, Any]  # {config path: new value}
    saving: int  # bytes

    @property
    def text(self) -> str:
        return f"{self.label} −{format_bytes(self.saving)}"


def _is_device_info(device: Device) -> bool:
    """A probed :class:`DeviceInfo` (as opposed to None or a bare ``total_memory`` holder)."""
    return isinstance(device, DeviceInfo)


def _half_precision(config: TrainingConfig, device: DeviceInfo, store: MeasurementStore | None) -> tuple[str, str]:
    """(precision, label) of the half format a memory hint offers: what "recommended here" says (a measurement of
    this device and model family, else the rules); where that is fp32 but the lab measured a half format, the
    faster of those, labelled with its measured cost ("fp16 AMP (measured 1.05x slower)"), so the hint never
    passes off what was measured slower as free."""
    rec = recommended_here(device, config, store)
    if rec is None or rec.training == "fp32" and rec.measured is None:
        return "fp32", ""
    if rec.training != "fp32":
        return rec.training, choice_label("precision.training", rec.training)
    m = rec.measured
    assert m is not None
    bw = config.precision.base_weights
    timed = [(m.seconds(t, bw), t) for t in ("fp16", "bf16")]
    timed = [(s, t) for s, t in timed if s is not None]
    best = m.seconds(m.training, m.base_weights)
    if not timed or not best:
        return "fp32", ""
    seconds, half = min(timed)
    return half, f"{choice_label('precision.training', half)} (measured {times(seconds / best)} slower)"


def _candidate_changes(config: TrainingConfig, spec: ModelSpec, device: Device,
                       store: MeasurementStore | None = None) -> list[tuple[str, dict[str, Any]]]:
    p, net, opt, s = config.precision, config.network, config.optimizer, config.schedule
    out: list[tuple[str, dict[str, Any]]] = []
    if not p.gradient_checkpointing:
        out.append(("Gradient checkpointing", {"precision.gradient_checkpointing": True}))
    if not p.cache_latents:
        out.append(("Cache latents", {"precision.cache_latents": True}))
    if not p.cache_text_encoder_outputs and not net.train_text_encoder and not config.dataset.shuffle_captions:
        out.append(("Cache text embeddings", {"precision.cache_text_encoder_outputs": True}))
    if net.train_text_encoder:
        out.append(("UNet only", {"network.train_text_encoder": False}))
    if opt.name in ("AdamW", "Adafactor"):
        out.append(("AdamW8bit", {"optimizer.name": "AdamW8bit"}))
    if p.training == "fp32":
        if _is_device_info(device):  # what the precision picker recommends for this device (measured or not)
            half, label = _half_precision(config, device, store)  # type: ignore[arg-type]
        else:
            half, label = "fp16", "fp16 AMP"  # device unknown: the smallest change that halves the weights
        if half != "fp32":
            out.append((label, {"precision.training": half}))
    if p.base_weights not in ("fp8", "int8", "nf4"):  # refused where fp8 cannot run (MPS, old torch): _errors
        out.append(("fp8 frozen weights", {"precision.base_weights": "fp8"}))
    if p.base_weights != "nf4" and not p.offload_blocks and net.type == "lora":  # bitsandbytes' 4-bit layers
        out.append(("nf4 frozen weights", {"precision.base_weights": "nf4"}))
    if s.batch_size > 1:
        b = max(1, s.batch_size // 2)
        out.append((f"Batch {s.batch_size} → {b}", {"schedule.batch_size": b}))
    if net.rank >= 64:
        out.append((f"Rank {net.rank} → {net.rank // 2}", {"network.rank": net.rank // 2, "network.alpha": net.alpha / 2}))
    kind = getattr(device, "kind", "cuda") if _is_device_info(device) else "cuda"
    if p.offload_blocks < 0.5 and spec.offload_blocks and offload_saves_memory(kind):  # slower: each block copied in
        out.append(("Half the blocks in RAM", {"precision.offload_blocks": 0.5, "precision.gradient_checkpointing": True}))
    native = facts(spec.family).native_resolution if spec.family != "demo" else None
    if native and config.dataset.resolution > native:
        out.append((f"Resolution {config.dataset.resolution} → {native}", {"dataset.resolution": native}))
    return out


def _errors(device: Device, config: TrainingConfig, store: MeasurementStore | None = None) -> set[str]:
    """The error-level precision advice for ``config`` on ``device`` (none without a probed device)."""
    if not _is_device_info(device):
        return set()
    return {a.message for a in advise(device, config, store) if a.level == "error"}


def hints(config: TrainingConfig, spec: ModelSpec | None = None, device: Device = None, minimum: int = 16 * MiB,
          store: MeasurementStore | None = None) -> list[Hint]:
    """Changes that lower the estimate, biggest saving first; each is re-estimated on a modified copy.

    With a probed ``DeviceInfo`` a change is offered only if the precision rules raise no new error
    for it on that device (no 8-bit optimizer without a usable bitsandbytes, no bf16 on a card without
    it), and the precision offered is the one the precision picker recommends there (a measurement of this device
    in ``store``, default the user's, outranks the rules).
    """
    if spec is None:
        spec = spec_for(config)
    base = estimate(config, spec, device).total
    known_errors = _errors(device, config, store)
    out: list[Hint] = []
    for label, changes in _candidate_changes(config, spec, device, store):
        changed = config.copy()
        try:
            for path, value in changes.items():
                changed.set(path, value)
        except ValueError as e:  # ConfigError: the change is not valid for this config
            log.debug("hint %s skipped: %s", label, e)
            continue
        blocked = _errors(device, changed, store) - known_errors
        if blocked:
            log.debug("hint %s skipped on this device: %s", label, min(blocked))
            continue
        saving = base - estimate(changed, spec, device).total
        if saving >= minimum:
            out.append(Hint(label, changes, saving))
    out.sort(key=lambda h: -h.saving)
    return out
