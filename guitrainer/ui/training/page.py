"""Training page: the run's settings on the left; Train / Pause / Stop, progress, live charts, log, samples.

Threading (DESIGN §3): the run happens in a :class:`~guitrainer.ui.workers.TrainingWorker` on its
own QThread. Its signals arrive here queued, on the GUI thread; a step costs the GUI a few array
writes (charts) and a stored reference (progress): labels refresh at 5 Hz, charts at <= 10 Hz.
The worker gets a *copy* of the config, so the user's settings are never touched by a run.

No torch and no pyqtgraph at import time: the charts are built when the page is first shown.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEventLoop, Qt, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QLabel,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.errors import first_line
from guitrainer.base.paths import expand
from guitrainer.config import TrainingConfig
from guitrainer.config.sections import learning_rates_for_optimizer
from guitrainer.core.checks.start import check_start
from guitrainer.core.demo.progress import is_demo
from guitrainer.core.device.hardware import DeviceInfo
from guitrainer.core.events import RunSummary, SampleImage, SavedFile, StepMetrics
from guitrainer.core.runs.state import SavedRun, find_state, read_saved_run
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.device_service import DeviceService
from guitrainer.ui.training.controls import ACTIVE, ProgressPanel, RunControls, TrainState
from guitrainer.ui.training.dialogs import (
    ask_close,
    error_box,
    finished_run_box,
    log_tail,
    open_in_file_manager,
    start_confirm_box,
    start_problems_box,
)
from guitrainer.ui.training.layout import make_room_for, run_split, samples_split, settings_column
from guitrainer.ui.training.log_panel import LogPanel
from guitrainer.ui.training.sample_gallery import SampleGallery, sampling_note
from guitrainer.ui.widgets.before_after import BeforeAfterView
from guitrainer.ui.widgets.messages import MessageBox
from guitrainer.ui.widgets.pages import Page
from guitrainer.ui.workers import TrainerFactory, TrainingWorker, run_in_thread

if TYPE_CHECKING:
    from guitrainer.ui.training.charts import TrainingCharts

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_MS = 200
LOG_TAIL_LINES = 40  # log lines put under "Show Details…" for a failure reported without details


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
    worker_started = Signal(object)  # each run's TrainingWorker, connected and about to start (Numerics tab)

    def __init__(
        self,
        binding: ConfigBinding,
        parent: QWidget | None = None,
        *,
        trainer_factory: TrainerFactory | None = None,
        device_service: DeviceService | None = None,
    ):
        super().__init__(binding, parent)
        self.trainer_factory = trainer_factory
        self.devices = device_service or DeviceService(parent=self)
        self._state = TrainState.IDLE
        self._blocked_by = ""  # error-level precision advice that stops a start
        self.worker: TrainingWorker | None = None
        self.run_config: TrainingConfig | None = None
        self.last_summary: RunSummary | None = None
        self.last_state_path: str | None = None
        self.error_box: MessageBox | None = None
        self.problems_box: MessageBox | None = None
        self.confirm_box: MessageBox | None = None
        self.finished_box: QDialog | None = None  # "the last run is complete: train more epochs?"
        self._charts: TrainingCharts | None = None
        self._metrics: StepMetrics | None = None
        self._progress_dirty = False
        self._rate_origin: tuple[float, int] | None = None  # (time, step) the step rate is measured from
        self._steps_seen = 0
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
        binding.replaced.connect(self._refresh_sampling_note)
        self._refresh_state_path()
        self._refresh_sampling_note()
        self._apply_state()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.body.addWidget(self._build_controls())
        self.body.addWidget(self._build_progress())

        self.settings_panel, self.settings_scroll = settings_column(self.binding)

        self.charts_host = QWidget()
        self.charts_host.setObjectName("charts_host")
        QVBoxLayout(self.charts_host).setContentsMargins(0, 0, 0, 0)
        self._charts_placeholder = QLabel("Charts appear here when training starts.")
        self._charts_placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.charts_host.layout().addWidget(self._charts_placeholder)

        self.log_panel = LogPanel()
        self.gallery = SampleGallery()
        self.before_after = BeforeAfterView()
        self.samples_tab = samples_split(self.before_after, self.gallery)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("training_tabs")
        self.tabs.addTab(self.log_panel, "Log")
        self.tabs.addTab(self.samples_tab, "Samples")
        make_room_for(self.tabs, self.samples_tab)  # chosen, the pictures side by side get the height they need

        self.body.addWidget(run_split(self.settings_scroll, self.charts_host, self.tabs), 1)

    def _build_controls(self) -> QWidget:
        self.controls = c = RunControls(self)
        c.connect(
            train=self.start, pause=self.toggle_pause, stop=self.stop, sample=self.sample_now, save=self.save_now,
            resume_state=self.resume_last, open_output=self.open_output_folder,
        )  # fmt: skip
        self.train_button, self.pause_button, self.stop_button = c.train_button, c.pause_button, c.stop_button
        self.sample_button, self.save_button = c.sample_button, c.save_button
        self.resume_state_button, self.open_output_button = c.resume_state_button, c.open_output_button
        self.state_badge, self.blocked_label = c.state_badge, c.blocked_label
        return c

    def _build_progress(self) -> QWidget:
        self.progress = p = ProgressPanel(self)
        self.progress_bar, self.progress_label = p.progress_bar, p.progress_label
        self.status_label, self.warning_label = p.status_label, p.warning_label
        return p

    def _say(self, text: str) -> None:
        """Show ``text`` in the status line (its tooltip holds it in full when it is clipped)."""
        self.progress.say(text)

    # ------------------------------------------------------------------ charts (built lazily: pyqtgraph is heavy)
    @property
    def charts(self) -> TrainingCharts:
        if self._charts is None:
            from guitrainer.ui.training.charts import TrainingCharts

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
        has_prompts = bool(self.run_config and self.run_config.sampling.prompts)
        self.controls.apply(s, self._blocked_by, has_prompts, self.last_state_path is not None)
        self.settings_panel.setEnabled(s not in ACTIVE)
        self.settings_scroll.setToolTip("Settings are locked while a run is active." if s in ACTIVE else "")
        if s in (TrainState.RUNNING, TrainState.PAUSED, TrainState.STOPPING):
            self._progress_timer.start()
        else:
            self._progress_timer.stop()

    def _on_config_changed(self, path: str) -> None:
        if path == "output.folder" and self.worker is not None and self.is_active:
            self._redirect_output(str(self.binding.get(path)))
        if path.startswith("output."):
            self._refresh_state_path()
        if path.startswith("sampling."):
            self._refresh_sampling_note()
        if path == "precision.training" and self._charts is not None and not self.is_active:
            self._charts.set_scaler_visible(self.binding.get(path) == "fp16")
        if path == "optimizer.name":  # LR-free optimizers take lr = 1.0; others an AdamW-sized one
            changes, why = learning_rates_for_optimizer(self.binding.config.optimizer)
            for key, value in changes.items():
                self.binding.set(key, value)
            if why:
                self._say(why)

    def _refresh_sampling_note(self) -> None:
        self.gallery.set_empty_text(sampling_note(self.binding.config.sampling))

    def _refresh_state_path(self) -> None:
        self.last_state_path = find_state(self.binding.config)
        if not self.is_active:
            self._apply_state()

    # ------------------------------------------------------------------ start
    def start(self, resume_from: str | None = None, changes: dict[str, Any] | None = None) -> None:
        """Check the settings, then train a copy of them (``resume_from``: a state folder to continue), with
        ``changes`` (setting -> value) made to that copy only: the user's settings stay as they are. Problems
        are listed in a dialog; a memory estimate above the GPU's memory asks first."""
        if self.is_active:
            return
        if self._blocked_by:  # no way past a blocking problem: Train, Resume and Train more alike
            self._say(f"Fix this first on the Model & Precision page: {first_line(self._blocked_by)}")
            return
        self._cancel_start = False
        cfg = self.binding.config.copy()
        for key, value in (changes or {}).items():
            cfg.set(key, value)
        cfg.schedule.resume_from = resume_from or ""
        self._set_state(TrainState.CHECKING)
        self._say("Checking the settings…")
        self._pending_config = cfg
        # at once when the window's device service knows the machine, else when its probe ends
        self.devices.when_known(self._on_probe_finished, self._on_probe_failed)

    def _on_probe_finished(self, device: DeviceInfo) -> None:
        cfg, self._pending_config = self._pending_config, None
        if cfg is not None:
            self._continue_start(cfg, device)

    def _on_probe_failed(self, message: str) -> None:
        cfg, self._pending_config = self._pending_config, None
        if cfg is not None:
            self._continue_start(cfg, None, probe_error=message)

    def _continue_start(self, cfg: TrainingConfig, device: DeviceInfo | None, probe_error: str = "") -> None:
        if QThread.currentThread() != self.thread():
            raise RuntimeError("the training page was driven from a background thread")
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
            self.problems_box = start_problems_box(self, check.errors)
            return
        if check.confirm:

            def answered(yes: bool) -> None:
                if yes:
                    self._launch(cfg)
                else:
                    self._set_state(TrainState.IDLE)
                    self._say("Not started.")

            self.confirm_box = start_confirm_box(self, check.confirm, answered)
            return
        self._launch(cfg)

    def _launch(self, cfg: TrainingConfig) -> None:
        resuming = bool(cfg.schedule.resume_from)
        charts = self.charts
        saved = read_saved_run(cfg.schedule.resume_from) if resuming else None
        if saved is not None and len(charts) and saved.global_step == int(charts.series("step")[-1]):
            pass  # the charts show this run up to the saved state: keep them and continue
        else:
            charts.clear(cfg.schedule.max_steps)
        charts.set_scaler_visible(cfg.precision.training == "fp16")
        if not resuming:  # a resumed run keeps its first pictures: they are still its "before"
            self.before_after.clear(demo=is_demo(cfg))
        self.run_config = cfg
        self._metrics = None
        self._rate_origin = None
        self._steps_seen = 0
        self.progress.reset(cfg.schedule.max_steps, "Loading the model…")
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
        self.worker_started.emit(worker)
        self._set_state(TrainState.RUNNING)
        self._say("Resuming from the saved state…" if resuming else "Starting…")
        log.info("training started%s", f" from {cfg.schedule.resume_from}" if resuming else "")
        run_in_thread(worker, name="TrainingThread")

    def resume_last(self) -> None:
        """Continue from the last saved state (of this run, or found in the output folder)."""
        path = self.last_state_path or find_state(self.binding.config)
        if not path:
            return
        saved = read_saved_run(path)
        if saved is not None and saved.complete and not self.is_active:
            self.finished_box = finished_run_box(
                self, saved.total_steps, saved.epoch, lambda more: self._train_more(saved, more)
            )
            return
        self.start(resume_from=path)

    def _train_more(self, saved: SavedRun, more_epochs: int) -> None:
        """Resume a complete run with ``more_epochs`` epochs added to its schedule (the run's, not the settings')."""
        s = self.binding.config.schedule
        changes = saved.schedule_for_more(more_epochs, s.epochs, s.max_steps)
        self._say(f"Training {more_epochs} more epoch{'s' if more_epochs != 1 else ''} from the saved state…")
        self.start(resume_from=saved.path, changes=changes)

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
        problem = open_in_file_manager(self, self.output_folder())
        if problem:
            self._say(problem)
        return not problem

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
        self.progress.warn(text)
        self.warning_raised.emit(text)

    @Slot(object)
    def _on_sample(self, sample: SampleImage) -> None:
        self.gallery.add_sample(sample)
        self.before_after.add_sample(sample)
        self.tabs.setTabText(self.tabs.indexOf(self.samples_tab), f"Samples ({self.gallery.count()})")

    @Slot(object)
    def _on_saved(self, saved: SavedFile) -> None:
        if saved.kind == "state":
            self.last_state_path = saved.path
        self.log_panel.append(f"saved {saved.kind} at step {saved.step}: {saved.path}")
        if self.status_label.text().startswith(("Saving", "Samples will")):  # no stale "Saving after this step…"
            self._say(f"Saved the {saved.kind} at step {saved.step}.")

    @Slot(object)
    def _on_finished(self, summary: RunSummary) -> None:
        self._end_run()
        self.last_summary = summary
        self.last_state_path = summary.state_path or find_state(self.run_config or self.binding.config)
        self._refresh_progress(force=True)
        if summary.status == "failed":
            self._set_state(TrainState.FAILED)
            self._say(f"Training failed: {summary.message}")
            self.show_error("Training failed", summary.message, summary.advice, summary.details or log_tail(self.log_panel.text(), LOG_TAIL_LINES))
        else:
            self._set_state(TrainState.STOPPED if summary.status == "stopped" else TrainState.FINISHED)
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
        self.show_error("Training failed", message, (), details or log_tail(self.log_panel.text(), LOG_TAIL_LINES))
        self._apply_state()
        self.run_failed.emit(message, details)

    def _end_run(self) -> None:
        self.worker = None
        if self._metrics is None:  # no step reported: the bar must not stay on "Loading the model…"
            self.progress_bar.setFormat("No steps trained")
        self.log_panel.detach()
        if self._charts is not None:
            self._charts.redraw()

    def show_error(self, title: str, message: str, advice: tuple[str, ...] | list[str], details: str) -> MessageBox:
        """A non-blocking error dialog: the message, what to try, and the traceback under "Show Details…"."""
        self.error_box = error_box(self, title, message, advice, details)
        return self.error_box

    # ------------------------------------------------------------------ progress (5 Hz)
    def _refresh_progress(self, force: bool = False) -> None:
        if not (self._progress_dirty or force):
            return
        self._progress_dirty = False
        m = self._metrics
        if m is None:
            return
        cfg = self.run_config
        epochs = cfg.schedule.epochs if cfg and not cfg.schedule.max_steps else None
        eta = math.nan
        if self._rate_origin is not None and self._state == TrainState.RUNNING:
            t0, s0 = self._rate_origin
            dt, ds = time.perf_counter() - t0, m.step - s0
            if ds > 0 and dt > 0:
                eta = (m.total_steps - m.step) * dt / ds
        self.progress.show_step(m, epochs, eta)

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
        return ask_close(self)

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
