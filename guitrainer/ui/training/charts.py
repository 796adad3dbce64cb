"""Live training charts: loss (raw + EMA), learning rate, GradScaler scale, seconds per step.

Points arrive once per step (``add``) and go into numpy buffers that grow by doubling; the
curves are redrawn by a timer at most 10 times a second and only when something changed, so
a fast run costs the GUI thread a few array writes per step (pyqtgraph's scrolling-plot habits:
``setDownsampling(auto=True, mode="peak")``, ``setClipToView(True)``).

pyqtgraph is imported here only; the training page imports this module when the charts are
first needed, so the main window still opens without it.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from guitrainer.core.events import StepMetrics
from guitrainer.ui import start_dirs
from guitrainer.ui.training.chart_data import COLUMNS, MetricBuffer, bounds, ema, sticky_range  # noqa: F401 - re-exported
from guitrainer.ui.widgets.elided import ElidedLabel

log = logging.getLogger(__name__)

REDRAW_INTERVAL_MS = 100  # <= 10 Hz
#: the loss chart, then the three small ones, keep their axes and a few ticks down to these heights
LOSS_MIN_HEIGHT = 130
SMALL_MIN_HEIGHT = 96
EMPTY_SCALE_RANGE = (3.0, 6.0)  # the empty GradScaler axis (log10): 1e3 … 1e6 frames 2^16 with a few ticks
MAX_EPOCH_LINES = 200  # beyond this many epochs the boundaries are no longer drawn (they would be a wall)
NO_SCALER_TEXT = "bf16 and fp32 need no loss scaling"
NO_DATA = "no data yet"
SCALE_HINT = (
    "A flat line is healthy: the scale drops only when a step overflows (✕, that step is skipped) "
    "and grows again after a run of good steps."
)

LOSS_COLOR = "#2f7ed8"
EMA_COLOR = "#d9480f"
CLASS_COLOR = "#2b8a3e"
VALIDATION_COLOR = "#862e9c"
LR_COLOR = "#7048e8"
SCALE_COLOR = "#0b7285"
SKIP_COLOR = "#e03131"
SPS_COLOR = "#5c677d"


class CountAxis(pg.AxisItem):
    """A bottom axis of counts (steps, images): whole numbers only, so a few points show no half-step ticks."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N802, N803
        levels = super().tickSpacing(minVal, maxVal, size)
        return [(spacing, offset) for spacing, offset in levels if spacing >= 1.0] or [(1.0, 0.0)]


class FollowViewBox(pg.ViewBox):
    """A ViewBox framed by the charts themselves (:meth:`follow`), in steps, instead of pyqtgraph's auto-range.

    Why: while a training thread holds the GIL, every Qt call the GUI thread makes waits for it, so
    a repaint of a whole plot costs ~100 ms instead of ~5. pyqtgraph's auto-range re-renders axes
    and titles on every new point; a range that moves in steps (:func:`sticky_range`) repaints only
    the curves. The user's pan / zoom stops the following; the "A" button or the menu's "View all"
    starts it again.
    """

    def __init__(self, *args, log_y: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.following = True
        self.log_y = log_y
        self.sigRangeChangedManually.connect(self._user_moved)
        self.disableAutoRange()

    def _user_moved(self, *_: object) -> None:
        self.following = False

    def enableAutoRange(self, axis=None, enable=True, x=None, y=None):  # noqa: N802, ANN001, ANN201
        if enable is False or (x is False and y is False):
            return super().enableAutoRange(axis, enable, x, y)
        self.following = True  # "A" button / "View all": follow the data again, framed by the charts
        self.sigStateChanged.emit(self)
        return None

    def autoRange(self, padding=None, items=None, item=None):  # noqa: N802, ANN001, ANN201
        self.following = True
        return super().autoRange(padding, items, item)

    def follow(
        self, x: tuple[float, float] | None, y: tuple[float, float] | None, *, x_exact: tuple[float, float] | None = None
    ) -> None:
        """Frame the data bounds ``x`` / ``y`` (``y`` in data units; log10 is taken on a log axis).

        ``x_exact``: show exactly this x range (another plot's), instead of framing ``x``.
        """
        if not self.following:
            return
        if y is not None and self.log_y:
            y = (math.log10(y[0]), math.log10(y[1])) if y[0] > 0 and y[1] > 0 else None
        current = self.viewRange()
        if x_exact is not None:
            same = all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(current[0], x_exact))
            nx = None if same else x_exact
        else:
            nx = sticky_range(tuple(current[0]), x) if x is not None else None
        ny = sticky_range(tuple(current[1]), y) if y is not None else None
        if nx is not None or ny is not None:
            self.setRange(xRange=nx, yRange=ny, padding=0, disableAutoRange=False)


def _loose_title(plot: pg.PlotItem) -> None:
    """A title never widens its plot (a plot wider than its view at 1366 px was cut off, axis labels too)."""
    label = plot.titleLabel
    label.setMinimumWidth(0)
    label._sizeHint[Qt.SizeHint.MinimumSize] = (0, label._sizeHint[Qt.SizeHint.MinimumSize][1])  # noqa: SLF001
    label.updateGeometry()


class TrainingCharts(QWidget):
    """Four linked plots fed with :class:`StepMetrics`; see the module docstring for the redraw rules."""

    redrawn = Signal()  # after each timer redraw (tests, benchmarks)

    def __init__(self, parent: QWidget | None = None, *, smoothing: float = 0.9):
        super().__init__(parent)
        self.buffer = MetricBuffer()
        self._smoothing = float(smoothing)
        self._ema_state = (0.0, 0)  # biased sum, finite count
        self._dirty = False
        self._ema_stale = False
        self._last_epoch: int | None = None
        self._boundaries: list[float] = []
        self._drawn_boundaries = 0
        self._epoch_lines: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self._skipped: list[tuple[float, float]] = []
        self._has_class_loss = False
        self._has_validation = False
        self._scaler_visible = True
        self._total_steps = 0  # the run's length: the x axes end there
        self._titles: dict[pg.PlotItem, str] = {}
        self._titled_empty = True
        self.redraw_count = 0
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_INTERVAL_MS)
        self._timer.timeout.connect(self._on_timer)
        self._build()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(6)
        outer.addLayout(self._build_bar())
        self._build_plots()
        outer.addWidget(self.plots_area, 1)

    def _build_bar(self) -> QHBoxLayout:
        """Smoothing, the readout of the latest values, CSV / PNG export."""
        bar = QHBoxLayout()
        bar.setSpacing(8)
        bar.addWidget(QLabel("Smoothing"))
        self.smoothing_slider = QSlider(Qt.Orientation.Horizontal)
        self.smoothing_slider.setObjectName("smoothing_slider")
        self.smoothing_slider.setRange(0, 99)
        self.smoothing_slider.setFixedWidth(100)
        self.smoothing_slider.setToolTip("How strongly the orange loss curve is smoothed (exponential moving average).")
        self.smoothing_spin = QDoubleSpinBox()
        self.smoothing_spin.setObjectName("smoothing_spin")
        self.smoothing_spin.setRange(0.0, 0.99)
        self.smoothing_spin.setSingleStep(0.05)
        self.smoothing_spin.setDecimals(2)
        self.smoothing_spin.setToolTip(self.smoothing_slider.toolTip())
        self.smoothing_slider.setValue(round(self._smoothing * 100))
        self.smoothing_spin.setValue(self._smoothing)
        self.smoothing_slider.valueChanged.connect(lambda v: self.set_smoothing(v / 100.0))
        self.smoothing_spin.valueChanged.connect(self.set_smoothing)
        bar.addWidget(self.smoothing_slider)
        bar.addWidget(self.smoothing_spin)
        bar.addSpacing(6)
        self.readout = ElidedLabel("No data yet")  # never widens the charts; cut short, whole on hover
        self.readout.setObjectName("chart_readout")
        self.readout.setStyleSheet("color: palette(placeholder-text);")
        bar.addWidget(self.readout, 1)
        self.csv_button = QPushButton("CSV…")  # short: the readout's last value must fit beside them at 1366 px
        self.csv_button.setToolTip("Export: save every series (step, loss, EMA, lr, scale, …) as a CSV file.")
        self.csv_button.clicked.connect(self._export_csv_dialog)
        self.png_button = QPushButton("PNG…")
        self.png_button.setToolTip("Export: save the charts as an image.")
        self.png_button.clicked.connect(self._export_png_dialog)
        for b in (self.csv_button, self.png_button):
            b.setFixedWidth(b.fontMetrics().horizontalAdvance(b.text()) + 28)  # not the style's 80 px minimum
            bar.addWidget(b)
        return bar

    def _build_plots(self) -> None:
        """Loss (wide), learning rate, GradScaler scale (or a note when there is none), seconds per step."""
        self.plots_area = QWidget()
        grid = QGridLayout(self.plots_area)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(6)
        self.loss_widget, self.loss_plot = self._plot("Loss", "loss")
        self.lr_widget, self.lr_plot = self._plot("Learning rate", "lr")
        self.sps_widget, self.sps_plot = self._plot("Seconds per step", "seconds")
        self.scale_widget, self.scale_plot = self._plot("GradScaler loss scale (log)", "scale")
        self.scale_plot.setLogMode(x=False, y=True)

        finite = {"connect": "finite"}  # NaN (no value, or an overflowed loss) leaves a gap
        self.loss_curve = self.loss_plot.plot(name="loss", pen=pg.mkPen(QColor(LOSS_COLOR).lighter(150), width=1), **finite)
        self.ema_curve = self.loss_plot.plot(name="smoothed", pen=pg.mkPen(EMA_COLOR, width=2), **finite)
        self.class_curve: pg.PlotDataItem | None = None
        self.validation_curve: pg.PlotDataItem | None = None  # held-out images, on validation steps only
        self.lr_curve = self.lr_plot.plot(pen=pg.mkPen(LR_COLOR, width=2), **finite)
        self.sps_curve = self.sps_plot.plot(pen=pg.mkPen(SPS_COLOR, width=1), **finite)
        self.scale_curve = self.scale_plot.plot(pen=pg.mkPen(SCALE_COLOR, width=2), **finite)
        self.skip_markers = self.scale_plot.plot(
            name="skipped step", pen=None, symbol="x", symbolSize=9, symbolPen=pg.mkPen(SKIP_COLOR, width=2), symbolBrush=SKIP_COLOR
        )

        self.scale_cell = QStackedWidget()
        self.scale_box = scale_box = QWidget()
        sb = QVBoxLayout(scale_box)
        sb.setContentsMargins(0, 0, 0, 0)
        sb.setSpacing(0)
        sb.addWidget(self.scale_widget, 1)
        self.scale_hint = ElidedLabel(SCALE_HINT, scale_box)
        self.scale_hint.setObjectName("scale_hint")
        self.scale_hint.setToolTip(SCALE_HINT)
        self.scale_hint.setStyleSheet("color: palette(placeholder-text); font-size: 8pt;")
        sb.addWidget(self.scale_hint)
        self.scale_cell.addWidget(scale_box)
        self.no_scaler_note = QLabel(f"<b>Loss scale</b><br>{NO_SCALER_TEXT}: the GradScaler chart is hidden.")
        self.no_scaler_note.setObjectName("no_scaler_note")
        self.no_scaler_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_scaler_note.setWordWrap(True)
        self.no_scaler_note.setFrameShape(QFrame.Shape.StyledPanel)
        self.no_scaler_note.setStyleSheet("color: palette(placeholder-text); padding: 4px;")
        self.no_scaler_note.setToolTip(f"{NO_SCALER_TEXT}: the GradScaler chart is hidden.")
        self.scale_cell.addWidget(self.no_scaler_note)

        grid.addWidget(self.loss_widget, 0, 0, 1, 3)
        grid.addWidget(self.lr_widget, 1, 0)
        grid.addWidget(self.scale_cell, 1, 1)
        grid.addWidget(self.sps_widget, 1, 2)
        # Heights come from the stretch only (3 : 2), never from what a cell's contents would like: a
        # wrapped note or a plot's size hint must not squeeze the loss chart below its axis labels.
        self.loss_widget.setMinimumHeight(LOSS_MIN_HEIGHT)
        for cell in (self.loss_widget, self.lr_widget, self.scale_cell, self.sps_widget, self.no_scaler_note):
            cell.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.scale_cell.setMinimumHeight(SMALL_MIN_HEIGHT + self.scale_hint.sizeHint().height())  # the note under it
        grid.setRowStretch(0, 3)
        grid.setRowStretch(1, 2)
        for column in range(3):
            grid.setColumnStretch(column, 1)
        self._retitle()
        self._reset_views()

    def _reset_views(self) -> None:
        """Empty axes: steps 0 … the run's length, 0 … 1, and a few whole decades on the log scale axis."""
        for plot in (self.loss_plot, self.lr_plot, self.sps_plot, self.scale_plot):
            plot.getViewBox().following = True
            y = EMPTY_SCALE_RANGE if plot is self.scale_plot else (0.0, 1.0)
            plot.getViewBox().setRange(xRange=(0.0, self._total_steps or 1.0), yRange=y, padding=0, disableAutoRange=False)

    def _loss_title(self) -> str:
        """The loss chart's title with its legend (beside the title, never over the curves)."""
        entries = [("loss", QColor(LOSS_COLOR).lighter(150).name(), "━"), ("smoothed", EMA_COLOR, "━")]
        if self.class_curve is not None:
            entries.append(("class loss", CLASS_COLOR, "━"))
        if self.validation_curve is not None:
            entries.append(("validation", VALIDATION_COLOR, "●"))
        keys = "&nbsp;&nbsp;".join(f"<span style='color:{c}'>{mark}</span>&nbsp;{name}" for name, c, mark in entries)
        return f"Loss&nbsp;&nbsp;&nbsp;{keys}"

    def legend_names(self) -> list[str]:
        """The series the loss chart's legend names, in order."""
        names = ["loss", "smoothed"]
        return names + [n for n, c in (("class loss", self.class_curve), ("validation", self.validation_curve)) if c is not None]

    def _retitle(self) -> None:
        self._titled_legend = self.legend_names()
        for plot, title in self._titles.items():
            title = self._loss_title() if plot is self.loss_plot else title
            plot.setTitle(title + (f" — {NO_DATA}" if self._titled_empty else ""), color=self._fg().name(), size="9pt")
            _loose_title(plot)

    def _fg(self) -> QColor:
        return self.palette().color(QPalette.ColorRole.WindowText)

    def _plot(self, title: str, key: str) -> tuple[pg.PlotWidget, pg.PlotItem]:
        bg = self.palette().color(QPalette.ColorRole.Base)
        fg = self._fg()
        w = pg.PlotWidget(
            background=bg, viewBox=FollowViewBox(log_y=key == "scale"), axisItems={"bottom": CountAxis("bottom")}
        )
        w.setObjectName(f"plot_{key}")
        w.setMinimumHeight(SMALL_MIN_HEIGHT)
        p = w.getPlotItem()
        self._titles[p] = title
        p.setTitle(f"{title} — {NO_DATA}", color=fg.name(), size="9pt")
        p.layout.removeItem(p.titleLabel)
        p.layout.addItem(p.titleLabel, 0, 0, 1, 3)  # over the left axis too: the whole width for the words
        _loose_title(p)
        # No grid: pyqtgraph draws it with the axes, which would then repaint with every new point.
        p.setDownsampling(auto=True, mode="peak")
        p.setClipToView(True)
        p.setMenuEnabled(True)
        for name in ("left", "bottom"):
            ax = p.getAxis(name)
            ax.setPen(pg.mkPen(fg.lighter(160) if fg.lightness() < 128 else fg.darker(160)))
            ax.setTextPen(pg.mkPen(fg))
        p.getAxis("left").setWidth(58)  # a fixed width: new tick labels never re-lay-out the plot
        return w, p

    # ------------------------------------------------------------------ data in
    def add(self, m: StepMetrics) -> None:
        """Append one step (cheap: array writes only; drawing happens on the timer)."""
        loss = float(m.loss)
        s, k = self._ema_state
        a = self._smoothing
        if math.isfinite(loss):
            s, k = a * s + (1.0 - a) * loss, k + 1
            self._ema_state = (s, k)
        smoothed = (s / (1.0 - a**k) if a > 0 else s) if k else math.nan
        if self._last_epoch is not None and m.epoch != self._last_epoch:
            self._boundaries.append(m.step - 0.5)
        self._last_epoch = m.epoch
        self._total_steps = max(int(m.total_steps or 0), self._total_steps)
        scale = math.nan if m.grad_scale is None else float(m.grad_scale)
        if m.class_loss is not None:
            self._has_class_loss = True
        validation = getattr(m, "validation_loss", None)
        if validation is not None:
            self._has_validation = True
        if m.skipped and math.isfinite(scale):
            self._skipped.append((float(m.step), scale))
        self.buffer.append(
            {
                "step": float(m.step),
                "epoch": float(m.epoch),
                "loss": loss,
                "loss_ema": smoothed,
                "class_loss": math.nan if m.class_loss is None else float(m.class_loss),
                "lr": float(m.lr),
                "grad_scale": scale,
                "skipped": 1.0 if m.skipped else 0.0,
                "seconds_per_step": float(m.seconds_per_step),
                "images_per_second": float(m.images_per_second),
                "validation_loss": math.nan if validation is None else float(validation),
            }
        )
        if m.grad_scale is not None and not self._scaler_visible:
            self.set_scaler_visible(True)  # the data says there is a scaler
        self._dirty = True
        if not self._timer.isActive():
            self._timer.start()

    def clear(self, total_steps: int = 0) -> None:
        """Forget every point and the last run's axes (a new run of ``total_steps``, when known)."""
        self.buffer.clear()
        self._total_steps = max(0, int(total_steps))
        self._ema_state = (0.0, 0)
        self._last_epoch = None
        self._boundaries.clear()
        self._skipped.clear()
        for plot, line in self._epoch_lines:
            plot.removeItem(line)
        self._epoch_lines.clear()
        self._drawn_boundaries = 0
        self._has_class_loss = False
        if self.class_curve is not None:
            self.loss_plot.removeItem(self.class_curve)
            self.class_curve = None
        self._has_validation = False
        if self.validation_curve is not None:
            self.loss_plot.removeItem(self.validation_curve)
            self.validation_curve = None
        self.redraw()
        self._reset_views()

    def __len__(self) -> int:
        return len(self.buffer)

    def series(self, name: str) -> np.ndarray:
        """A copy of one series (see :data:`COLUMNS`)."""
        return self.buffer.column(name).copy()

    @property
    def smoothing(self) -> float:
        return self._smoothing

    def set_smoothing(self, value: float) -> None:
        """EMA factor in [0, 0.99]; the whole smoothed curve is recomputed at the next redraw."""
        value = min(0.99, max(0.0, float(value)))
        if abs(value - self._smoothing) < 1e-9:
            return
        self._smoothing = value
        self.smoothing_slider.blockSignals(True)
        self.smoothing_slider.setValue(round(value * 100))
        self.smoothing_slider.blockSignals(False)
        self.smoothing_spin.blockSignals(True)
        self.smoothing_spin.setValue(value)
        self.smoothing_spin.blockSignals(False)
        self._ema_stale = True
        self._dirty = True
        if not self._timer.isActive():
            self._timer.start()

    # ------------------------------------------------------------------ scaler
    @property
    def scaler_visible(self) -> bool:
        return self._scaler_visible

    def set_scaler_visible(self, visible: bool) -> None:
        """Show the loss-scale plot, or a one-line note that this precision has no scaler."""
        self._scaler_visible = bool(visible)
        self.scale_cell.setCurrentWidget(self.scale_box if visible else self.no_scaler_note)

    # ------------------------------------------------------------------ drawing
    def _on_timer(self) -> None:
        if not self._dirty:
            self._timer.stop()
            return
        self.redraw()

    def redraw(self) -> None:
        """Push the buffers into the curves now (the timer calls this when data changed)."""
        self._dirty = False
        buf = self.buffer
        if self._ema_stale:
            self._recompute_ema()
        x = buf.column("step")
        self.loss_curve.setData(x, buf.column("loss"))
        self.ema_curve.setData(x, buf.column("loss_ema"))
        self.lr_curve.setData(x, buf.column("lr"))
        self.sps_curve.setData(x, buf.column("seconds_per_step"))
        if self._scaler_visible:
            self.scale_curve.setData(x, buf.column("grad_scale"))
            if self._skipped:
                sk = np.asarray(self._skipped)
                self.skip_markers.setData(sk[:, 0], sk[:, 1])
            else:
                self.skip_markers.setData([], [])
        if self._has_class_loss:
            if self.class_curve is None:
                self.class_curve = self.loss_plot.plot(
                    name="class loss", pen=pg.mkPen(CLASS_COLOR, width=1), connect="finite"
                )
            self.class_curve.setData(x, buf.column("class_loss"))
        if self._has_validation:
            self._draw_validation(x)
        self._frame()
        self._draw_epoch_lines()
        self._update_readout()
        if self._titled_empty != (len(buf) == 0) or self._titled_legend != self.legend_names():
            self._titled_empty = len(buf) == 0  # empty charts say so instead of showing bare ticks
            self._retitle()
        self.redraw_count += 1
        self.redrawn.emit()

    def _draw_validation(self, x: np.ndarray) -> None:
        """The validation loss: a point on each validation step, joined (the steps between have none)."""
        if self.validation_curve is None:
            self.validation_curve = self.loss_plot.plot(
                name="validation",
                pen=pg.mkPen(VALIDATION_COLOR, width=2),
                symbol="o",
                symbolSize=5,
                symbolBrush=VALIDATION_COLOR,
                symbolPen=None,
            )
        v = self.buffer.column("validation_loss")
        scored = np.isfinite(v)
        self.validation_curve.setData(x[scored], v[scored])

    def _frame(self) -> None:
        """Keep the data in view (plots the user has not panned or zoomed); all plots show the same steps."""
        col = self.buffer.column
        x = bounds(col("step"))
        whole = (0.0, max(float(self._total_steps), x[1])) if x is not None and self._total_steps else None
        lead = self.loss_plot.getViewBox()  # the x axes end at the run's last step, not a step beyond
        lead.follow(x, bounds(col("loss"), col("loss_ema"), col("class_loss"), col("validation_loss")), x_exact=whole)
        same_x = tuple(lead.viewRange()[0]) if lead.following else None
        self.lr_plot.getViewBox().follow(x, bounds(col("lr")), x_exact=same_x)
        self.sps_plot.getViewBox().follow(x, bounds(col("seconds_per_step")), x_exact=same_x)
        if self._scaler_visible:
            self.scale_plot.getViewBox().follow(x, bounds(col("grad_scale"), positive=True), x_exact=same_x)

    def _recompute_ema(self) -> None:
        self._ema_stale = False
        loss = self.buffer.column("loss")
        self.buffer.set_column("loss_ema", ema(loss, self._smoothing))
        finite = loss[np.isfinite(loss)]
        a = self._smoothing
        s = 0.0
        for v in finite.tolist():
            s = a * s + (1.0 - a) * v
        self._ema_state = (s, len(finite))

    def _draw_epoch_lines(self) -> None:
        pen = pg.mkPen(self._fg(), width=1, style=Qt.PenStyle.DashLine)
        pen.setColor(QColor(128, 128, 128, 140))
        while self._drawn_boundaries < min(len(self._boundaries), MAX_EPOCH_LINES):
            pos = self._boundaries[self._drawn_boundaries]
            for plot in (self.loss_plot, self.lr_plot, self.sps_plot, self.scale_plot):
                line = pg.InfiniteLine(pos=pos, angle=90, pen=pen, movable=False)
                line.setToolTip(f"epoch {self._drawn_boundaries + 2} starts")
                plot.addItem(line, ignoreBounds=True)
                self._epoch_lines.append((plot, line))
            self._drawn_boundaries += 1

    def _update_readout(self) -> None:
        n = len(self.buffer)
        if not n:
            self.readout.setText("No data yet")
            return
        i = n - 1
        col = self.buffer.column
        parts = [f"step {int(col('step')[i])}", f"loss {col('loss')[i]:.4g}"]
        e = col("loss_ema")[i]
        if math.isfinite(e):
            parts.append(f"smoothed {e:.4g}")
        parts.append(f"lr {col('lr')[i]:.3g}")
        sc = col("grad_scale")[i]
        if math.isfinite(sc):
            parts.append(f"scale {sc:g}")
        if self._skipped:
            parts.append(f"{len(self._skipped)} skipped")
        self.readout.setText(" · ".join(parts))

    @property
    def epoch_boundaries(self) -> list[float]:
        return list(self._boundaries)

    @property
    def skipped_steps(self) -> list[int]:
        return [int(s) for s, _ in self._skipped]

    # ------------------------------------------------------------------ export
    def export_csv(self, path: str | Path) -> int:
        """Write every series as CSV (empty cells where a series has no value); returns the row count."""
        if self._ema_stale:
            self._recompute_ema()
        cols = [self.buffer.column(c) for c in COLUMNS]
        ints = {"step", "epoch", "skipped"}
        n = len(self.buffer)
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for i in range(n):
                row = []
                for name, c in zip(COLUMNS, cols):
                    v = float(c[i])
                    if not math.isfinite(v):
                        row.append("")
                    elif name in ints:
                        row.append(str(int(v)))
                    else:
                        row.append(repr(v))
                w.writerow(row)
        log.info("exported %d chart rows to %s", n, path)
        return n

    def export_png(self, path: str | Path) -> bool:
        """Save the plots as a PNG image (a grab of the chart area, as seen)."""
        if self._dirty:
            self.redraw()
        ok = bool(self.plots_area.grab().save(str(path), "PNG"))
        if not ok:
            log.warning("could not write %s", path)
        return ok

    def _export_csv_dialog(self) -> None:
        path = start_dirs.choose_save_path(self, "Export chart data", "charts", "training_metrics.csv", "CSV (*.csv)")
        if path:
            try:
                self.export_csv(path)
            except OSError as e:
                self.readout.setText(f"Could not save {path}: {e}")

    def _export_png_dialog(self) -> None:
        path = start_dirs.choose_save_path(self, "Export charts", "charts", "training_charts.png", "PNG image (*.png)")
        if path and not self.export_png(path):
            self.readout.setText(f"Could not save {path}")
