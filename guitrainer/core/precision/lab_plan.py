"""Which precision-lab candidates this device can run, and why not: the precision rules' own reasons, applied to
the lab's :class:`~guitrainer.core.precision.lab.Candidate` list (fp32, the reference, always first)."""

from __future__ import annotations

from collections.abc import Iterable

from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.precision import advisor
from guitrainer.core.precision.lab import Candidate, all_candidates
from guitrainer.core.precision.rules import fp8_storage_unavailable


def fp8_unavailable_reason(device: DeviceInfo, config: TrainingConfig, engine_supports_fp8: bool) -> str:
    """Why fp8 base weights cannot be measured here ("" when they can): the precision rules' own reason
    (:func:`guitrainer.core.precision.rules.fp8_storage_unavailable`: MPS, torch < 2.1, Intel GPUs before 2.10)."""
    if not engine_supports_fp8 or not hasattr(config.precision, "base_weights"):
        return "this version of the trainer cannot store base weights in fp8 (no precision.base_weights setting)"
    return fp8_storage_unavailable(device)


def unavailable_reason(
    device: DeviceInfo, config: TrainingConfig, candidate: Candidate, *, engine_supports_fp8: bool = False
) -> str:
    """Why ``candidate`` cannot run on ``device`` ("" when it can): the precision rules' error-level advice."""
    if candidate.base_weights == "fp8":
        reason = fp8_unavailable_reason(device, config, engine_supports_fp8)
        if reason:
            return reason
    trial = config.copy()
    trial.precision.training = candidate.training  # type: ignore[assignment]
    if candidate.base_weights != "auto" and hasattr(trial.precision, "base_weights"):
        trial.precision.base_weights = candidate.base_weights  # type: ignore[attr-defined]
    errors = [a for a in advisor.advise(device, trial) if a.level == "error" and a.topic.startswith("precision")]
    return errors[0].message if errors else ""


def plan(
    device: DeviceInfo,
    config: TrainingConfig,
    candidates: Iterable[Candidate] | None = None,
    *,
    engine_supports_fp8: bool = False,
) -> list[tuple[Candidate, str]]:
    """``(candidate, reason)`` for each candidate in order; an empty reason means it runs.

    fp32 is always measured first (the reference every drift is taken from), even when not asked for.
    """
    chosen = list(candidates) if candidates is not None else list(all_candidates(config))
    if Candidate("fp32") not in chosen:
        chosen.insert(0, Candidate("fp32"))
    else:
        chosen.remove(Candidate("fp32"))
        chosen.insert(0, Candidate("fp32"))
    out: list[tuple[Candidate, str]] = []
    seen: set[Candidate] = set()
    for c in chosen:
        if c in seen:
            continue
        seen.add(c)
        out.append((c, unavailable_reason(device, config, c, engine_supports_fp8=engine_supports_fp8)))
    return out
