"""Training page: the run's settings on the left; Train / Pause / Stop, progress, live charts, log, samples.

Threading (DESIGN §3): the run happens in a :class:`~guitrainer.ui.workers.TrainingWorker` on its
own QThread. Its signals arrive here queued, on the GUI thread; a step costs the GUI a few array
writes (charts) and a stored reference (progress): labels refresh at 5 Hz, charts at <= 10 Hz.
The worker gets a *copy* of the config, so the user's settings are never touched by a run.

No torch and no pyqtgraph at import time: the charts are built when the page is first shown.
"""

from __future__ import annotations

import functools
import html
import importlib.metadata
import importlib.util
import logging
import math
import os
import platform
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEventLoop, Qt, QThread, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from guitrainer.config import TrainingConfig
from guitrainer.core import run_state
from guitrainer.core.events import RunSummary, SampleImage, SavedFile, StepMetrics
from guitrainer.core.folder_check import look_at_folders
from guitrainer.core.paths import expand
from guitrainer.core.run_state import find_state
from guitrainer.core.units import format_bytes
from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.log_panel import LogPanel
from guitrainer.ui.pages import Page
from guitrainer.ui.regularization_panel import prior_loss_box
from guitrainer.ui.sample_gallery import SampleGallery
from guitrainer.ui.workers import BaseWorker, TrainerFactory, TrainingWorker, run_in_thread

if TYPE_CHECKING:
    from guitrainer.ui.charts import TrainingCharts

log = logging.getLogger(__name__)

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PROGRESS_INTERVAL_MS = 200
LOG_TAIL_LINES = 40  # log lines put under "Show Details…" for a failure reported without details


class TrainState(str, Enum):  # noqa: UP042 - the value doubles as the name shown in tests and logs
    IDLE = "idle"
    CHECKING = "checking"  # validating before a start (the device probe may run in the background)
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"


ACTIVE = (TrainState.CHECKING, TrainState.RUNNING, TrainState.PAUSED, TrainState.STOPPING)
STATE_TEXT = {
    TrainState.IDLE: ("Ready", "#5c677d"),
    TrainState.CHECKING: ("Checking…", "#5c677d"),
    TrainState.RUNNING: ("Training", "#2b8a3e"),
    TrainState.PAUSED: ("Paused", "#e67700"),
    TrainState.STOPPING: ("Stopping…", "#e67700"),
    TrainState.FINISHED: ("Done", "#1971c2"),
    TrainState.FAILED: ("Failed", "#c92a2a"),
}


# --------------------------------------------------------------------------- pre-start checks


@dataclass
class StartCheck:
    """What stands between the settings and a run: ``errors`` block it, ``confirm`` needs a yes."""

    errors: list[str] = field(default_factory=list)
    confirm: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # warnings worth logging, not asking about

    @property
    def ok(self) -> bool:
        return not self.errors


def _check_folders(out: StartCheck, folders: Sequence[Any], dataset: Any, what: str, label: str) -> None:
    """Errors for ``folders`` that training could not load (missing, or no usable image at all), notes for
    single folders that add nothing. ``what`` names the images, ``label`` one folder ("image folder")."""
    missing = [f.path for f in folders if not expand(str(f.path)).is_dir()]
    for p in missing:
        out.errors.append(f"The {label} “{p}” does not exist.")
    if missing:
        return
    looks = look_at_folders(folders, dataset.caption_extension, getattr(dataset, "exclude", ()))
    empty = [lk for lk in looks if not lk.images]
    if len(empty) == len(looks):
        if len(looks) == 1:
            out.errors.append(f"No usable {what} in “{looks[0].path}”: {looks[0].reason()}.")
        else:
            out.errors.append(
                f"No usable {what} in the {label}s: " + "; ".join(f"“{lk.path}”: {lk.reason()}" for lk in looks) + "."
            )
    else:
        for lk in empty:
            out.notes.append(f"The {label} “{lk.path}” adds no {what}: {lk.reason()}.")


# Advice that an assumed CPU device cannot back: bitsandbytes was not looked at, and there may be a GPU.
GUESS_UNSURE = frozenset(
    {"eight_bit_unusable", "eight_bit_cpu", "paged_without_cuda", "cpu_training", "torch_cpu_build", "gpu_missing"}
)


@functools.lru_cache(maxsize=1)
def _torch_version_without_import() -> str:
    """torch's version from its package metadata ("unknown" when only the module is found, "" when absent)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        try:
            return "unknown" if importlib.util.find_spec("torch") is not None else ""
        except (ImportError, ValueError):
            return ""


def assumed_cpu_device() -> Any:
    """A CPU-only ``DeviceInfo`` built without importing torch, for when the device probe failed.

    The precision rules then still see the choice (e.g. fp16 on the CPU); facts that need torch or
    bitsandbytes stay unknown.
    """
    from guitrainer.core import hardware

    why = "the device check did not finish"
    torch_version = _torch_version_without_import()
    return hardware.DeviceInfo(
        cpu=hardware.CpuInfo(name=platform.machine() or "CPU", cores=os.cpu_count() or 1),
        bitsandbytes=hardware.BitsAndBytesInfo(False, reason=f"not checked: {why}"),
        torch_version=torch_version,
        unknown=(("device", why),) + (() if torch_version else (("torch", "it is not installed"),)),
    )


def check_start(config: TrainingConfig, device: Any = None) -> StartCheck:
    """Everything worth knowing before a run starts, in plain words.

    Args:
        config: the settings about to be trained.
        device: a ``core.hardware.DeviceInfo``; None (the device probe failed) checks against
            :func:`assumed_cpu_device`.
    """
    out = StartCheck()
    for e in config.errors():
        out.errors.append(f"Setting “{e.field}”: {e.message}.")
    base = config.model.base.strip()
    # dataset
    if not config.dataset.folders:
        if base != "demo":
            out.errors.append("No training images: add an image folder on the Dataset page.")
    else:
        _check_folders(out, config.dataset.folders, config.dataset, "training images", "image folder")
    if config.dataset.regularization_folders:
        _check_folders(
            out, config.dataset.regularization_folders, config.dataset, "class images", "class image folder"
        )
    # base model
    if not base:
        out.errors.append("No base model chosen: pick one on the Model page.")
    elif base != "demo" and not expand(base).exists():
        looks_like_path = base.startswith(("/", ".", "~", "\\")) or ":" in base or base.lower().endswith(
            (".safetensors", ".ckpt")
        )
        if looks_like_path or not HUB_ID.match(base):
            out.errors.append(f"The base model “{base}” was not found. Choose a model folder or file on the Model page.")
    # output folder
    folder = expand(config.output.folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".guitrainer-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        out.errors.append(f"Cannot write to the output folder “{folder}”: {e.strerror or e}.")
    # resume state
    if config.schedule.resume_from and not run_state.is_state_folder(config.schedule.resume_from):
        out.errors.append(f"“{config.schedule.resume_from}” is not a saved training state.")
    guessed = device is None
    if device is None:
        device = assumed_cpu_device()
        if device is None:
            return out
    for_gpu = getattr(device, "for_gpu_index", None)
    if for_gpu is not None:  # the memory check below compares with the GPU this run trains on
        device = for_gpu(config.precision.gpu_index)
    # precision advice
    from guitrainer.core import precision

    if precision is not None:
        try:
            for a in precision.advise(device, config):
                if guessed and a.code in GUESS_UNSURE:
                    continue
                line = a.message + (f" Suggestion: {a.suggestion_text}." if a.suggestion_text else "")
                if guessed and a.topic != "device":
                    line = "The device could not be checked, so the CPU is assumed: " + line
                if a.level == "error":
                    out.errors.append(line)
                elif a.level == "warning":
                    out.notes.append(line)
        except Exception:  # noqa: BLE001 - advice must not block a run by crashing
            log.exception("precision advice failed")
    # memory estimate
    from guitrainer.core import vram

    available = getattr(device, "total_memory", None)
    if vram is not None and available and getattr(device, "kind", "cuda") != "cpu":
        try:
            total = int(vram.estimate(config, None, device).total)
        except Exception:  # noqa: BLE001
            log.exception("VRAM estimate failed")
        else:
            if total > available:
                out.confirm.append(
                    f"The estimated memory need ({total / 2**30:.1f} GiB) is more than your GPU has "
                    f"({available / 2**30:.1f} GiB). Training will probably run out of memory."
                )
    return out


class _ProbeWorker(BaseWorker):
    """Probes the device in the background (it imports torch: seconds)."""

    def work(self) -> Any:
        from guitrainer.core import hardware

        return hardware.probe()


def _bullets(lines: list[str] | tuple[str, ...]) -> str:
    return "<ul style='margin-left:-20px'>" + "".join(f"<li>{html.escape(s)}</li>" for s in lines) + "</ul>"


def _fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "—"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


# --------------------------------------------------------------------------- the page


class TrainingPage(Page):
    """Settings of the run, its controls and everything it reports.

    Public: :meth:`start`, :meth:`resume_last`, :meth:`stop`, :meth:`pause`, :meth:`resume`,
    :meth:`toggle_pause`, :meth:`sample_now`, :meth:`save_now`, :meth:`open_output_folder`,
    :meth:`confirm_close`, :meth:`wait_until_idle`, :attr:`state`, :attr:`charts`.
    """

    title = "Training"
    subtitle = "How the LoRA is trained. Press Train to start; loss, learning rate and loss scale appear live."

    state_changed = Signal(str)  # TrainState value
    run_finished = Signal(object)  # RunSummary (any status)
    run_failed = Signal(str, str)  # message, traceback: an exception escaped the trainer
    warning_raised = Signal(str)  # a warning from the engine (other pages react, e.g. fp16 overflow on Output)

    def __init__(
        self,
        binding: ConfigBinding,
        parent: QWidget | None = None,
        *,
        trainer_factory: TrainerFactory | None = None,
    ):
        super().__init__(binding, parent)
        self.trainer_factory = trainer_factory
        self._state = TrainState.IDLE
        self._blocked_by = ""  # error-level precision advice that stops a start
        self.worker: TrainingWorker | None = None
        self.run_config: TrainingConfig | None = None
        self.last_summary: RunSummary | None = None
        self.last_state_path: str | None = None
        self.error_box: QMessageBox | None = None
        self.problems_box: QMessageBox | None = None
        self.confirm_box: QMessageBox | None = None
        self._charts: TrainingCharts | None = None
        self._metrics: StepMetrics | None = None
        self._progress_dirty = False
        self._rate_origin: tuple[float, int] | None = None  # (time, step) the step rate is measured from
        self._steps_seen = 0
        self._warnings: list[str] = []
        self._probe_worker: _ProbeWorker | None = None
        self._pending_config: TrainingConfig | None = None
        self._cancel_start = False
        self._build()
        self._charts_timer = QTimer(self)
        self._charts_timer.setSingleShot(True)
        self._charts_timer.setInterval(0)
        self._charts_timer.timeout.connect(self._ensure_charts)
        self._progress_timer = QTimer(self)
        self._progress_timer.setInterval(PROGRESS_INTERVAL_MS)
        self._progress_timer.timeout.connect(self._refresh_progress)
        binding.changed.connect(self._on_config_changed)
        binding.replaced.connect(self._refresh_state_path)
        self._refresh_state_path()
        self._apply_state()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.body.addWidget(self._build_controls())
        self.body.addWidget(self._build_progress())

        self.settings_panel = QWidget()
        sl = QVBoxLayout(self.settings_panel)
        sl.setContentsMargins(0, 0, 6, 0)
        sl.addWidget(build_form(self.binding, "network", title="LoRA network"))
        sl.addWidget(build_form(self.binding, "optimizer", title="Optimizer"))
        sl.addWidget(build_form(self.binding, "schedule", title="Schedule"))
        sl.addWidget(prior_loss_box(self.binding))
        sl.addWidget(build_form(self.binding, "sampling", title="Samples"))
        sl.addStretch(1)
        settings_scroll = QScrollArea()
        settings_scroll.setObjectName("training_settings")
        settings_scroll.setWidgetResizable(True)
        settings_scroll.setFrameShape(QFrame.Shape.NoFrame)
        settings_scroll.setWidget(self.settings_panel)
        settings_scroll.setMinimumWidth(300)
        settings_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.settings_scroll = settings_scroll

        self.charts_host = QWidget()
        self.charts_host.setObjectName("charts_host")
        QVBoxLayout(self.charts_host).setContentsMargins(0, 0, 0, 0)
        self._charts_placeholder = QLabel("Charts appear here when training starts.")
        self._charts_placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.charts_host.layout().addWidget(self._charts_placeholder)

        self.log_panel = LogPanel()
        self.gallery = SampleGallery()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("training_tabs")
        self.tabs.addTab(self.log_panel, "Log")
        self.tabs.addTab(self.gallery, "Samples")

        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.charts_host)
        right.addWidget(self.tabs)
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 1)
        right.setSizes([480, 170])
        right.setChildrenCollapsible(False)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.setObjectName("training_split")
        split.addWidget(settings_scroll)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([340, 900])
        split.setChildrenCollapsible(False)
        split.setMinimumHeight(560)
        # Ignore the splitter's (huge) size hint: it fills the page, and scrolls only below its minimum
        split.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.body.addWidget(split, 1)

    def _button(self, text: str, name: str, icon: QStyle.StandardPixmap | None, tip: str, slot: Any) -> QPushButton:
        b = QPushButton(text)
        b.setObjectName(name)
        if icon is not None:
            b.setIcon(self.style().standardIcon(icon))
        b.setToolTip(tip)
        b.clicked.connect(slot)
        return b

    def _build_controls(self) -> QWidget:
        sp = QStyle.StandardPixmap
        self.train_button = self._button(
            "Train", "train_button", sp.SP_MediaPlay, "Check the settings and start training a new LoRA.", lambda: self.start()
        )
        self.train_button.setDefault(True)
        self.train_button.setMinimumWidth(110)
        f = self.train_button.font()
        f.setBold(True)
        self.train_button.setFont(f)
        self.pause_button = self._button(
            "Pause", "pause_button", sp.SP_MediaPause, "Pause after the current step; Resume continues.", self.toggle_pause
        )
        self.stop_button = self._button(
            "Stop", "stop_button", sp.SP_MediaStop, "Stop after the current step, saving the LoRA and a resumable state.", self.stop
        )
        self.sample_button = self._button(
            "Sample now", "sample_button", None, "Make sample images with the LoRA as it is now.", self.sample_now
        )
        self.save_button = self._button(
            "Save now", "save_button", sp.SP_DialogSaveButton, "Save the LoRA (and a resumable state) after this step.", self.save_now
        )
        self.resume_state_button = self._button(
            "Resume from last state",
            "resume_state_button",
            sp.SP_BrowserReload,
            "Continue the last stopped run from its saved state (same network and precision settings).",
            self.resume_last,
        )
        self.open_output_button = self._button(
            "Open output folder", "open_output_button", sp.SP_DirOpenIcon, "Show the LoRA files in your file manager.",
            self.open_output_folder,
        )
        self.state_badge = QLabel()
        self.state_badge.setObjectName("state_badge")
        self.state_badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.state_badge.setMinimumWidth(96)

        box = QWidget()
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(6)
        for w in (self.train_button, self.pause_button, self.stop_button):
            row.addWidget(w)
        row.addSpacing(12)
        row.addWidget(self.sample_button)
        row.addWidget(self.save_button)
        row.addSpacing(12)
        row.addWidget(self.resume_state_button)
        row.addWidget(self.open_output_button)
        row.addStretch(1)
        row.addWidget(self.state_badge)
        return box

    def _build_progress(self) -> QWidget:
        self.progress_bar = QProgressBar()
        self.progress_bar.setObjectName("progress_bar")
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self.progress_bar.setFormat("No run yet")
        self.progress_bar.setTextVisible(True)
        self.progress_bar.setMinimumWidth(260)
        self.progress_label = QLabel("")
        self.progress_label.setObjectName("progress_label")
        self.status_label = QLabel("Press Train to start.")
        self.status_label.setObjectName("status_label")
        self.status_label.setStyleSheet("color: palette(placeholder-text);")
        self.warning_label = QLabel("")
        self.warning_label.setObjectName("warning_label")
        self.warning_label.setStyleSheet("color: #d9480f;")
        self.warning_label.hide()
        # live texts never widen the page: one line each, clipped, the full text in the tooltip
        for label in (self.progress_label, self.status_label, self.warning_label):
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(3)
        row = QHBoxLayout()
        row.setSpacing(12)
        row.addWidget(self.progress_bar, 2)
        row.addWidget(self.progress_label, 3)
        lay.addLayout(row)
        lay.addWidget(self.status_label)
        lay.addWidget(self.warning_label)
        return box

    def _say(self, text: str) -> None:
        """Show ``text`` in the status line (its tooltip holds it in full when it is clipped)."""
        self.status_label.setText(text)
        self.status_label.setToolTip(text)

    # ------------------------------------------------------------------ charts (built lazily: pyqtgraph is heavy)
    @property
    def charts(self) -> TrainingCharts:
        if self._charts is None:
            from guitrainer.ui.charts import TrainingCharts

            self._charts = TrainingCharts(self.charts_host)
            self._charts.setObjectName("training_charts")
            lay = self.charts_host.layout()
            lay.removeWidget(self._charts_placeholder)
            self._charts_placeholder.deleteLater()
            lay.addWidget(self._charts)
            self._charts.set_scaler_visible(self.binding.get("precision.training") == "fp16")
        return self._charts

    def _ensure_charts(self) -> None:
        _ = self.charts

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        super().showEvent(event)
        if self._charts is None:
            self._charts_timer.start()  # right after the page is painted, so showing it stays instant

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> TrainState:
        return self._state

    @property
    def is_active(self) -> bool:
        """A run is being checked, trained, paused or stopped."""
        return self._state in ACTIVE

    def _set_state(self, state: TrainState) -> None:
        if state == self._state:
            return
        log.debug("training page: %s -> %s", self._state.value, state.value)
        self._state = state
        self._apply_state()
        self.state_changed.emit(state.value)

    def set_blocking_errors(self, reason: str) -> None:
        """Error-level advice (e.g. bf16 on a card without it) disables Train; ``reason`` is its tooltip."""
        self._blocked_by = reason.strip()
        self._apply_state()

    def _apply_state(self) -> None:
        s = self._state
        running = s == TrainState.RUNNING
        live = s in (TrainState.RUNNING, TrainState.PAUSED)
        self.train_button.setEnabled(s not in ACTIVE and not self._blocked_by)
        self.train_button.setToolTip(
            f"Fix this first (Model & Precision page):\n{self._blocked_by}"
            if self._blocked_by
            else "Check the settings and start training a new LoRA."
        )
        self.pause_button.setEnabled(live)
        self.pause_button.setText("Resume" if s == TrainState.PAUSED else "Pause")
        sp = QStyle.StandardPixmap
        self.pause_button.setIcon(self.style().standardIcon(sp.SP_MediaPlay if s == TrainState.PAUSED else sp.SP_MediaPause))
        self.stop_button.setEnabled(live)
        has_prompts = bool(self.run_config and self.run_config.sampling.prompts)
        self.sample_button.setEnabled(running and has_prompts)
        self.sample_button.setToolTip(
            "Make sample images with the LoRA as it is now."
            if has_prompts or not running
            else "Add sample prompts (Samples settings) before the run to make samples."
        )
        self.save_button.setEnabled(live)
        self.resume_state_button.setEnabled(s not in ACTIVE and self.last_state_path is not None)
        self.settings_panel.setEnabled(s not in ACTIVE)
        self.settings_scroll.setToolTip("Settings are locked while a run is active." if s in ACTIVE else "")
        text, color = STATE_TEXT[s]
        self.state_badge.setText(text)
        self.state_badge.setStyleSheet(
            f"QLabel {{ color: white; background: {color}; border-radius: 9px; padding: 3px 10px; font-weight: 600; }}"
        )
        if s in (TrainState.RUNNING, TrainState.PAUSED, TrainState.STOPPING):
            self._progress_timer.start()
        else:
            self._progress_timer.stop()

    def _on_config_changed(self, path: str) -> None:
        if path == "output.folder" and self.worker is not None and self.is_active:
            self._redirect_output(str(self.binding.get(path)))
        if path.startswith("output."):
            self._refresh_state_path()
        if path == "precision.training" and self._charts is not None and not self.is_active:
            self._charts.set_scaler_visible(self.binding.get(path) == "fp16")

    def _refresh_state_path(self) -> None:
        self.last_state_path = find_state(self.binding.config)
        if not self.is_active:
            self._apply_state()

    # ------------------------------------------------------------------ start
    def start(self, resume_from: str | None = None) -> None:
        """Check the settings, then train a copy of them (``resume_from``: a state folder to continue).

        Problems are listed in a dialog; a memory estimate above the GPU's memory asks first.
        """
        if self.is_active:
            return
        self._cancel_start = False
        cfg = self.binding.config.copy()
        cfg.schedule.resume_from = resume_from or ""
        self._set_state(TrainState.CHECKING)
        self._say("Checking the settings…")
        device = self._known_device()
        if device is not None:
            self._continue_start(cfg, device)
            return
        worker = _ProbeWorker()
        # bound methods of this page (not lambdas): Qt then queues the call to the GUI thread
        worker.finished.connect(self._on_probe_finished)
        worker.failed.connect(self._on_probe_failed)
        self._probe_worker = worker
        self._pending_config = cfg
        run_in_thread(worker, name="DeviceProbe")

    @Slot(object)
    def _on_probe_finished(self, device: Any) -> None:
        cfg, self._pending_config = self._pending_config, None
        if cfg is not None:
            self._continue_start(cfg, device)

    @Slot(str, str)
    def _on_probe_failed(self, message: str, _details: str) -> None:
        cfg, self._pending_config = self._pending_config, None
        if cfg is not None:
            self._continue_start(cfg, None, probe_error=message)

    @staticmethod
    def _known_device() -> Any:
        from guitrainer.core import hardware

        return hardware.cached()

    def _continue_start(self, cfg: TrainingConfig, device: Any, probe_error: str = "") -> None:
        if QThread.currentThread() != self.thread():
            raise RuntimeError("the training page was driven from a background thread")
        self._probe_worker = None
        if probe_error:
            log.warning("device probe failed: %s", probe_error)
        if self._cancel_start:
            self._set_state(TrainState.IDLE)
            return
        check = check_start(cfg, device)
        for note in check.notes:
            log.warning(note)
            if not self.log_panel.attached:  # the panel shows the run's log only from the launch on
                self.log_panel.append(note, logging.WARNING)
        if not check.ok:
            self._set_state(TrainState.IDLE)
            self._say("Training did not start: fix the problems listed.")
            box = QMessageBox(
                QMessageBox.Icon.Warning,
                "Cannot start training",
                "Training cannot start yet:",
                QMessageBox.StandardButton.Ok,
                self,
            )
            box.setObjectName("start_problems_box")
            box.setInformativeText(_bullets(check.errors))
            self.problems_box = box
            box.open()
            return
        if check.confirm:
            box = QMessageBox(
                QMessageBox.Icon.Question,
                "Start anyway?",
                "Before you start:",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                self,
            )
            box.setObjectName("start_confirm_box")
            box.setInformativeText(_bullets(check.confirm) + "Start training anyway?")
            box.button(QMessageBox.StandardButton.Yes).setText("Start anyway")
            box.setDefaultButton(QMessageBox.StandardButton.Cancel)

            def answered(result: int) -> None:
                if result == QMessageBox.StandardButton.Yes:
                    self._launch(cfg)
                else:
                    self._set_state(TrainState.IDLE)
                    self._say("Not started.")

            box.finished.connect(answered)
            self.confirm_box = box
            box.open()
            return
        self._launch(cfg)

    def _launch(self, cfg: TrainingConfig) -> None:
        resuming = bool(cfg.schedule.resume_from)
        charts = self.charts
        if resuming and len(charts) and self._resume_step(cfg.schedule.resume_from) == int(charts.series("step")[-1]):
            pass  # the charts show this run up to the saved state: keep them and continue
        else:
            charts.clear()
        charts.set_scaler_visible(cfg.precision.training == "fp16")
        self.run_config = cfg
        self._metrics = None
        self._rate_origin = None
        self._steps_seen = 0
        self._warnings.clear()
        self.warning_label.hide()
        self.progress_bar.setRange(0, max(1, cfg.schedule.max_steps))
        self.progress_bar.setValue(0)
        self.progress_bar.setFormat("Loading the model…")
        self.progress_label.setText("")
        self.log_panel.attach("guitrainer")
        worker = TrainingWorker(cfg, trainer_factory=self.trainer_factory)
        worker.step_finished.connect(self._on_step)
        worker.status_changed.connect(self._on_status)
        worker.warning_raised.connect(self._on_warning)
        worker.sample_ready.connect(self._on_sample)
        worker.checkpoint_saved.connect(self._on_saved)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self.worker = worker
        self._set_state(TrainState.RUNNING)
        self._say("Resuming from the saved state…" if resuming else "Starting…")
        log.info("training started%s", f" from {cfg.schedule.resume_from}" if resuming else "")
        run_in_thread(worker, name="TrainingThread")

    @staticmethod
    def _resume_step(state_path: str) -> int | None:
        return run_state.saved_step(state_path)

    def resume_last(self) -> None:
        """Continue from the last saved state (of this run, or found in the output folder)."""
        path = self.last_state_path or find_state(self.binding.config)
        if path:
            self.start(resume_from=path)

    # ------------------------------------------------------------------ controls
    def stop(self) -> None:
        """Stop after the current step; the engine saves the LoRA and a resumable state."""
        if self.worker is not None and self._state in (TrainState.RUNNING, TrainState.PAUSED):
            self.worker.stop()
            self._set_state(TrainState.STOPPING)
            self._say("Stopping after this step; saving the LoRA and a resumable state…")

    def pause(self) -> None:
        if self.worker is not None and self._state == TrainState.RUNNING:
            self.worker.pause()
            self._set_state(TrainState.PAUSED)
            self._say("Pausing after this step…")

    def resume(self) -> None:
        if self.worker is not None and self._state == TrainState.PAUSED:
            self.worker.resume()
            self._rate_origin = None  # the pause is not part of the step rate
            self._set_state(TrainState.RUNNING)
            self._say("Resumed.")

    def toggle_pause(self) -> None:
        if self._state == TrainState.PAUSED:
            self.resume()
        else:
            self.pause()

    def sample_now(self) -> None:
        if self.worker is not None and self._state == TrainState.RUNNING:
            self.worker.request_sample()
            self._say("Samples will be made after this step…")

    def save_now(self) -> None:
        if self.worker is not None and self._state == TrainState.RUNNING:
            self.worker.request_save()
            self._say("Saving after this step…")
        elif self.worker is not None and self._state == TrainState.PAUSED:
            self.worker.request_save()
            self._say("Saving now; training stays paused…")

    def _redirect_output(self, folder: str) -> None:
        """The Output page's folder changed mid-run: the running trainer saves there from its next save on.

        The way out of a full disk or a read-only folder without losing the trained weights.
        """
        assert self.worker is not None
        self.worker.set_output_folder(folder)
        if self.run_config is not None:
            self.run_config.output.folder = folder
        self.log_panel.append(f"output folder changed: the next saves go to {expand(folder)}")
        self._say(f"The next saves go to {expand(folder)}; press Save now to save there at once.")

    def output_folder(self) -> Path:
        cfg = self.run_config if self.is_active and self.run_config else self.binding.config
        return expand(cfg.output.folder)

    def open_output_folder(self) -> bool:
        """Open the output folder in the file manager (created first if needed)."""
        folder = self.output_folder()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._say(f"Cannot create the output folder {folder}: {e.strerror or e}")
            return False
        ok = QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
        if not ok:
            self._say(f"Could not open a file manager; the files are in {folder}")
        return bool(ok)

    # ------------------------------------------------------------------ worker signals (GUI thread, queued)
    @Slot(object)
    def _on_step(self, m: StepMetrics) -> None:
        if self._charts is not None:
            self._charts.add(m)
        self._metrics = m
        self._steps_seen += 1
        if self._rate_origin is None:
            self._rate_origin = (time.perf_counter(), m.step)
        self._progress_dirty = True

    @Slot(str)
    def _on_status(self, text: str) -> None:
        self._say(text[:1].upper() + text[1:])

    @Slot(str)
    def _on_warning(self, text: str) -> None:
        self._warnings.append(text)
        more = f"  (+{len(self._warnings) - 1} more in the log)" if len(self._warnings) > 1 else ""
        self.warning_label.setText(f"⚠ {text}{more}")
        self.warning_label.setToolTip("\n".join(self._warnings[-20:]))
        self.warning_label.show()
        self.warning_raised.emit(text)

    @Slot(object)
    def _on_sample(self, sample: SampleImage) -> None:
        self.gallery.add_sample(sample)
        self.tabs.setTabText(self.tabs.indexOf(self.gallery), f"Samples ({self.gallery.count()})")

    @Slot(object)
    def _on_saved(self, saved: SavedFile) -> None:
        if saved.kind == "state":
            self.last_state_path = saved.path
        self.log_panel.append(f"saved {saved.kind} at step {saved.step}: {saved.path}")

    @Slot(object)
    def _on_finished(self, summary: RunSummary) -> None:
        self._end_run()
        self.last_summary = summary
        self.last_state_path = summary.state_path or find_state(self.run_config or self.binding.config)
        self._refresh_progress(force=True)
        if summary.status == "failed":
            self._set_state(TrainState.FAILED)
            self._say(f"Training failed: {summary.message}")
            self.show_error("Training failed", summary.message, summary.advice, summary.details or self._log_tail())
        else:
            self._set_state(TrainState.FINISHED)
            where = f" LoRA: {summary.lora_path}" if summary.lora_path else ""
            if summary.status == "stopped" and not summary.steps:
                self._say(f"Stopped: {summary.message}.")
            elif summary.status == "stopped":
                self._say(f"Stopped at step {summary.steps}; you can resume from the saved state.{where}")
            else:
                self._say(f"Finished: {summary.steps} steps.{where}")
        self._apply_state()
        self.run_finished.emit(summary)

    @Slot(str, str)
    def _on_failed(self, message: str, details: str) -> None:
        self._end_run()
        self.last_summary = None
        self.last_state_path = find_state(self.run_config or self.binding.config)
        self._set_state(TrainState.FAILED)
        self._say(f"Training failed: {message}")
        self.show_error("Training failed", message, (), details or self._log_tail())
        self._apply_state()
        self.run_failed.emit(message, details)

    def _end_run(self) -> None:
        self.worker = None
        self.log_panel.detach()
        if self._charts is not None:
            self._charts.redraw()

    def _log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the log panel, as details for a failure that came without any."""
        text = self.log_panel.text().rstrip("\n")
        if not text:
            return ""
        tail = text.splitlines()[-lines:]
        return f"The last {len(tail)} lines of the log:\n\n" + "\n".join(tail)

    def show_error(self, title: str, message: str, advice: tuple[str, ...] | list[str], details: str) -> QMessageBox:
        """A non-blocking error dialog: the message, what to try, and the traceback under "Show Details…"."""
        box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self)
        box.setObjectName("training_error_box")
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        if advice:
            box.setInformativeText("<b>What to try:</b>" + _bullets(list(advice)))
        if details:
            box.setDetailedText(details)
        self.error_box = box
        box.open()
        return box

    # ------------------------------------------------------------------ progress (5 Hz)
    def _refresh_progress(self, force: bool = False) -> None:
        if not (self._progress_dirty or force):
            return
        self._progress_dirty = False
        m = self._metrics
        if m is None:
            return
        total = max(1, m.total_steps)
        if self.progress_bar.maximum() != total:
            self.progress_bar.setRange(0, total)
        self.progress_bar.setValue(min(m.step, total))
        self.progress_bar.setFormat(f"step {m.step} / {m.total_steps}  (%p%)")
        cfg = self.run_config
        epoch = f"epoch {m.epoch}" + (f" / {cfg.schedule.epochs}" if cfg and not cfg.schedule.max_steps else "")
        eta = math.nan
        if self._rate_origin is not None:
            t0, s0 = self._rate_origin
            dt, ds = time.perf_counter() - t0, m.step - s0
            if ds > 0 and dt > 0:
                eta = (m.total_steps - m.step) * dt / ds
        eta_text = _fmt_duration(eta) if self._state == TrainState.RUNNING else "—"
        parts = [
            epoch,
            f"ETA {eta_text}",
            f"{m.images_per_second:.1f} img/s",
            f"{m.seconds_per_step:.2f} s/step",
            f"peak memory {format_bytes(m.peak_memory_bytes)}" if m.peak_memory_bytes is not None else "peak memory n/a",
        ]
        if m.skipped_total:
            parts.append(f"{m.skipped_total} skipped")
        self.progress_label.setText("  ·  ".join(parts))

    # ------------------------------------------------------------------ closing
    def wait_until_idle(self, timeout_s: float = 120.0) -> bool:
        """Process events until the run has ended (or ``timeout_s``); True when no run is active."""
        deadline = time.monotonic() + timeout_s
        app = QApplication.instance()
        while self.is_active and time.monotonic() < deadline:
            if app is not None:
                app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
            time.sleep(0.005)
        return not self.is_active

    def _ask_close(self) -> str:
        """Ask what to do with a running training: "stop", "keep" or "cancel"."""
        box = QMessageBox(self)
        box.setObjectName("close_box")
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("Training is running")
        box.setText("Training is still running.")
        box.setInformativeText("Stop it now? The LoRA and a resumable state are saved first.")
        stop = box.addButton("Stop and save", QMessageBox.ButtonRole.AcceptRole)
        keep = box.addButton("Keep training", QMessageBox.ButtonRole.RejectRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(keep)
        box.exec()
        clicked = box.clickedButton()
        if clicked is stop:
            return "stop"
        if clicked is keep:
            return "keep"
        return "cancel"

    def confirm_close(self) -> bool:
        """Called by the main window before it closes: True when it may close."""
        if not self.is_active:
            return True
        if self._state == TrainState.CHECKING:  # the device probe is still running: drop the start
            self._cancel_start = True
            return self.wait_until_idle(60.0)
        if self._state != TrainState.STOPPING:
            if self._ask_close() != "stop":
                return False
            self.stop()
        self._say("Stopping and saving before closing…")
        if self.wait_until_idle(300.0):
            return True
        self._say("Still saving; try closing again in a moment.")
        return False
