"""What a run tells the user (status lines, warnings) and the one Stop check of the set-up.

Every part of the engine (building the session, caching, saving, the loop) reports through one
:class:`Feedback`, so warnings are collected once for the :class:`~guitrainer.core.events.RunSummary` and
only the main process talks to the reporter.
"""

from __future__ import annotations

import logging

from guitrainer.core.events import Control, NullReporter, Reporter
from guitrainer.engine.distributed import Processes
from guitrainer.engine.errors import StoppedBeforeTraining

log = logging.getLogger(__name__)


class Feedback:
    """The reporter, the control flags and the warnings of one run."""

    def __init__(self, reporter: Reporter | None = None, control: Control | None = None) -> None:
        self.reporter: Reporter = reporter or NullReporter()
        self.control = control or Control()
        self.warnings: list[str] = []
        self.main = True  # set from the processes once accelerate is up
        self.processes: Processes | None = None

    def set_processes(self, processes: Processes) -> None:
        self.processes = processes
        self.main = processes.main

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        log.warning(text)
        if self.main:
            self.reporter.on_warning(text)

    def status(self, text: str) -> None:
        log.info(text)
        if self.main:
            self.reporter.on_status(text)

    def stop_if_asked(self, during: str, *, every_process: bool = False) -> None:
        """Set-up is long (loading, caching): a Stop pressed meanwhile ends the run here, before any step.

        Cache entries already written stay on disk, so the next run starts where this one stopped.

        Several processes must stop at the same point, or the others would wait forever in the next
        collective (DDP's set-up, the first step). So there only the checks that every process makes at
        the same point of set-up count (``every_process=True``), and they agree through one small
        all-reduce (:meth:`Processes.any_process`); the checks inside the caching loops, whose length can
        differ between processes (what the disk cache already held), apply to single-process runs only.
        """
        procs = self.processes
        several = procs is not None and procs.count > 1
        if several and not every_process:
            return
        stop = procs.any_process(self.control.stop_requested)[0] if procs is not None else self.control.stop_requested
        if stop:
            self.status(f"stopped while {during}")
            raise StoppedBeforeTraining(f"stopped while {during}, before the first step; nothing was trained or saved")
