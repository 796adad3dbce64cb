"""The Training page's "Numerics" tab: headroom per block over time, LoRA gradient underflow, skipped steps.

Fed with :class:`~guitrainer.core.events.StepMetrics`; only sampled steps (the first, then every 50th)
carry headroom and underflow, and skipped steps carry the first non-finite module. Quiet by default: the
tab asks for attention (:attr:`NumericsChart.alarm`, the ``alarm_changed`` signal) only when a block's
headroom falls under 4x its dtype's limit or the underflow share rises over 5 %
(:func:`guitrainer.core.precision.numerics.alarm`). Points go into :class:`~guitrainer.ui.training.charts.MetricBuffer`\\ s
and the curves are redrawn by a timer at most 10 times a second, as the training charts are.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QTabWidget, QVBoxLayout, QWidget

from guitrainer.core.events import StepMetrics
from guitrainer.core.precision.numerics import (
    DEFAULT_EVERY,
    HEADROOM_WARN,
    KIND_TITLES,
    UNDERFLOW_WARN,
    alarm,
    block_title,
    format_limit,
    headroom_readout,
)
from guitrainer.ui.training.charts import REDRAW_INTERVAL_MS, SKIP_COLOR, MetricBuffer
from guitrainer.ui.widgets.elided import ElidedLabel

#: the tab's text colour while the chart asks for attention
ALARM_COLOR = "#e8590c"
TAB_TITLE = "Numerics"
LIMIT_COLOR = "#e03131"
UNDERFLOW_COLOR = "#7048e8"
#: one hue per kind of block; blocks of a kind differ in lightness (deeper blocks darker)
KIND_COLORS = {"attn": "#1c7ed6", "ff": "#f08c00", "res": "#868e96", "io": "#2b8a3e"}
SHADES = (100, 140, 70, 175, 50)
#: each plot's least height: its title, a few decades of axis and the step axis, readable
PLOT_MIN_HEIGHT = 120
#: the vertical room one tick label of the headroom axis takes (no two labels closer)
TICK_PITCH_PX = 26
QUIET_TEXT = "Sampled on the first step and every {every}th: largest activation per block, LoRA gradient underflow."


class NumericsChart(QWidget):
    """Headroom (log scale, the dtype's limit as a line at 1x) and underflow share, per sampled step."""

    alarm_changed = Signal(bool)
    redrawn = Signal()

    def __init__(self, parent: QWidget | None = None, *, precision: str = "fp16", every: int = DEFAULT_EVERY):
        super().__init__(parent)
        self.precision = precision
        self.every = every
        self.blocks: dict[str, MetricBuffer] = {}  # block -> (step, headroom)
        self.underflow = MetricBuffer(("step", "underflow"), capacity=64)
        self.skipped: list[int] = []
        self.last_message = ""
        self._alarm = False
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._dirty = False
        self.redraw_count = 0
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_INTERVAL_MS)
        self._timer.timeout.connect(self._on_timer)
        self._build()
        self.set_precision(precision)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        """A one-line readout, the skip message, the legend, then the two plots side by side (headroom wider): each
        plot gets the tab's whole height (the tab gets its room from ``layout.make_room_for``)."""
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        outer.setSpacing(4)
        self.readout = ElidedLabel(QUIET_TEXT.format(every=self.every))  # one line: the whole text on hover when cut
        self.readout.setObjectName("numerics_readout")
        self.readout.setStyleSheet("color: palette(placeholder-text);")
        outer.addWidget(self.readout)
        self.skip_label = QLabel("")
        self.skip_label.setObjectName("numerics_skip")
        self.skip_label.setWordWrap(True)
        self.skip_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.skip_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.skip_label.hide()
        outer.addWidget(self.skip_label)

        self.headroom_widget, self.headroom_plot = self._plot("headroom", "Headroom per block: limit ÷ largest |activation| (log)")
        self.headroom_plot.setLogMode(x=False, y=True)
        self.limit_line = pg.InfiniteLine(
            pos=0.0, angle=0, pen=pg.mkPen(LIMIT_COLOR, width=2), movable=False, label="",
            labelOpts={"position": 0.98, "color": LIMIT_COLOR, "anchors": [(1, 1), (1, 1)]},  # right: clear of the axis
        )
        warn_pen = pg.mkPen(ALARM_COLOR, width=1, style=Qt.PenStyle.DashLine)
        self.warn_line = pg.InfiniteLine(pos=math.log10(HEADROOM_WARN), angle=0, pen=warn_pen, movable=False)
        self.warn_line.setToolTip(f"{HEADROOM_WARN:g}x: the tab turns orange below this line")
        for line in (self.limit_line, self.warn_line):
            self.headroom_plot.addItem(line, ignoreBounds=True)
        self.skip_markers = self.headroom_plot.plot(
            pen=None, symbol="x", symbolSize=10, symbolPen=pg.mkPen(SKIP_COLOR, width=2), symbolBrush=SKIP_COLOR
        )
        self.legend = QLabel(self._legend_html())
        self.legend.setObjectName("numerics_legend")
        outer.addWidget(self.legend)
        plots = QHBoxLayout()
        plots.setSpacing(6)
        plots.addWidget(self.headroom_widget, 3)
        outer.addLayout(plots, 1)
        self.headroom_plot.getViewBox().sigYRangeChanged.connect(lambda *_: self._set_headroom_ticks())

        self.underflow_widget, self.underflow_plot = self._plot("underflow", "LoRA gradients lost in fp16 (%)")
        self.underflow_widget.setToolTip(
            "The share of LoRA gradient values that are zero or subnormal in fp16 after loss scaling: lost to "
            "underflow. The tab turns orange above the dashed line."
        )
        self.underflow_curve = self.underflow_plot.plot(
            pen=pg.mkPen(UNDERFLOW_COLOR, width=2), symbol="o", symbolSize=5, symbolBrush=UNDERFLOW_COLOR, connect="finite"
        )
        threshold = pg.InfiniteLine(pos=UNDERFLOW_WARN * 100, angle=0, pen=warn_pen, movable=False)
        threshold.setToolTip(f"{UNDERFLOW_WARN:.0%}: the tab turns orange above this line")
        self.underflow_plot.addItem(threshold)
        plots.addWidget(self.underflow_widget, 2)

    @staticmethod
    def _legend_html() -> str:
        """One line under the title: the kinds' colours, the skip mark, the two lines."""
        items = [f'<span style="color:{c}">━</span> {KIND_TITLES[k]}' for k, c in KIND_COLORS.items()]
        items.append(f'<span style="color:{SKIP_COLOR}">✕</span> skipped step')
        items.append(f'<span style="color:{LIMIT_COLOR}">━</span> limit (1×)')
        items.append(f'<span style="color:{ALARM_COLOR}">╌</span> {HEADROOM_WARN:g}×: the tab turns orange below')
        return " &nbsp; ".join(items)

    def _fg(self) -> QColor:
        return self.palette().color(QPalette.ColorRole.WindowText)

    def _plot(self, key: str, title: str) -> tuple[pg.PlotWidget, pg.PlotItem]:
        fg = self._fg()
        w = pg.PlotWidget(background=self.palette().color(QPalette.ColorRole.Base))
        w.setObjectName(f"plot_{key}")
        w.setMinimumHeight(PLOT_MIN_HEIGHT)
        p = w.getPlotItem()
        p.setTitle(title, color=fg.name(), size="9pt")
        p.setMenuEnabled(True)
        for name in ("left", "bottom"):
            ax = p.getAxis(name)
            ax.setPen(pg.mkPen(fg.lighter(160) if fg.lightness() < 128 else fg.darker(160)))
            ax.setTextPen(pg.mkPen(fg))
        p.getAxis("left").setWidth(58)
        return w, p

    def set_precision(self, precision: str) -> None:
        """Name the limit line after the run's compute dtype (fp16: 65,504)."""
        self.precision = precision
        self.limit_line.setToolTip(f"{precision} limit ({format_limit(precision)}): values beyond it become inf")
        self.limit_line.label.setFormat(f"{precision} limit {format_limit(precision)}")
        self.underflow_widget.setVisible(precision == "fp16")

    def start_run(self, precision: Any, *, clear: bool = True) -> None:
        """A run starts with ``precision`` (its :class:`PrecisionConfig`): forget the last run's points unless
        ``clear`` is False (a resume that continues them), name the limit, note the sampling interval."""
        if clear:
            self.clear()
        self.every = int(precision.numerics_every)
        self.set_precision(str(precision.training))

    # ------------------------------------------------------------------ data in
    def add(self, m: StepMetrics) -> None:
        """Take one step's numerics (steps without any are passed over: cheap)."""
        if not m.headroom and m.grad_underflow is None and not m.skipped and not m.numerics_message:
            return
        step = float(m.step)
        for block, value in m.headroom:
            buf = self.blocks.get(block)
            if buf is None:
                buf = self.blocks[block] = MetricBuffer(("step", "headroom"), capacity=64)
            buf.append({"step": step, "headroom": value if math.isfinite(value) and value > 0 else math.nan})
        if m.grad_underflow is not None:
            self.underflow.append({"step": step, "underflow": 100.0 * m.grad_underflow})
        if m.skipped:
            self.skipped.append(m.step)
        if m.numerics_message:
            self.last_message = m.numerics_message
        if m.headroom or m.grad_underflow is not None:
            low = min((h for _, h in m.headroom), default=None)
            self._set_alarm(alarm(low, m.grad_underflow))
        self._dirty = True
        if not self._timer.isActive():
            self._timer.start()

    def clear(self) -> None:
        """Forget every point (a new run)."""
        for curve in self._curves.values():
            self.headroom_plot.removeItem(curve)
        self._curves.clear()
        self.blocks.clear()
        self.underflow.clear()
        self.skipped.clear()
        self.last_message = ""
        self._set_alarm(False)
        self._dirty = True
        self.redraw()

    @property
    def alarm(self) -> bool:
        return self._alarm

    def _set_alarm(self, value: bool) -> None:
        if value != self._alarm:
            self._alarm = value
            self.alarm_changed.emit(value)

    def latest(self) -> dict[str, float]:
        """The last sampled headroom of every block."""
        out: dict[str, float] = {}
        for block, buf in self.blocks.items():
            if len(buf):
                out[block] = float(buf.column("headroom")[-1])
        return out

    # ------------------------------------------------------------------ drawing
    def _on_timer(self) -> None:
        if not self._dirty:
            self._timer.stop()
            return
        self.redraw()

    def _color(self, block: str) -> QColor:
        """The kind's hue; blocks of one kind in turn lighter and darker shades, in forward order."""
        kind = block.rsplit(".", 1)[-1]
        base = QColor(KIND_COLORS.get(kind, KIND_COLORS["io"]))
        same = [b for b in self.blocks if b.rsplit(".", 1)[-1] == kind]
        shade = SHADES[(same.index(block) if block in same else 0) % len(SHADES)]
        return base.lighter(shade) if shade >= 100 else base.darker(10000 // shade)

    def redraw(self) -> None:
        """Push the buffers into the curves (the timer calls this when data changed)."""
        self._dirty = False
        for block, buf in self.blocks.items():
            curve = self._curves.get(block)
            if curve is None:
                curve = self.headroom_plot.plot(
                    pen=pg.mkPen(self._color(block), width=1.5), symbol="o", symbolSize=4,
                    symbolBrush=self._color(block), symbolPen=None, connect="finite",
                )
                curve.setToolTip(block_title(block))
                self._curves[block] = curve
            curve.setData(buf.column("step"), buf.column("headroom"))
        if self.skipped:
            self.skip_markers.setData(np.asarray(self.skipped, float), np.ones(len(self.skipped)))
        else:
            self.skip_markers.setData([], [])
        self.underflow_curve.setData(self.underflow.column("step"), self.underflow.column("underflow"))
        steps = [float(buf.column("step")[-1]) for buf in self.blocks.values() if len(buf)]
        if steps:  # whole steps from 0: one sampled step is not drawn on an axis running 0.5 … 1.5
            for plot in (self.headroom_plot, self.underflow_plot):
                plot.setXRange(0, max(max(steps), 1.0), padding=0.02)
        self._update_text()
        self.redraw_count += 1
        self.redrawn.emit()

    def _set_headroom_ticks(self) -> None:
        """The headroom axis labelled at whole decades, as many as its height has room for: never overlapping."""
        low, high = self.headroom_plot.getViewBox().viewRange()[1]
        slots = max(2, int(self.headroom_plot.getViewBox().height() // TICK_PITCH_PX))
        ticks = decade_ticks(low, high, slots)
        # within one decade whole decades say too little: pyqtgraph's own ticks then (few, at this range)
        self.headroom_plot.getAxis("left").setTicks([ticks, []] if len(ticks) >= 2 else None)

    def _update_text(self) -> None:
        underflow = float(self.underflow.column("underflow")[-1]) if len(self.underflow) else None
        text = headroom_readout(self.precision, self.latest(), underflow, len(self.skipped))
        self.readout.setText(text or QUIET_TEXT.format(every=self.every))
        color = ALARM_COLOR if self._alarm else "palette(placeholder-text)"
        self.readout.setStyleSheet(f"color: {color};")
        self.skip_label.setVisible(bool(self.last_message))
        self.skip_label.setText(self.last_message)
        self.skip_label.setStyleSheet(f"color: {SKIP_COLOR};")


def decade_ticks(low: float, high: float, slots: int) -> list[tuple[float, str]]:
    """Ticks for a log10 axis showing ``low``..``high`` (exponents): whole decades, every 1, 2, 5, 10… of them so
    that at most ``slots`` labels fit ("1", "10", "100", "1,000", then "1e4", "1e10" — never 38 digits)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return []
    first, last = math.ceil(low), math.floor(high)
    step = 1
    for step in (1, 2, 5, 10, 20, 50, 100):
        if (last - first) // step + 1 <= slots:
            break
    start = math.ceil(first / step) * step
    return [(float(e), f"{10 ** e:,}" if 0 <= e <= 3 else f"1e{e}") for e in range(start, last + 1, step)]


def add_numerics_tab(tabs: QTabWidget, precision: str = "fp16", every: int = DEFAULT_EVERY) -> NumericsChart:
    """Add a "Numerics" tab holding a new :class:`NumericsChart` to ``tabs``; its title turns to the warning
    colour (and gains a "!") while the chart's alarm is on, and goes back when it clears."""
    chart = NumericsChart(precision=precision, every=every)
    chart.setObjectName("numerics_chart")
    index = tabs.addTab(chart, TAB_TITLE)
    tabs.setTabToolTip(index, "How close each block runs to its precision's limit, and where an inf/NaN began.")
    bar = tabs.tabBar()
    normal = bar.tabTextColor(index)

    def on_alarm(on: bool) -> None:
        i = tabs.indexOf(chart)
        if i < 0:
            return
        bar.setTabTextColor(i, QColor(ALARM_COLOR) if on else normal)
        tabs.setTabText(i, f"{TAB_TITLE} !" if on else TAB_TITLE)

    chart.alarm_changed.connect(on_alarm)
    return chart

