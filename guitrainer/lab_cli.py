"""``guitrainer-train CONFIG --compare-precisions [--steps N] [--json]``: the precision lab, headless.

Prints the same table as the app's precision lab (or the report as JSON with ``--json``); progress goes
to stderr. Ctrl+C cancels: the candidate running stops at its next step, nothing keeps running.
Exit status: 0 when a candidate was measured, 1 when none could run, 130 when cancelled.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guitrainer.config import TrainingConfig
    from guitrainer.core.precision.lab import LabProgress

DEFAULT_STEPS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The lab's options on the training CLI's parser."""
    parser.add_argument(
        "--compare-precisions",
        action="store_true",
        help="measure fp32, fp16 AMP and bf16 AMP (and fp8 base weights where possible) with this config "
        "on this machine, print the comparison, then exit (nothing is trained or saved)",
    )
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="with --compare-precisions: timed steps per precision")
    parser.add_argument("--json", action="store_true", help="with --compare-precisions: print the report as JSON")


def run(cfg: TrainingConfig, *, steps: int = DEFAULT_STEPS, as_json: bool = False) -> int:
    """Run the lab on ``cfg``; print the table (or JSON). Returns the exit status."""
    if steps < 1:
        print(f"error: --steps must be at least 1, not {steps}", file=sys.stderr)
        return 2
    from guitrainer.core.events import Control
    from guitrainer.core.precision.lab import format_table
    from guitrainer.engine.lab.precision_lab import compare_precisions

    control = Control()
    last = [""]

    def progress(p: LabProgress) -> None:
        key = f"{p.index}:{p.step == 0}"
        if key != last[0]:  # one line when a candidate sets up and one when it starts stepping
            last[0] = key
            print(f"[{p.index + 1}/{p.count}] {p.message}", file=sys.stderr, flush=True)

    with _cancel_on_sigint(control):
        report = compare_precisions(cfg, None, steps, progress=progress, control=control)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(format_table(report))
    if report.cancelled:
        return 130
    return 0 if any(r.ran for r in report.results) else 1


class _cancel_on_sigint:  # noqa: N801 - used as a context manager
    """The first Ctrl+C cancels the lab; a second one aborts (KeyboardInterrupt). Main thread only."""

    def __init__(self, control: object):
        self.control = control
        self.previous: object = None
        self.armed = False

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self.armed = True

        def on_sigint(signum: int, frame: object) -> None:
            if self.control.stop_requested:  # type: ignore[attr-defined]
                raise KeyboardInterrupt
            self.control.request_stop()  # type: ignore[attr-defined]
            print("\nCtrl+C: cancelling after this step; press Ctrl+C again to abort", file=sys.stderr, flush=True)

        self.previous = signal.signal(signal.SIGINT, on_sigint)

    def __exit__(self, *exc: object) -> None:
        if self.armed:
            signal.signal(signal.SIGINT, self.previous if self.previous is not None else signal.SIG_DFL)  # type: ignore[arg-type]
