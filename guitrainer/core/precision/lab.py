"""The precision lab's plain data: which candidates to try, what each one measured, and the table.

The engine (:mod:`guitrainer.engine.lab.precision_lab`) runs a few real training steps of the user's own
configuration once per :class:`Candidate` and fills a :class:`CandidateResult` for each; the UI, the CLI
and the store of measurements (:mod:`guitrainer.core.precision.measurements`) read them. No torch and no Qt here.

Every number says where it comes from (``memory_source``, ``energy_source``): a column that the machine
cannot measure is "not available here", never an invented figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo

Status = Literal["ran", "not_run", "does_not_fit", "too_slow", "failed", "cancelled"]

#: how far (relative) a candidate's evaluation loss may drift from fp32's and still be recommended
DRIFT_LIMIT = 0.10
#: a fp16 candidate whose GradScaler skipped more than this share of its steps is not recommended
SKIP_LIMIT = 0.25
TRAINING_LABELS = {"fp32": "fp32", "fp16": "fp16 AMP", "bf16": "bf16 AMP"}
NOT_AVAILABLE = "not available here"

#: the columns that have a winner, and whether smaller is better
COLUMNS: dict[str, bool] = {
    "seconds_per_step": True,
    "images_per_second": False,
    "peak_memory_bytes": True,
    "energy_per_image_j": True,
    "loss_drift": True,
}


@dataclass(frozen=True)
class Candidate:
    """One way to train: the compute precision and how the frozen base weights are stored."""

    training: str  # "fp32" | "fp16" | "bf16"
    base_weights: str = "auto"  # "auto" (in the compute dtype) | "fp8" | "int8" | "nf4"

    @property
    def label(self) -> str:
        text = TRAINING_LABELS.get(self.training, self.training)
        return text + (f" + {self.base_weights} base weights" if self.base_weights != "auto" else "")

    @property
    def key(self) -> str:
        return f"{self.training}/{self.base_weights}"

    def settings(self) -> dict[str, str]:
        """The config changes that train like this candidate ("Use this")."""
        return {"precision.training": self.training, "precision.base_weights": self.base_weights}


def all_candidates(config: TrainingConfig | None = None) -> tuple[Candidate, ...]:
    """fp32, fp16 AMP, bf16 AMP, and each with fp8 base weights; where ``config`` stores them in int8 or nf4, each
    with that format too (a bitsandbytes run per format is slow to set up: measured only when asked for)."""
    plain = tuple(Candidate(t) for t in ("fp32", "fp16", "bf16"))
    out = plain + tuple(Candidate(c.training, "fp8") for c in plain)
    quantised = config.precision.base_weights if config is not None else "auto"
    if quantised in ("int8", "nf4"):
        out += tuple(Candidate(c.training, quantised) for c in plain)
    return out


@dataclass(frozen=True)
class CandidateResult:
    """What one candidate measured (or why it was not run).

    Times are medians over the timed steps (warm-up steps excluded). ``loss_drift`` is this candidate's
    evaluation loss minus fp32's, ``loss_drift_relative`` the same as a fraction of fp32's.
    """

    candidate: Candidate
    status: Status
    reason: str = ""  # why it was not run / did not fit / failed
    seconds_per_step: float | None = None
    images_per_second: float | None = None
    step_seconds: tuple[float, ...] = ()  # every timed step
    warmup_steps: int = 0
    losses: tuple[float, ...] = ()  # every step's training loss, warm-up included
    peak_memory_bytes: int | None = None
    memory_source: str = ""
    estimate_bytes: int | None = None  # the VRAM estimator's figure for the same settings
    energy_per_image_j: float | None = None
    energy_source: str = NOT_AVAILABLE
    eval_loss: float | None = None
    loss_drift: float | None = None
    loss_drift_relative: float | None = None
    skipped_steps: int = 0
    final_scale: float | None = None  # the GradScaler's scale after the last step (fp16)
    total_seconds: float = 0.0  # set-up, every step, evaluation: the candidate's whole cost

    @property
    def ran(self) -> bool:
        return self.status == "ran"

    @property
    def first_loss(self) -> float | None:
        return self.losses[0] if self.losses else None

    @property
    def timed_seconds(self) -> float:
        return sum(self.step_seconds)

    def value(self, column: str) -> float | None:
        """The number of ``column`` (see :data:`COLUMNS`); loss drift as its absolute value."""
        v = getattr(self, column)
        if v is None:
            return None
        return abs(v) if column == "loss_drift" else float(v)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["candidate"] = asdict(self.candidate)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CandidateResult:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["candidate"] = Candidate(**data["candidate"])
        for name in ("step_seconds", "losses"):
            kw[name] = tuple(kw.get(name) or ())
        return cls(**kw)


def median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


@dataclass(frozen=True)
class LabReport:
    """One comparison: the device, the settings it was measured with, and every candidate's result."""

    device_key: str
    device_name: str
    family: str
    resolution: int
    batch_size: int
    steps: int  # timed steps per candidate
    warmup_steps: int
    results: tuple[CandidateResult, ...]
    measured_at: str = ""  # ISO 8601, UTC
    total_seconds: float = 0.0  # the whole lab, set-up and evaluation included
    notes: tuple[str, ...] = ()
    cancelled: bool = False

    # ------------------------------------------------------------------ reading
    def result(self, candidate: Candidate) -> CandidateResult | None:
        return next((r for r in self.results if r.candidate == candidate), None)

    @property
    def reference(self) -> CandidateResult | None:
        """The fp32 candidate (with the base weights in fp32), when it ran."""
        r = self.result(Candidate("fp32"))
        return r if r is not None and r.ran else None

    @property
    def timed_seconds(self) -> float:
        return sum(r.timed_seconds for r in self.results)

    @property
    def overhead(self) -> float | None:
        """The lab's total time against the sum of its timed steps (e.g. 4.0: a quarter of it was timed)."""
        return self.total_seconds / self.timed_seconds if self.timed_seconds > 0 else None

    def winners(self) -> dict[str, Candidate]:
        """Per column, the candidate with the best value among those that ran (loss drift: fp32 excluded)."""
        out: dict[str, Candidate] = {}
        for column, smaller in COLUMNS.items():
            pool = [r for r in self.results if r.ran and r.value(column) is not None]
            if column == "loss_drift":
                pool = [r for r in pool if r.candidate != Candidate("fp32")]
            if not pool:
                continue
            best = min(pool, key=lambda r: r.value(column) if smaller else -(r.value(column) or 0.0))  # type: ignore[operator]
            out[column] = best.candidate
        return out

    def speedup(self, result: CandidateResult) -> float | None:
        """fp32's s/step over this candidate's (2.0: twice as fast as fp32)."""
        ref = self.reference
        if ref is None or not ref.seconds_per_step or not result.seconds_per_step:
            return None
        return ref.seconds_per_step / result.seconds_per_step

    def recommended(self) -> CandidateResult | None:
        """The fastest candidate whose loss stays within :data:`DRIFT_LIMIT` of fp32 and that skipped
        at most :data:`SKIP_LIMIT` of its steps; None when nothing ran."""
        pool = []
        for r in self.results:
            if not r.ran or r.seconds_per_step is None:
                continue
            if r.loss_drift_relative is not None and abs(r.loss_drift_relative) > DRIFT_LIMIT:
                continue
            timed = max(1, len(r.losses))
            if r.skipped_steps / timed > SKIP_LIMIT:
                continue
            pool.append(r)
        return min(pool, key=lambda r: r.seconds_per_step or math.inf) if pool else None

    # ------------------------------------------------------------------ serialising
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["results"] = [r.to_dict() for r in self.results]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabReport:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["results"] = tuple(CandidateResult.from_dict(r) for r in data.get("results", ()))
        kw["notes"] = tuple(kw.get("notes") or ())
        return cls(**kw)


# --------------------------------------------------------------------------- which candidates can run


def device_key(device: DeviceInfo) -> str:
    """A stable name for the selected device: what a measurement is kept under."""
    gpu = device.gpu
    if gpu is not None:
        cap = f"{gpu.capability[0]}.{gpu.capability[1]}"
        return f"{device.kind}|{gpu.name}|{cap}|{round(gpu.total_memory / 2**30)}GiB"
    if device.kind == "mps":
        return f"mps|{device.cpu.name}"
    return f"cpu|{device.cpu.name}|{device.cpu.cores} cores"


# --------------------------------------------------------------------------- text


def _fmt_bytes(n: int | None) -> str:
    from guitrainer.base.units import format_bytes

    return format_bytes(n) if n is not None else "—"


def _cell(r: CandidateResult, column: str) -> str:
    v = getattr(r, column, None)
    if column == "seconds_per_step":
        return f"{v:.3f}" if v is not None else "—"
    if column == "images_per_second":
        return f"{v:.2f}" if v is not None else "—"
    if column == "peak_memory_bytes":
        return _fmt_bytes(v)
    if column == "estimate_bytes":
        return _fmt_bytes(v)
    if column == "energy_per_image_j":
        return f"{v:.2f} J" if v is not None else "n/a"
    if column == "loss_drift":
        if r.candidate == Candidate("fp32") and r.ran:
            return "reference"
        if v is None:
            return "—"
        rel = f" ({100 * r.loss_drift_relative:+.1f} %)" if r.loss_drift_relative is not None else ""
        return f"{v:+.4f}{rel}"
    return "" if v is None else str(v)


HEADERS = (
    ("candidate", "candidate"),
    ("seconds_per_step", "s/step"),
    ("images_per_second", "images/s"),
    ("peak_memory_bytes", "peak memory"),
    ("estimate_bytes", "estimate"),
    ("energy_per_image_j", "energy/image"),
    ("loss_drift", "loss vs fp32"),
    ("scaler", "fp16 scaler"),
    ("status", "status"),
)


def rows(report: LabReport) -> list[list[str]]:
    """The table's cells, one row per candidate, winners marked with ``*``."""
    winners = report.winners()
    out: list[list[str]] = []
    for r in report.results:
        row: list[str] = []
        for column, _title in HEADERS:
            if column == "candidate":
                text = r.candidate.label
            elif column == "scaler":
                text = f"{r.skipped_steps} skipped, scale {r.final_scale:g}" if r.final_scale is not None else ""
            elif column == "status":
                words = r.status.replace("_", " ")
                text = "ran" if r.ran else (r.reason if r.reason.startswith(words) else f"{words}: {r.reason}")
            else:
                text = _cell(r, column) if r.ran or column == "estimate_bytes" else "—"
                if winners.get(column) == r.candidate:
                    text += " *"
            row.append(text)
        out.append(row)
    return out


def sources(report: LabReport) -> list[str]:
    """Where the memory and energy numbers come from, one line each (distinct)."""
    mem = sorted({r.memory_source for r in report.results if r.ran and r.memory_source})
    energy = sorted({r.energy_source for r in report.results if r.ran})
    lines = [f"peak memory: {m}" for m in mem]
    lines += [f"energy: {e}" for e in energy] or [f"energy: {NOT_AVAILABLE}"]
    return lines


def format_table(report: LabReport) -> str:
    """The comparison as a plain-text table with its sources, the overhead and the recommendation."""
    table = [[title for _c, title in HEADERS], *rows(report)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADERS))]
    lines = [
        f"Precision lab: {report.device_name} · {report.family} · {report.resolution} px · batch {report.batch_size}"
        f" · {report.steps} timed steps after {report.warmup_steps} warm-up",
        "",
    ]
    for k, row in enumerate(table):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("* best in its column. " + "; ".join(sources(report)))
    if report.overhead is not None:
        lines.append(
            f"lab time {report.total_seconds:.1f} s, of which timed steps {report.timed_seconds:.1f} s "
            f"(overhead {report.overhead:.1f}x)"
        )
    lines += list(report.notes)
    best = report.recommended()
    if report.cancelled:
        lines.append("cancelled: the candidates not measured are marked so")
    elif best is not None:
        lines.append(f"recommended here: {recommendation_text(report, best)}")
    return "\n".join(lines)


def times(ratio: float) -> str:
    """A speed ratio as the lab's texts write it: ``"1.05x"`` under 1.1 (a 5 % gap is not "1.1x"), else
    ``"1.6x"``."""
    return f"{ratio:.2f}x" if ratio < 1.095 else f"{ratio:.1f}x"


def recommendation_text(report: LabReport, best: CandidateResult) -> str:
    """``"bf16 AMP, measured 2026-12-01: 1.8x faster than fp32"`` (or why fp32 stays)."""
    date = report.measured_at[:10] or "earlier"
    if best.candidate == Candidate("fp32"):
        others = [(report.speedup(r), r) for r in report.results if r.ran and r is not best]
        others = [(s, r) for s, r in others if s]
        if others:
            s, r = max(others, key=lambda sr: sr[0])
            return f"fp32, measured {date}: the fastest of the others, {r.candidate.label}, was {times(1 / s)} slower"
        return f"fp32, measured {date}"
    s = report.speedup(best)
    speed = f"{times(s)} faster than fp32" if s is not None and s >= 1 else (
        f"{times(1 / s)} slower than fp32 but lighter" if s else "fp32 not measured"
    )
    return f"{best.candidate.label}, measured {date}: {speed}"


@dataclass(frozen=True)
class LabProgress:
    """Where the lab is: candidate ``index`` of ``count``, step ``step`` of ``total_steps`` (0: setting up)."""

    index: int
    count: int
    candidate: Candidate
    step: int = 0
    total_steps: int = 0
    message: str = ""

    @property
    def fraction(self) -> float:
        inner = self.step / self.total_steps if self.total_steps else 0.0
        return min(1.0, (self.index + inner) / self.count) if self.count else 1.0
