"""What the engine reports and what controls it: plain data, shared by the engine, CLI and UI.

No torch and no Qt here, so the UI can import these types without loading either.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from guitrainer.core.precision.numerics import SaveReport


@dataclass(frozen=True)
class StepMetrics:
    """One optimizer step, as plain Python numbers (``.item()`` is done in the worker)."""

    step: int
    total_steps: int
    epoch: int
    loss: float
    lr: float
    grad_scale: float | None = None  # GradScaler's scale after this step (fp16 only)
    skipped: bool = False  # the scaler skipped this step (inf/NaN gradients)
    skipped_total: int = 0
    grad_norm: float | None = None
    seconds_per_step: float = 0.0
    images_per_second: float = 0.0  # training + class images through the UNet per second
    peak_memory_bytes: int | None = None
    class_loss: float | None = None  # prior-preservation loss (regularization images), unweighted
    instance_loss: float | None = None  # loss on the training images alone when class images are used
    # numerics monitor (core/precision/numerics.py), filled on sampled steps and skipped steps only:
    headroom: tuple[tuple[str, float], ...] = ()  # (block, dtype max / largest |activation|), forward order
    grad_underflow: float | None = None  # share of LoRA gradient values zero or subnormal in fp16 after scaling
    nonfinite_module: str | None = None  # where the inf/NaN of a skipped step (or NaN loss) was first seen
    numerics_message: str = ""  # "step 812 skipped: inf first seen in ... (fp16 activation 7.1e4 > 65,504)"
    validation_loss: float | None = None  # held-out images at fixed timesteps and noise, on validation steps only


@dataclass(frozen=True)
class SavedFile:
    path: str
    kind: str  # "lora", "state", "sample", "checkpoint"
    step: int = 0
    epoch: int = 0
    save_report: SaveReport | None = None  # a LoRA: the save-precision check and the choice it made


@dataclass(frozen=True)
class SampleImage:
    path: str
    prompt: str
    step: int


@dataclass(frozen=True)
class RunSummary:
    """How a run ended."""

    status: str  # "finished", "stopped", "failed", or "complete" (resumed a run that had no steps left)
    steps: int
    epochs: int
    final_loss: float | None
    lora_path: str | None = None
    state_path: str | None = None
    message: str = ""
    advice: tuple[str, ...] = ()
    skipped_steps: int = 0
    warnings: tuple[str, ...] = ()
    details: str = ""  # for a failure: the traceback or technical context, shown under "Show Details…"


class Reporter(Protocol):
    """What the trainer calls. The CLI prints; the UI's worker turns each call into a queued signal."""

    def on_step(self, metrics: StepMetrics) -> None: ...
    def on_status(self, text: str) -> None: ...
    def on_warning(self, text: str) -> None: ...
    def on_saved(self, saved: SavedFile) -> None: ...
    def on_sample(self, sample: SampleImage) -> None: ...


class NullReporter:
    """A reporter that records everything, for tests and headless runs."""

    def __init__(self) -> None:
        self.steps: list[StepMetrics] = []
        self.statuses: list[str] = []
        self.warnings: list[str] = []
        self.saved: list[SavedFile] = []
        self.samples: list[SampleImage] = []

    def on_step(self, metrics: StepMetrics) -> None:
        self.steps.append(metrics)

    def on_status(self, text: str) -> None:
        self.statuses.append(text)

    def on_warning(self, text: str) -> None:
        self.warnings.append(text)

    def on_saved(self, saved: SavedFile) -> None:
        self.saved.append(saved)

    def on_sample(self, sample: SampleImage) -> None:
        self.samples.append(sample)


@dataclass
class Control:
    """Thread-safe flags the training loop polls once per step."""

    _stop: threading.Event = field(default_factory=threading.Event)
    _pause: threading.Event = field(default_factory=threading.Event)
    _sample: threading.Event = field(default_factory=threading.Event)
    _save: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _output_folder: str | None = None

    def request_stop(self) -> None:
        self._stop.set()
        self._pause.clear()

    def pause(self) -> None:
        self._pause.set()

    def resume(self) -> None:
        self._pause.clear()

    def request_sample(self) -> None:
        self._sample.set()

    def request_save(self) -> None:
        self._save.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        return self._pause.is_set()

    def take_sample_request(self) -> bool:
        """True once per request (the flag is cleared)."""
        if self._sample.is_set():
            self._sample.clear()
            return True
        return False

    def take_save_request(self) -> bool:
        if self._save.is_set():
            self._save.clear()
            return True
        return False

    def redirect_output(self, folder: str) -> None:
        """Write the run's next saves (Save now, epochs, the final LoRA and state) into ``folder``.

        The way out when the output folder fills up or turns read-only mid-run: the trained
        weights are in memory, so choosing another folder and pressing Save now keeps them.
        """
        with self._lock:
            self._output_folder = folder

    def take_output_folder(self) -> str | None:
        """The folder asked for since the last call, once (None: no change)."""
        with self._lock:
            folder, self._output_folder = self._output_folder, None
        return folder

    def wait_while_paused(self, poll: float = 0.05, timeout: float | None = None) -> None:
        """Block while paused (until resume or stop); at most ``timeout`` seconds when given."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._pause.is_set() and not self._stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return
            self._stop.wait(poll)
