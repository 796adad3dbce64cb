"""Precision-lab measurements kept on disk, per device + model family + resolution, and what they recommend.

One JSON file in the user data folder (``precision_lab.json``), written atomically
(:mod:`guitrainer.base.fileio`), so a measurement survives a restart and a crash mid-write never leaves a
half file. A measurement outranks the precision rules (DESIGN §4): :func:`measured_recommendation` is what
the picker's "recommended here" follows when one exists for this device and model family.

Pure Python: no torch, no Qt.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guitrainer.base.fileio import atomic_write_bytes
from guitrainer.base.paths import user_data_dir
from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.precision.lab import Candidate, LabReport, device_key, recommendation_text

log = logging.getLogger(__name__)

FILE_NAME = "precision_lab.json"
FORMAT_VERSION = 1
_lock = threading.Lock()


def config_family(config: TrainingConfig) -> str:
    """The model family a config trains ("demo", "sd15", "sdxl"), as the estimator resolves it."""
    from guitrainer.core.memory.specs import resolve_family

    return resolve_family(str(config.model.family), str(config.model.base))


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


class MeasurementStore:
    """The lab's reports on disk: one per (device, family, resolution), the newest kept."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else user_data_dir() / FILE_NAME

    def _read(self) -> dict[str, Any]:
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
    (DESIGN §4: it outranks the rules), else the precision rules' choice. None while the device is unknown."""
    if device is None:
        return None
    measured = measured_recommendation(device, config, store)
    if measured is not None:
        return Recommendation(measured.training, "recommended here (measured)", measured.text, measured)
    from guitrainer.core.precision.rules import recommended_training

    return Recommendation(recommended_training(device), "recommended here", "from this device's facts (not measured)")
