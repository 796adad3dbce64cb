"""What several processes (``accelerate launch`` / ``torchrun``) agree on.

A single-process run does no collective at all. Under several processes each one trains its shard of
every epoch (:func:`guitrainer.engine.data.epoch_batches`), the reported loss is the mean over the
processes (:meth:`Processes.mean`), and stop / pause are agreed on by one small all-reduce each step
(:meth:`Processes.any_process`), so every process leaves the loop at the same step. Only the main process
reports and saves.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from typing import Any

import torch

log = logging.getLogger(__name__)


def launched_processes() -> int:
    """How many processes a launcher started (``WORLD_SIZE`` of torchrun, ``accelerate launch``), else 1."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


class Processes:
    """The processes of one run, as accelerate set them up (one process: every method is a no-op)."""

    def __init__(self, accelerator: Any, device: torch.device) -> None:
        self.accelerator = accelerator
        self.device = device
        self.count = int(accelerator.num_processes)
        self.index = int(accelerator.process_index)
        self.main = bool(accelerator.is_main_process)

    def any_process(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag, True on every process when it is True on any of them.

        One process: the flags as given, no collective. Several: one all-reduce (max) of a tensor of the
        flags, so every process must call this at the same point of the run. A stop or pause may reach one
        process only (a signal sent to one of them; a Control set by the code that drives the main process)
        or reach them at different steps (Ctrl+C, which the launcher passes on to each process); either way
        every process acts on it at the same step.
        """
        if self.count == 1:
            return flags
        t = torch.tensor([float(f) for f in flags], dtype=torch.float32, device=self.device)
        return tuple(bool(v) for v in self.accelerator.reduce(t, reduction="max").tolist())

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of ``values`` over the processes (the loss of the global batch; a NaN on one process
        reaches all, so none is left waiting in a collective)."""
        if self.count == 1:
            return values
        return self.accelerator.reduce(values, reduction="mean")

    def no_sync_unless(self, sync: bool, module: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """DDP: gradients are all-reduced only on the step's last backward pass."""
        if sync or self.count == 1:
            return contextlib.nullcontext()
        return self.accelerator.no_sync(module)

    def log(self, text: str) -> None:
        """Several processes: one log line of this process (every process logs its own)."""
        log.info("process %d of %d (pid %d): %s", self.index, self.count, os.getpid(), text)


def weights_fingerprint(state: dict[str, torch.Tensor]) -> str:
    """A short hash of a LoRA state dict: DDP keeps the weights equal on every process, so each process logs
    the same fingerprint when all went well."""
    digest = hashlib.sha256()
    for name, t in sorted(state.items()):
        digest.update(name.encode())
        digest.update(t.float().numpy().tobytes())
    return digest.hexdigest()[:16]
