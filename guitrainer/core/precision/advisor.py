"""The precision advice: every rule applied to a config on a device, most severe first (DESIGN.md §5).

``advise(device, config)`` turns device facts (:class:`guitrainer.core.device.hardware.DeviceInfo`) and the
current :class:`~guitrainer.config.TrainingConfig` into a list of :class:`Advice`: a level, a sentence an
artist understands, and a suggested change (config path -> value) that the UI applies with one click. Where the
precision lab measured this device and model family, the measurement outranks the rules
(:func:`guitrainer.core.precision.measurements.follow_measurement`): every caller (the picker, the start check's
log lines, ``--check``, the VRAM hints) gets advice that agrees with it.

Pure Python: no torch, no Qt. :mod:`guitrainer.core.precision.advice` holds the Advice type;
:mod:`guitrainer.config.precision_choices` the choices and their names; :mod:`guitrainer.core.precision.rules`
the rules, one function per fact with its source; :mod:`guitrainer.core.device.gpu_traits` the per-GPU facts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from guitrainer.base.constants import FP16_MAX
from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.precision import offload_rules
from guitrainer.core.precision.advice import LEVELS, Advice, Level, worst
from guitrainer.core.precision.measurements import (
    MeasurementStore,
    follow_measurement,
    measured_recommendation,
)
from guitrainer.core.precision.rules import RULES, training_precision_advice

log = logging.getLogger(__name__)


def training_choice_level(device: DeviceInfo | None, value: str) -> Level | None:
    """The worst level the training-precision rules alone give ``value`` on ``device`` (None: no objection); the
    picker's notes, which also follow a measurement, come from :mod:`guitrainer.core.precision.choice_notes`."""
    if device is None:
        return None
    return worst(training_precision_advice(device, value))


def _severity(a: Advice) -> int:
    return LEVELS.index(a.level)


def advise(device: DeviceInfo | None, config: TrainingConfig, store: MeasurementStore | None = None) -> list[Advice]:
    """Every piece of advice for ``config`` on ``device``, most severe first ([] while the device is unknown).

    ``store`` holds the precision lab's measurements (default: the user's, :class:`MeasurementStore`); one for this
    device and model family outranks the rules' speed advice.
    """
    if device is None:
        return []
    device = device.for_gpu_index(config.precision.gpu_index)  # the GPU chosen on the Model page
    out: list[Advice] = []
    for rule in (*RULES, *offload_rules.RULES):
        try:
            out.extend(rule(device, config))
        except Exception:  # a broken rule must not take the picker down; it is logged with its traceback
            log.exception("precision rule %s failed", rule.__name__)
    try:
        out = follow_measurement(out, config, measured_recommendation(device, config, store))
    except Exception:  # an unreadable measurement leaves the rules' advice
        log.exception("following the precision lab's measurement failed")
    return sorted(out, key=_severity)


def save_overflow_advice(report: Sequence[str] | Mapping[str, float], *, max_names: int = 3) -> Advice | None:
    """Advice for an fp16 save whose export check found values beyond ±65504.

    Args:
        report: names of the overflowing tensors, or name -> largest absolute value.
        max_names: how many names to quote in the message.
    Returns:
        An error-level Advice suggesting bf16 (fp32 also works), or None when nothing overflows.
    """
    names = list(report)
    if not names:
        return None
    shown = ", ".join(names[:max_names]) + (f" and {len(names) - max_names} more" if len(names) > max_names else "")
    peak = ""
    if isinstance(report, Mapping):
        top = max(float(v) for v in report.values())
        peak = f" (largest {top:.4g})"
    return Advice(
        "error",
        f"{len(names)} tensor{'s' if len(names) != 1 else ''} of the LoRA {'hold' if len(names) != 1 else 'holds'} "
        f"values beyond fp16's ±{FP16_MAX:g}{peak}: "
        f"{shown}. Saved as fp16 they would become infinite and break the LoRA. bf16 or fp32 keep them.",
        {"precision.save": "bf16"},
        suggestion_text="save as bf16 (or fp32)",
        code="fp16_save_overflow",
        topic="precision.save",
    )
