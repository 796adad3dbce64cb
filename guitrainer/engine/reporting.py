"""Console reporter for the headless CLI: a tqdm progress bar with loss, lr and loss scale.

Into a file or a pipe (a log, ``nohup``, a job scheduler) a redrawn bar would leave one line per redraw, so
there the progress is a plain line every 5 % of the run (and at least every 30 s), the same fields in words.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from guitrainer.core.events import SampleImage, SavedFile, StepMetrics

log = logging.getLogger(__name__)


class ConsoleReporter:
    """Implements :class:`guitrainer.core.events.Reporter` for a terminal. ``quiet`` drops the bar and statuses."""

    def __init__(self, quiet: bool = False, stream: Any = None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self._bar: Any = None
        self.last: StepMetrics | None = None
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty()) if callable(isatty) else False
        self._line_at: tuple[int, float] | None = None  # (step, time) of the last progress line (no terminal)

    def _write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream)

    def on_step(self, metrics: StepMetrics) -> None:
        self.last = metrics
        self._numerics(metrics)
        if self.quiet:
            return
        if not self.tty:
            self._line(metrics)
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=metrics.total_steps, unit="step", file=self.stream, dynamic_ncols=True)
        bar = self._bar
        if bar.total != metrics.total_steps:
            bar.total = metrics.total_steps
        bar.n = metrics.step
        bar.set_postfix(_fields(metrics), refresh=False)
        bar.refresh()

    def _line(self, m: StepMetrics) -> None:
        """One plain progress line at the first and last step, every 5 % of the run and at least every 30 s."""
        now = time.monotonic()
        every = max(1, m.total_steps // 20)
        last_step, last_time = self._line_at or (0, now)
        due = self._line_at is None or m.step >= m.total_steps or m.step // every > last_step // every
        if not due and now - last_time < 30.0:
            return
        self._line_at = (m.step, now)
        share = f" ({m.step / m.total_steps:.0%})" if m.total_steps else ""
        fields = " ".join(f"{k}={v}" for k, v in _fields(m).items())
        print(f"step {m.step}/{m.total_steps}{share} {fields}", file=self.stream, flush=True)

    def _numerics(self, m: StepMetrics) -> None:
        """A sampled step that draws the eye (headroom under 4x, underflow over 5 %): one line, even when quiet.
        Skipped steps are named by the engine's status line (``step N skipped: inf first seen in ...``)."""
        if not m.headroom and m.grad_underflow is None:
            return
        from guitrainer.core.precision.numerics import alarm, block_title

        low = min(m.headroom, key=lambda bh: bh[1], default=None)
        if not alarm(low[1] if low else None, m.grad_underflow):
            return
        parts = [f"numerics at step {m.step}:"]
        if low is not None:
            parts.append(f"lowest headroom {low[1]:,.1f}x ({block_title(low[0])})")
        if m.grad_underflow is not None:
            parts.append(f"LoRA gradient underflow {m.grad_underflow:.1%}")
        self._write("warning: " + " ".join(parts))

    def on_status(self, text: str) -> None:
        if not self.quiet:
            self._write(text)

    def on_warning(self, text: str) -> None:
        self._write(f"warning: {text}")

    def on_saved(self, saved: SavedFile) -> None:
        if not self.quiet:
            self._write(f"saved {saved.kind}: {saved.path}")
        report = saved.save_report
        if report is not None and report.checked and (report.harmed or report.used != report.requested):
            self._write(f"save precision: {report.headline()}")

    def on_sample(self, sample: SampleImage) -> None:
        if not self.quiet:
            self._write(f"sample: {sample.path} ({sample.prompt})")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _fields(m: StepMetrics) -> dict[str, Any]:
    """The figures a progress report shows beside the step count."""
    post: dict[str, Any] = {"epoch": m.epoch, "loss": f"{m.loss:.4f}", "lr": f"{m.lr:.2e}"}
    if m.grad_scale is not None:
        post["scale"] = f"{m.grad_scale:g}"
    if m.skipped_total:
        post["skipped"] = m.skipped_total
    return post
