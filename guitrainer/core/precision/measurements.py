"""Precision-lab measurements kept on disk, per device + model family + resolution, and what they recommend.

One JSON file in the user data folder (``precision_lab.json``), written atomically
(:mod:`guitrainer.base.fileio`), so a measurement survives a restart and a crash mid-write never leaves a
half file. A measurement outranks the precision rules (DESIGN §5), in every place that advises:
:func:`measured_recommendation` is what the picker's "recommended here" follows when one exists for this device and
model family; :func:`follow_measurement` makes every piece of speed advice agree with it (the advice cards, the
start check's log lines, ``--check``), and :func:`measured_facts` adds it to the device table.

Pure Python: no torch, no Qt.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from guitrainer.base.fileio import atomic_write_bytes
from guitrainer.base.paths import user_data_dir
from guitrainer.config import TrainingConfig
from guitrainer.config.precision_choices import choice_label
from guitrainer.core.device.info import AMX_FACT, DeviceInfo
from guitrainer.core.memory.specs import config_family
from guitrainer.core.precision.advice import Advice
from guitrainer.core.precision.lab import (
    DRIFT_LIMIT,
    SKIP_LIMIT,
    Candidate,
    CandidateResult,
    LabReport,
    device_key,
    recommendation_text,
    times,
)

log = logging.getLogger(__name__)

FILE_NAME = "precision_lab.json"
FORMAT_VERSION = 1
TOPIC = "precision.training"
_lock = threading.Lock()
#: path -> ((mtime_ns, size), entries): every place that advises reads the store, many times per config change
_read_cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}


def store_key(device: str, family: str, resolution: int) -> str:
    return f"{device}::{family}::{int(resolution)}"


@dataclass(frozen=True)
class MeasuredRecommendation:
    """What a stored measurement says to train with here."""

    training: str
    base_weights: str
    text: str  # "bf16 AMP, measured 2026-12-01: 1.8x faster than fp32"
    measured_at: str
    speedup: float | None  # against fp32 (None: fp32 itself, or not measured)
    report: LabReport

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.training, self.base_weights)

    def result(self, training: str, base_weights: str = "auto") -> CandidateResult | None:
        """What ``training`` measured with ``base_weights`` (else with the base weights in the compute dtype), or
        None when it did not run."""
        for bw in dict.fromkeys((base_weights, "auto")):
            r = self.report.result(Candidate(training, bw))
            if r is not None and r.ran and r.seconds_per_step:
                return r
        return None

    def seconds(self, training: str, base_weights: str = "auto") -> float | None:
        r = self.result(training, base_weights)
        return r.seconds_per_step if r is not None else None

    @property
    def where(self) -> str:
        """``"2026-12-01, demo at 64 px"``: when and on what it was measured."""
        r = self.report
        return f"{r.measured_at[:10] or 'earlier'}, {r.family} at {r.resolution} px"

    def why_not(self, training: str, base_weights: str = "auto") -> str:
        """Why a candidate that ran faster than the recommendation is not recommended ("" when it did not)."""
        r = self.result(training, base_weights)
        best = self.seconds(self.training, self.base_weights)
        if r is None or best is None or (r.seconds_per_step or 0) >= best:
            return ""
        if r.loss_drift_relative is not None and abs(r.loss_drift_relative) > DRIFT_LIMIT:
            return f"its loss drifted {100 * abs(r.loss_drift_relative):.0f} % from fp32's (over the lab's {DRIFT_LIMIT:.0%})"
        if r.skipped_steps / max(1, len(r.losses)) > SKIP_LIMIT:
            return f"its loss scaler skipped {r.skipped_steps} of {len(r.losses)} steps"
        return "it did not qualify"


class MeasurementStore:
    """The lab's reports on disk: one per (device, family, resolution), the newest kept."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else user_data_dir() / FILE_NAME

    def _read(self) -> dict[str, Any]:
        try:
            st = self.path.stat()
        except OSError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        cached = _read_cache.get(str(self.path))
        if cached is not None and cached[0] == stamp:
            return dict(cached[1])
        entries = self._parse()
        _read_cache[str(self.path)] = (stamp, entries)
        return dict(entries)

    def _parse(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("precision lab measurements in %s could not be read (%s); starting afresh", self.path, e)
            return {}
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            return {}
        entries = data.get("measurements")
        return entries if isinstance(entries, dict) else {}

    def all(self) -> dict[str, LabReport]:
        out: dict[str, LabReport] = {}
        for key, value in self._read().items():
            try:
                out[key] = LabReport.from_dict(value)
            except (TypeError, KeyError, ValueError) as e:
                log.warning("skipping an unreadable measurement %s: %s", key, e)
        return out

    def get(self, device: str, family: str, resolution: int) -> LabReport | None:
        return self.all().get(store_key(device, family, resolution))

    def put(self, report: LabReport) -> str:
        """Keep ``report`` (replacing an older one for the same key); returns its key.

        A cancelled report or one where nothing ran is not kept: it measured nothing to follow.
        """
        key = store_key(report.device_key, report.family, report.resolution)
        if report.cancelled or not any(r.ran for r in report.results):
            return key
        with _lock:
            entries = self._read()
            entries[key] = report.to_dict()
            text = json.dumps({"version": FORMAT_VERSION, "measurements": entries}, indent=2, sort_keys=True)
            atomic_write_bytes(self.path, text.encode("utf-8"))
        return key

    def for_device(self, device: DeviceInfo) -> list[LabReport]:
        """Every measurement of this device (any model family and resolution), newest first."""
        dkey = device_key(device)
        return sorted((r for r in self.all().values() if r.device_key == dkey), key=lambda r: r.measured_at, reverse=True)

    def find(self, device: DeviceInfo, config: TrainingConfig) -> LabReport | None:
        """The measurement for this device and model family at the config's resolution, else at the
        nearest resolution measured (speed ratios carry over better than no measurement at all)."""
        dkey, family = device_key(device), config_family(config)
        exact = self.get(dkey, family, config.dataset.resolution)
        if exact is not None:
            return exact
        same = [r for r in self.all().values() if r.device_key == dkey and r.family == family]
        if not same:
            return None
        return min(same, key=lambda r: abs(r.resolution - config.dataset.resolution))


def measured_recommendation(
    device: DeviceInfo | None, config: TrainingConfig, store: MeasurementStore | None = None
) -> MeasuredRecommendation | None:
    """The measured best for this device and model family, or None when nothing was measured here."""
    if device is None:
        return None
    report = (store or MeasurementStore()).find(device, config)
    if report is None:
        return None
    best = report.recommended()
    if best is None:
        return None
    text = recommendation_text(report, best)
    if report.resolution != config.dataset.resolution:
        text += f" (at {report.resolution} px)"
    return MeasuredRecommendation(
        best.candidate.training,
        best.candidate.base_weights,
        text,
        report.measured_at,
        report.speedup(best),
        report,
    )


@dataclass(frozen=True)
class Recommendation:
    """The training precision the picker marks "recommended here", and why."""

    training: str
    note: str  # the picker's note: "recommended here" or "recommended here (measured)"
    reason: str  # one sentence for a tooltip: the rule, or the measurement's date and speed-up
    measured: MeasuredRecommendation | None = None


def recommended_here(
    device: DeviceInfo | None, config: TrainingConfig, store: MeasurementStore | None = None
) -> Recommendation | None:
    """What the picker recommends: a measurement on this device and model family when one exists
    (DESIGN §5: it outranks the rules), else the precision rules' choice. None while the device is unknown."""
    if device is None:
        return None
    measured = measured_recommendation(device, config, store)
    if measured is not None:
        return Recommendation(measured.training, "recommended here (measured)", measured.text, measured)
    from guitrainer.core.precision.rules import recommended_training

    return Recommendation(recommended_training(device, config_family(config)), "recommended here",
                          "from this device's facts (not measured)")


# --------------------------------------------------------------------------- every place that advises follows it


def _against(m: MeasuredRecommendation, best_s: float, others: tuple[str, ...], base_weights: str) -> str:
    """``"0.354 s/step against 0.558 for bf16 AMP and 0.372 for fp16 AMP"``: the best's time against each of
    ``others`` that was measured (the best itself and repeats left out)."""
    parts = []
    for other in dict.fromkeys(o for o in others if o != m.training):
        s = m.seconds(other, base_weights)
        if s:
            parts.append(f"{s:.3f} for {choice_label(TOPIC, other)}")
    return f"{best_s:.3f} s/step" + (" against " + " and ".join(parts) if parts else "")


def follow_measurement(advice: list[Advice], config: TrainingConfig, measured: MeasuredRecommendation | None) -> list[Advice]:
    """``advice`` made to agree with a measurement of this device and model family (DESIGN §5).

    A piece of speed advice (:attr:`Advice.faster`) the measurement confirms keeps its words and gains the measured
    numbers; one it contradicts is replaced by what was measured, naming the device fact the rule rested on ("This
    CPU has AMX (bf16 matrix tiles), but measured here fp32 was fastest: 0.354 s/step against 0.558 for bf16 AMP").
    Advice that suggests a training precision for another reason (a GTX 16's fp16 NaNs) keeps it and says what was
    measured. Errors are untouched: a measurement cannot make a build have kernels. When the precision trained was
    measured slower than the best, one piece of advice says so and suggests the best.
    """
    if measured is None:
        return list(advice)
    best, choice, bw = measured.training, config.precision.training, config.precision.base_weights
    best_s = measured.seconds(best, measured.base_weights)
    if best_s is None:
        return list(advice)
    when = f" ({measured.where})"
    out: list[Advice] = []
    for a in advice:
        said = a.faster or str(a.suggestion.get(TOPIC, ""))
        if a.level == "error" or not said:
            out.append(a)
            continue
        measured_s = measured.seconds(said, bw)
        if said == best:  # the measurement agrees: the rule keeps its words, with the numbers
            note = f" Measured here{when}: {choice_label(TOPIC, best)} {_against(measured, best_s, (choice,), bw)}." \
                if choice != best else f" Measured here{when}: {choice_label(TOPIC, best)} was the fastest."
            out.append(replace(a, message=a.message + note))
        elif measured_s is None:  # the rule's choice was not measured: the rule is all there is about it
            out.append(a)
        elif a.faster:  # contradicted: what was measured, and the fact it overrode
            out.append(Advice(
                "info",
                f"{a.basis or 'The rules said otherwise'}, but measured here {choice_label(TOPIC, best)} was fastest: "
                f"{_against(measured, best_s, (said, choice), bw)}{when}.",
                {TOPIC: best} if choice != best else {},
                code=f"{a.code}_measured", topic=a.topic, faster=best,
            ))
        else:  # suggested for another reason (safety): kept, with what the measurement says
            out.append(replace(a, message=a.message + f" (Measured here{when}, {choice_label(TOPIC, best)} was "
                                                       f"faster: {_against(measured, best_s, (said,), bw)}; this advice "
                                                       "is not about speed.)"))
    if choice != best and not any(a.suggestion.get(TOPIC) == best for a in out):
        chosen = measured.seconds(choice, bw)
        why = measured.why_not(choice, bw)
        if chosen is not None and why:
            message = (f"Measured here{when}: {choice_label(TOPIC, choice)} ran fastest ({chosen:.3f} s/step), but "
                       f"{why}; {choice_label(TOPIC, best)} is the fastest that trains like fp32 ({best_s:.3f} s/step).")
        elif chosen is not None:
            message = (f"Measured here{when}: {choice_label(TOPIC, best)} was fastest, {times(chosen / best_s)} faster "
                       f"than {choice_label(TOPIC, choice)}: {best_s:.3f} s/step against {chosen:.3f}.")
        else:
            message = (f"Not measured here: {choice_label(TOPIC, choice)}. The precision lab's fastest here was "
                       f"{choice_label(TOPIC, best)} ({best_s:.3f} s/step{when}).")
        out.append(Advice("info", message, {TOPIC: best}, code="measured_faster", topic=TOPIC, faster=best))
    return out


def measured_facts(device: DeviceInfo, rows: list[tuple[str, str]], measured: MeasuredRecommendation | None) -> list[tuple[str, str]]:
    """The device table's rows with what a measurement contradicts: the AMX row ("yes (bf16 matmuls in hardware);
    but measured here bf16 AMP was slower (0.558 against 0.354 s/step for fp32)"). The measurement itself is shown
    beside the table (the picker's "Precision lab: …" line)."""
    if measured is None:
        return list(rows)
    best = measured.training
    best_s = measured.seconds(best, measured.base_weights)
    out = []
    for label, value in rows:
        bf16_s = measured.seconds("bf16")
        if label == AMX_FACT and device.cpu.amx and best != "bf16" and bf16_s and best_s:
            value += f"; but measured here bf16 AMP was slower ({bf16_s:.3f} against {best_s:.3f} s/step for {best})"
        out.append((label, value))
    return out
