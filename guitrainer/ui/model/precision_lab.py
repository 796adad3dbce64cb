"""The precision lab's window: "Measure on this machine", the table, small bar charts, and "Use this".

The measuring runs on a worker thread (:class:`LabWorker`, through :func:`guitrainer.ui.workers.run_in_thread`)
with progress and Cancel; the GUI thread only shows what arrives as queued signals. "Use this" writes the
row's training precision (and base-weight storage, where the config has it) through the page's
:class:`~guitrainer.ui.binding.ConfigBinding`, so every page sees the change. Nothing else is changed:
the lab trains copies of the config into a temporary folder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QCloseEvent, QColor, QFont, QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.units import format_bytes
from guitrainer.config import TrainingConfig
from guitrainer.core.events import Control
from guitrainer.core.precision.lab import (
    COLUMNS,
    HEADERS,
    Candidate,
    CandidateResult,
    LabProgress,
    LabReport,
    recommendation_text,
    rows,
    sources,
)
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.workers import BaseWorker, cap_torch_threads, run_in_thread

log = logging.getLogger(__name__)

#: ``runner(config, candidates, steps, warmup=, progress=, control=) -> LabReport``; default the engine's lab
LabRunner = Callable[..., LabReport]
WIN_COLOR = QColor(30, 140, 70)
BAR_COLOR = QColor(40, 120, 210)
CHARTS = (
    ("seconds_per_step", "s/step", lambda v: f"{v:.3f} s"),
    ("peak_memory_bytes", "peak memory", lambda v: format_bytes(v)),
    ("energy_per_image_j", "energy/image", lambda v: f"{v:.2f} J"),
    ("loss_drift", "loss drift vs fp32", lambda v: f"{v:.4f}"),
)


def default_runner(config: TrainingConfig, candidates: Iterable[Candidate] | None, steps: int, **kw: Any) -> LabReport:
    """The engine's :func:`~guitrainer.engine.lab.compare_precisions`, imported in the worker thread."""
    import torch  # noqa: F401 - loaded first so its threads can be capped before anything runs

    cap_torch_threads()
    from guitrainer.engine.lab import compare_precisions

    return compare_precisions(config, candidates, steps, **kw)


class LabWorker(BaseWorker):
    """Runs the lab on a copy of the config. ``progressed(LabProgress)``; ``finished(LabReport)``; ``failed``."""

    progressed = Signal(object)

    def __init__(
        self,
        config: TrainingConfig,
        candidates: Iterable[Candidate] | None = None,
        steps: int = 4,
        warmup: int = 1,
        runner: LabRunner | None = None,
    ):
        super().__init__()
        self.config = config.copy()  # the lab never touches the user's settings
        self.candidates = list(candidates) if candidates is not None else None
        self.steps, self.warmup = steps, warmup
        self.control = Control()
        self._runner = runner or default_runner

    def cancel(self) -> None:
        """Stop the lab (any thread): the running candidate stops at its next step, the rest are skipped."""
        self.control.request_stop()

    def work(self) -> LabReport:
        return self._runner(
            self.config,
            self.candidates,
            self.steps,
            warmup=self.warmup,
            progress=self.progressed.emit,
            control=self.control,
        )


class LabBars(QWidget):
    """Small horizontal bar charts, one per column of :data:`CHARTS`, the winner's bar in green."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("lab_bars")
        self._report: LabReport | None = None
        self.setMinimumHeight(120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def set_report(self, report: LabReport | None) -> None:
        self._report = report
        ran = len([r for r in report.results if r.ran]) if report else 0
        self.setMinimumHeight(28 + 16 * max(ran, 1))
        self.update()

    def charts(self) -> dict[str, list[tuple[str, float | None, bool]]]:
        """Per chart: (candidate label, value or None, winner) for every candidate that ran."""
        if self._report is None:
            return {}
        winners = self._report.winners()
        out: dict[str, list[tuple[str, float | None, bool]]] = {}
        for column, _title, _fmt in CHARTS:
            out[column] = [
                (r.candidate.label, r.value(column), winners.get(column) == r.candidate)
                for r in self._report.results
                if r.ran
            ]
        return out

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        charts = self.charts()
        if not charts:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        width = self.width() / len(CHARTS)
        small = QFont(self.font())
        small.setPointSizeF(max(7.0, small.pointSizeF() * 0.85))
        p.setFont(small)
        line = p.fontMetrics().height() + 2
        for k, (column, title, fmt) in enumerate(CHARTS):
            x0 = k * width + 6
            p.setPen(self.palette().windowText().color())
            p.drawText(QRectF(x0, 0, width - 12, line), Qt.AlignmentFlag.AlignLeft, title)
            bars = charts[column]
            top = max((v for _l, v, _w in bars if v is not None), default=0.0)
            for j, (label, value, win) in enumerate(bars):
                y = line * (j + 1) + 2
                inner = width - 12
                bx, bar_w = x0 + inner * 0.32, inner * 0.38
                p.setPen(self.palette().windowText().color())
                p.drawText(QRectF(x0, y, inner * 0.32 - 4, line), Qt.AlignmentFlag.AlignLeft, short_label(label))
                if value is None:
                    p.drawText(QRectF(bx, y, bar_w, line), Qt.AlignmentFlag.AlignLeft, "n/a")
                    continue
                frac = value / top if top > 0 else 0.0
                p.fillRect(QRectF(bx, y + 2, max(2.0, bar_w * frac), line - 5), WIN_COLOR if win else BAR_COLOR)
                text = fmt(value) + (" ★" if win else "")
                p.drawText(QRectF(bx + bar_w + 4, y, inner - (bx - x0) - bar_w - 4, line), Qt.AlignmentFlag.AlignLeft, text)
        p.end()


class PrecisionLabDialog(QDialog):
    """Measure every precision on this machine with the current settings; pick one with "Use this".

    Signals:
        measured(object): a comparison finished (the :class:`LabReport`).
        applied(object): "Use this" set the config to a candidate (the :class:`Candidate`).
    """

    measured = Signal(object)
    applied = Signal(object)

    def __init__(
        self,
        binding: ConfigBinding,
        parent: QWidget | None = None,
        *,
        runner: LabRunner | None = None,
        candidates: Iterable[Candidate] | None = None,
        steps: int = 4,
    ):
        super().__init__(parent)
        self.setWindowTitle("Precision lab")
        self.setObjectName("precision_lab")
        self.binding = binding
        self._runner = runner
        self._candidates = list(candidates) if candidates is not None else None
        self._worker: LabWorker | None = None
        self.report: LabReport | None = None
        self.resize(1120, 600)

        outer = QVBoxLayout(self)
        intro = QLabel(
            "Runs a few real training steps of your settings (your model, dataset, batch and resolution) once per "
            "precision, and compares speed, memory, energy and how far the loss drifts from fp32. Nothing you set "
            "is changed until you press “Use this”.",
            self,
        )
        intro.setWordWrap(True)
        outer.addWidget(intro)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Timed steps per precision:", self))
        self.steps_box = QSpinBox(self)
        self.steps_box.setObjectName("lab_steps")
        self.steps_box.setRange(1, 100)
        self.steps_box.setValue(steps)
        bar.addWidget(self.steps_box)
        bar.addStretch(1)
        self.measure_button = QPushButton("Measure on this machine", self)
        self.measure_button.setObjectName("measure")
        self.measure_button.clicked.connect(self.start)
        bar.addWidget(self.measure_button)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setObjectName("cancel_lab")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        bar.addWidget(self.cancel_button)
        outer.addLayout(bar)
        self.progress = QProgressBar(self)
        self.progress.setObjectName("lab_progress")
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        outer.addWidget(self.progress)
        self.status = QLabel("", self)
        self.status.setObjectName("lab_status")
        self.status.setWordWrap(True)
        outer.addWidget(self.status)

        self.table = self._results_table()
        outer.addWidget(self.table, 1)
        self.bars = LabBars(self)
        outer.addWidget(self.bars)
        self.sources_label = QLabel("", self)
        self.sources_label.setObjectName("lab_sources")
        self.sources_label.setWordWrap(True)
        self.sources_label.setStyleSheet("color: palette(placeholder-text);")
        outer.addWidget(self.sources_label)
        self.recommendation = QLabel("", self)
        self.recommendation.setObjectName("lab_recommendation")
        self.recommendation.setWordWrap(True)
        outer.addWidget(self.recommendation)
        closing = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        closing.rejected.connect(self.close)  # closing while measuring cancels (closeEvent)
        outer.addWidget(closing)

    def _results_table(self) -> QTableWidget:
        """One row per candidate, "Use this" beside its name; the status (last) takes what is left and elides:
        a failure's message is in its tooltip, not a scroll away."""
        table = QTableWidget(0, len(HEADERS) + 1, self)
        table.setObjectName("lab_table")
        titles = [title for _c, title in HEADERS]
        table.setHorizontalHeaderLabels([titles[0], "", *titles[1:]])
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        table.verticalHeader().setVisible(False)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(HEADERS), QHeaderView.ResizeMode.Stretch)
        table.setWordWrap(False)
        table.setTextElideMode(Qt.TextElideMode.ElideRight)
        return table

    # ------------------------------------------------------------------ running
    def running(self) -> bool:
        return self._worker is not None

    def start(self) -> bool:
        """Start measuring (False when a measurement is already running)."""
        if self._worker is not None:
            return False
        worker = LabWorker(self.binding.config, self._candidates, self.steps_box.value(), runner=self._runner)
        worker.progressed.connect(self._on_progress)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self._worker = worker
        self.measure_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setValue(0)
        self.status.setText("Starting…")
        run_in_thread(worker, name="PrecisionLabThread")
        return True

    def cancel(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            self.cancel_button.setEnabled(False)
            self.status.setText("Cancelling: the precision being measured stops at its next step…")

    def _done(self) -> None:
        self._worker = None
        self.measure_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _on_progress(self, p: LabProgress) -> None:
        self.progress.setValue(int(1000 * p.fraction))
        self.status.setText(f"{p.index + 1} of {p.count}: {p.message}")

    def _on_finished(self, report: LabReport) -> None:
        self._done()
        self.progress.setValue(1000)
        self.status.setText("Cancelled." if report.cancelled else f"Measured in {report.total_seconds:.0f} s.")
        self.show_report(report)
        self.measured.emit(report)

    def _on_failed(self, message: str, details: str) -> None:
        self._done()
        log.error("precision lab failed: %s\n%s", message, details)
        self.status.setText(f"The measurement failed: {message}")

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        """Closing while measuring cancels: nothing keeps running behind a closed window."""
        self.cancel()
        super().closeEvent(event)

    # ------------------------------------------------------------------ showing
    def show_report(self, report: LabReport) -> None:
        self.report = report
        cells = rows(report)
        winners = report.winners()
        self.table.setRowCount(len(cells))
        bold = QFont(self.font())
        bold.setBold(True)
        for i, (result, row) in enumerate(zip(report.results, cells)):
            for j, text in enumerate(row):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                column = HEADERS[j][0]
                if column in COLUMNS and winners.get(column) == result.candidate:
                    item.setFont(bold)
                    item.setForeground(WIN_COLOR)
                    item.setToolTip("best in this column")
                self.table.setItem(i, j + (j > 0), item)
            self.table.setCellWidget(i, 1, self._use_button(result))
        self.bars.set_report(report)
        self.sources_label.setText("Sources: " + "; ".join(sources(report)) + "".join(f"\n{n}" for n in report.notes))
        best = report.recommended()
        self.recommendation.setText(
            f"<b>Recommended here:</b> {recommendation_text(report, best)}" if best and not report.cancelled else ""
        )

    def _use_button(self, result: CandidateResult) -> QWidget:
        c = result.candidate
        button = QPushButton("Use this", self.table)
        button.setObjectName(f"use_{c.training}_{c.base_weights}")
        button.setEnabled(result.ran)
        button.setToolTip(f"Train with {c.label}" if result.ran else result.reason)
        button.clicked.connect(lambda: self.use(c))
        return button

    def use_button(self, candidate: Candidate) -> QPushButton | None:
        return self.table.findChild(QPushButton, f"use_{candidate.training}_{candidate.base_weights}")

    def use(self, candidate: Candidate) -> bool:
        """Set the config's training precision and base-weight storage to ``candidate``'s."""
        ok = True
        for path, value in candidate.settings().items():
            if path == "precision.base_weights" and not hasattr(self.binding.config.precision, "base_weights"):
                ok = ok and value == "auto"  # this config has no such setting: only "auto" is what it does
                continue
            ok = self.binding.set(path, value) and ok
        if ok:
            self.applied.emit(candidate)
            self.status.setText(f"Training precision set to {candidate.label}.")
        return ok


def short_label(label: str) -> str:
    """A candidate's name in the narrow bar charts: "fp16 AMP + fp8 base weights" -> "fp16 + fp8" (each distinct)."""
    return label.replace(" AMP", "").replace(" base weights", "")

