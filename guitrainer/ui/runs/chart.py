"""The Runs page's chart: one curve per selected run, on one plot, aligned by step or by images seen.

pyqtgraph is imported here only; the Runs page imports this module after its list is on screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from guitrainer.core.runs.compare import ALIGNMENTS, aligned
from guitrainer.ui.training.charts import CountAxis, ema

#: what the chart can show: label -> metric column
METRICS: dict[str, str] = {
    "Loss": "loss",
    "Learning rate": "lr",
    "Loss scale (fp16)": "grad_scale",
    "Seconds per step": "seconds_per_step",
    "Validation loss": "val_loss",
    "Class loss": "class_loss",
}
#: distinct colours for overlaid runs (colour-blind safe first eight: Okabe-Ito, then Tableau)
PALETTE = (
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
    "#4E79A7", "#F28E2B", "#E15759", "#76B7B2", "#59A14F", "#EDC948", "#B07AA1", "#FF9DA7",
)  # fmt: skip
SMOOTHING = 0.9


class RunsChart(QWidget):
    """``set_runs([(run_id, label, series), ...])`` draws each run's chosen metric against the chosen x."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._runs: list[tuple[int, str, dict[str, Sequence[Any]]]] = []
        self.curves: dict[int, pg.PlotDataItem] = {}
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Show"))
        self.metric_combo = QComboBox()
        self.metric_combo.setObjectName("runs_metric")
        for label, column in METRICS.items():
            self.metric_combo.addItem(label, column)
        bar.addWidget(self.metric_combo)
        bar.addWidget(QLabel("against"))
        self.align_combo = QComboBox()
        self.align_combo.setObjectName("runs_align")
        for label, column in ALIGNMENTS.items():
            self.align_combo.addItem(label, column)
        self.align_combo.setToolTip(
            "Step: the optimizer steps. Images seen: steps × images per step, so runs with other batch sizes line up."
        )
        bar.addWidget(self.align_combo)
        self.smooth_check = QCheckBox("Smoothed")
        self.smooth_check.setObjectName("runs_smoothed")
        self.smooth_check.setToolTip(f"Exponential moving average ({SMOOTHING:g}), as on the Training page.")
        bar.addWidget(self.smooth_check)
        bar.addStretch(1)
        self.note = QLabel()
        self.note.setStyleSheet("color: palette(placeholder-text);")
        bar.addWidget(self.note)
        outer.addLayout(bar)
        fg = self.palette().color(QPalette.ColorRole.WindowText)
        self.plot_widget = pg.PlotWidget(
            background=self.palette().color(QPalette.ColorRole.Base), axisItems={"bottom": CountAxis("bottom")}
        )
        self.plot_widget.setObjectName("runs_plot")
        self.plot = self.plot_widget.getPlotItem()
        self.plot.setDownsampling(auto=True, mode="peak")
        self.plot.setClipToView(True)
        for name in ("left", "bottom"):
            self.plot.getAxis(name).setTextPen(pg.mkPen(fg))
        self.legend = self.plot.addLegend(offset=(-10, 10))
        self.legend.setLabelTextColor(fg)
        outer.addWidget(self.plot_widget, 1)
        self.metric_combo.currentIndexChanged.connect(self.redraw)
        self.align_combo.currentIndexChanged.connect(self.redraw)
        self.smooth_check.toggled.connect(self.redraw)

    @property
    def metric(self) -> str:
        return str(self.metric_combo.currentData())

    @property
    def alignment(self) -> str:
        return str(self.align_combo.currentData())

    def set_metric(self, column: str) -> None:
        self.metric_combo.setCurrentIndex(max(0, self.metric_combo.findData(column)))

    def set_alignment(self, column: str) -> None:
        self.align_combo.setCurrentIndex(max(0, self.align_combo.findData(column)))

    def set_runs(self, runs: list[tuple[int, str, dict[str, Sequence[Any]]]]) -> None:
        self._runs = list(runs)
        self.redraw()

    def curve_data(self, run_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The (x, y) drawn for a run (tests and exports)."""
        x, y = self.curves[run_id].getData()
        return np.asarray(x), np.asarray(y)

    def redraw(self) -> None:
        self.plot.clear()
        self.legend.clear()
        self.curves.clear()
        metric, by = self.metric, self.alignment
        empty = []
        for i, (run_id, label, series) in enumerate(self._runs):
            x, y = aligned(series, metric, by)
            if not x:
                empty.append(label)
                continue
            ys = np.asarray(y, dtype=float)
            if self.smooth_check.isChecked():
                ys = ema(ys, SMOOTHING)
            pen = pg.mkPen(QColor(PALETTE[i % len(PALETTE)]), width=2 if len(self._runs) > 1 else 1.5)
            self.curves[run_id] = self.plot.plot(np.asarray(x, dtype=float), ys, name=label, pen=pen, connect="finite")
        self.plot.setLogMode(x=False, y=metric == "grad_scale")
        self.plot.setLabel("bottom", self.align_combo.currentText())
        self.plot.setLabel("left", self.metric_combo.currentText())
        if empty:
            self.note.setText(f"No {self.metric_combo.currentText().lower()} in: {', '.join(empty[:3])}{'…' if len(empty) > 3 else ''}")
        else:
            self.note.setText("")
