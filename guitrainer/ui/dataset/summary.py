"""The Dataset page's summary: :class:`SummaryPanel` shows it, :class:`SummaryRunner` computes it in slices.

The numbers come from :class:`~guitrainer.core.dataset.report.SummaryBuilder` (no Qt); the runner only
spreads its slices over event-loop turns of at most :data:`SUMMARY_BUDGET_S` each, so the GUI thread
stays responsive with thousands of images.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QWidget

from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.report import SummaryBuilder, SummaryParams, summary_html
from guitrainer.core.dataset.scan import DatasetItem

SUMMARY_BUDGET_S = 0.008  # GUI-thread time the summary may take per event-loop turn
SUMMARY_DELAY_MS = 150  # edits within this time are summed up once

Result = tuple[ds.DatasetSummary, list[tuple[str, int]]]


class SummaryPanel(QLabel):
    """Counts, resolution histogram, buckets with counts and steps per epoch, as a small HTML table."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.summary: ds.DatasetSummary | None = None

    def show_summary(self, s: ds.DatasetSummary, batch_size: int, bucketing: bool) -> None:
        self.summary = s
        self.setText(summary_html(s, batch_size, bucketing))


class SummaryRunner(QObject):
    """Recomputes the summary after changes: ``ready(summary, tag_counts, params)`` or ``failed(why)``.

    Args:
        items: the images now (called when a computation starts).
        params: the summary settings now.
    """

    ready = Signal(object, object, object)
    failed = Signal(str)

    def __init__(
        self,
        items: Callable[[], Sequence[DatasetItem]],
        params: Callable[[], SummaryParams],
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self._items, self._params = items, params
        self.builder = SummaryBuilder()
        self._run: Iterator[Result | None] | None = None
        self._running_params = SummaryParams()
        self._delay = QTimer(self)
        self._delay.setSingleShot(True)
        self._delay.setInterval(SUMMARY_DELAY_MS)
        self._delay.timeout.connect(self._start)
        self._steps = QTimer(self)  # drives the slices of a running summary
        self._steps.setInterval(0)
        self._steps.timeout.connect(self._step)

    def schedule(self) -> None:
        """Recompute soon (several changes in a row are summed up once)."""
        self._delay.start()

    def update_now(self) -> None:
        """Recompute now, in one go."""
        self._steps.stop()
        self._run = None
        params = self._params()
        try:
            s, freq = self.builder.compute(self._items(), params)
        except ValueError as e:  # e.g. min bucket side above max while the user is typing
            self.failed.emit(str(e))
            return
        self.ready.emit(s, freq, params)

    def _start(self) -> None:
        self._running_params = self._params()
        self._run = self.builder.run(list(self._items()), self._running_params)
        self._step()
        if self._run is not None:
            self._steps.start()

    def _step(self) -> None:
        run = self._run
        if run is None:
            self._steps.stop()
            return
        t0 = time.perf_counter()
        try:
            while time.perf_counter() - t0 < SUMMARY_BUDGET_S:
                out = next(run)
                if out is not None:
                    self._run = None
                    self._steps.stop()
                    self.ready.emit(out[0], out[1], self._running_params)
                    return
        except ValueError as e:  # e.g. min bucket side above max while the user is typing
            self._run = None
            self._steps.stop()
            self.failed.emit(str(e))
