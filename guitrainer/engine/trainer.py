"""The training loop: ``Trainer(config, reporter, control).run() -> RunSummary``.

The loop only; each concern lives in its own module:

* :mod:`~guitrainer.engine.session` builds the run (accelerate, device, model, datasets, optimizer,
  schedule, GradScaler) into one frozen :class:`~guitrainer.engine.session.Session`;
* :mod:`~guitrainer.engine.cache` caches latents and text embeddings and parks frozen modules;
* :mod:`~guitrainer.engine.amp_step` is one optimizer step under mixed precision (DESIGN §4), with the
  class half of prior preservation;
* :mod:`~guitrainer.engine.saving` writes the LoRA, the intermediate saves, the rescue folder and the state;
* :mod:`~guitrainer.engine.resume` is the resumable state and RNG state;
* :mod:`~guitrainer.engine.distributed` is what several processes agree on (stop, pause, the mean loss).

accelerate provides the device, DDP wrapping under ``accelerate launch`` and the main-process rule (only
the main process reports and saves). Gradient accumulation is done by hand with ``no_sync``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from datetime import UTC, datetime

import torch

from guitrainer.base.errors import first_line
from guitrainer.base.fileio import WriteError
from guitrainer.base.paths import expand
from guitrainer.config import TrainingConfig
from guitrainer.core.events import Control, Reporter, RunSummary, StepMetrics
from guitrainer.core.precision.numerics import NonFinite, nan_advice
from guitrainer.core.runs import names as run_names
from guitrainer.core.runs.names import RunFiles
from guitrainer.engine import data, resume, validation
from guitrainer.engine.amp_step import AmpStep, Pair, StepResult
from guitrainer.engine.cache import RunCaches
from guitrainer.engine.distributed import weights_fingerprint
from guitrainer.engine.errors import (
    COMPLETE_ADVICE,
    DATASET_ADVICE,
    LORA_ADVICE,
    MODEL_ADVICE,
    OOM_ADVICE,
    WRITE_ADVICE,
    RunComplete,
    StoppedBeforeTraining,
    TrainingFailed,
    details,
    is_oom,
)
from guitrainer.engine.feedback import Feedback
from guitrainer.engine.lab.meters import collect_garbage
from guitrainer.engine.models.types import ModelLoadError
from guitrainer.engine.network import lora
from guitrainer.engine.numerics import StepWatch, monitor_for
from guitrainer.engine.resume import Progress
from guitrainer.engine.saving import Saver
from guitrainer.engine.session import Placement, Session, build_session, place

log = logging.getLogger(__name__)

#: fp16: this many skipped steps in a row (inf/NaN gradients every time) stop the run
MAX_CONSECUTIVE_SKIPS = 10

__all__ = [
    "DATASET_ADVICE", "LORA_ADVICE", "MODEL_ADVICE", "OOM_ADVICE", "WRITE_ADVICE", "MAX_CONSECUTIVE_SKIPS",
    "Trainer", "TrainingFailed", "StoppedBeforeTraining", "StepResult",
]  # fmt: skip


class Trainer:
    """Trains a LoRA as ``config`` says; reports through ``reporter``; obeys ``control`` once per step."""

    def __init__(self, config: TrainingConfig, reporter: Reporter | None = None, control: Control | None = None):
        self.config = config
        self.feedback = Feedback(reporter, control)
        self.reporter = self.feedback.reporter
        self.control = self.feedback.control
        self.progress = Progress()
        self.placement: Placement | None = None
        self.session: Session | None = None
        self.caches: RunCaches | None = None
        self.step: AmpStep | None = None
        self.saver: Saver | None = None
        self.numerics: StepWatch | None = None  # the numerics monitor (engine/numerics.py), set up with the run
        # one label on every file of the run (core/runs/names.py), chosen now so the app can show it at once
        self._files = run_names.choose(config.output, config.schedule.resume_from)
        self._last_nonfinite: NonFinite | None = None  # where the last skipped step's inf/NaN began

    # ------------------------------------------------------------------ what a finished run shows
    @property
    def warnings(self) -> list[str]:
        return self.feedback.warnings

    @property
    def device(self) -> torch.device | None:
        if self.session is not None:
            return self.session.device
        return self.placement.device if self.placement is not None else None

    @property
    def lora_path(self) -> str | None:
        return self.saver.lora_path if self.saver is not None else None

    @property
    def files(self) -> RunFiles:
        """Where this run writes: its label and folder (the folder it saves to now)."""
        return self.saver.files if self.saver is not None else self._files

    @property
    def state_path(self) -> str | None:
        return self.saver.state_path if self.saver is not None else None

    def state_dir(self):  # noqa: ANN201 - Path
        """Where the resumable state is written."""
        assert self.saver is not None, "run() first"
        return self.saver.state_dir()

    def evaluation_loss(self, seed: int = 0, adapters: bool = True, repeats: int = 4) -> float:
        """:meth:`AmpStep.evaluation_loss` of the trained model; call after :meth:`run`."""
        assert self.step is not None, "run() first"
        return self.step.evaluation_loss(seed, adapters, repeats)

    # ------------------------------------------------------------------ public
    def run(self) -> RunSummary:
        """Train; returns how the run ended. Out of memory and NaN losses end as "failed" with advice.

        A save that cannot be written at the end of the run or on stop (full disk, read-only folder, an
        output "folder" that is a file) ends as "failed" with the plain-words reason, never an exception.
        """
        try:
            return self._run()
        except WriteError as e:
            return self._summary("failed", e.strerror or str(e), WRITE_ADVICE, details())
        except TrainingFailed as f:
            return self._summary("failed", f.message, f.advice, details())
        except StoppedBeforeTraining as s:
            return self._summary("stopped", str(s))
        except RunComplete as c:
            folder = str(expand(self.config.schedule.resume_from))
            return dataclasses.replace(self._summary("complete", str(c), COMPLETE_ADVICE), state_path=folder)
        except data.DatasetError as e:
            return self._summary("failed", str(e), DATASET_ADVICE, details())
        except ModelLoadError as e:
            return self._summary("failed", str(e), e.advice or MODEL_ADVICE, details())
        except lora.LoraFormatError as e:
            return self._summary("failed", str(e), LORA_ADVICE, details())
        except (RuntimeError, MemoryError) as e:
            if not (is_oom(e) or isinstance(e, MemoryError)):
                raise
            trace = details()
            self._free_memory()
            msg = f"out of memory at step {self.progress.global_step + 1}: {first_line(e, 200)}"
            return self._summary("failed", msg, OOM_ADVICE, trace)

    def _summary(self, status: str, message: str = "", advice: tuple[str, ...] = (), trace: str = "") -> RunSummary:
        p = self.progress
        return RunSummary(
            status=status,
            steps=p.global_step,
            epochs=p.epoch,
            final_loss=p.last_loss,
            lora_path=self.lora_path,
            state_path=self.state_path,
            message=message,
            advice=tuple(advice),
            skipped_steps=p.skipped_total,
            warnings=tuple(self.warnings),
            details=trace,
        )

    def _free_memory(self) -> None:
        self.session = self.caches = self.step = None
        if self.saver is not None:
            self.saver.session = None
        collect_garbage()  # not on a worker thread: see its docstring
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ set-up
    def _setup(self) -> Session:
        from accelerate.utils import set_seed

        cfg, fb = self.config, self.feedback
        self.placement = place(cfg, fb)
        s = self.session = build_session(cfg, fb, self.placement)
        self.caches = RunCaches(s, fb)
        self.numerics = StepWatch(monitor_for(s))
        self.step = AmpStep(s, self.caches, self.progress, self.numerics)
        self.saver = Saver(s, fb, self.progress, self._files)
        info = None
        if cfg.schedule.resume_from:
            info = resume.resumable_info(expand(cfg.schedule.resume_from), s, fb, self.progress)
        self.caches.prepare()
        if info is not None:
            folder = expand(cfg.schedule.resume_from)
            self.saver.continue_from(folder, resume.load_state(folder, s, self.progress, info), info)
            fb.status(f"resumed from {folder} at step {self.progress.global_step} (epoch {self.progress.epoch + 1})")
            if s.processes.count > 1:  # the state holds the main process's RNG: each process draws its own
                set_seed(cfg.schedule.seed + self.progress.global_step, device_specific=True)
        else:
            set_seed(cfg.schedule.seed, device_specific=True)  # the noise sequence starts here, whatever set-up used
        if (cfg.sampling.every_n_steps or cfg.sampling.at_start) and not any(p.strip() for p in cfg.sampling.prompts):
            fb.warn("sampling is on but no sample prompts are set; no samples will be made")
        return s

    # ------------------------------------------------------------------ loop
    def _run(self) -> RunSummary:
        s = self._setup()
        assert self.step is not None and self.saver is not None
        cfg, p = self.config, self.progress
        ga = cfg.schedule.gradient_accumulation
        if s.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(s.device)
        self.saver.started_at = datetime.now(UTC)
        self.feedback.status(f"training {s.total_steps} steps ({s.precision}, {s.optimizer_name}) on {s.device}")
        if s.processes.count > 1:
            share = [b for b, _cls in s.epoch_pairs(p.epoch)]
            shown = ", ".join(str(b) for b in share[:8]) + (", ..." if len(share) > 8 else "")
            s.processes.log(f"{len(share)} batches of each epoch; epoch {p.epoch + 1}: {shown}")
        if cfg.sampling.at_start and p.global_step == 0:
            self._sample()  # step 0: the base model's pictures, before anything is trained
        batches: list[Pair] = []
        batches_epoch = -1
        while p.global_step < s.total_steps:
            if batches_epoch != p.epoch:
                batches, batches_epoch = s.epoch_pairs(p.epoch), p.epoch
            micro = batches[p.batch_pos : p.batch_pos + ga]
            t0 = time.perf_counter()
            result = self.step.run(micro)
            self._advance(result, micro, time.perf_counter() - t0)
            if p.batch_pos >= len(batches):
                p.epoch += 1
                p.batch_pos = 0
                n = cfg.output.save_every_n_epochs
                if n and p.epoch % n == 0 and p.global_step < s.total_steps:
                    self.saver.save_intermediate(f"{p.epoch:06d}")
            outcome = self._poll_control()
            if outcome is not None:
                return self._process_done(outcome)
        self.feedback.status("training finished")
        self.saver.save_final_and_state()
        return self._process_done(self._summary("finished", f"trained {p.global_step} steps"))

    def _advance(self, result: StepResult, micro: list[Pair], dt: float) -> None:
        """Count a step, report it, sample when due; too many fp16 skips in a row end the run."""
        s, p = self.session, self.progress
        assert s is not None
        p.global_step += 1
        p.batch_pos += len(micro)
        p.last_loss = result.loss if math.isfinite(result.loss) else p.last_loss
        p.skipped_total += int(result.skipped)
        p.consecutive_skips = p.consecutive_skips + 1 if result.skipped else 0
        # every image through the UNet this step: training images and class images, on all processes
        images = sum(len(inst) + len(cls) for inst, cls in micro) * s.processes.count
        self._report(result, dt, images, self._validation_due())
        if result.numerics is not None and result.numerics.message:  # "step N skipped: inf first seen in ..."
            self.feedback.status(result.numerics.message)
        if result.skipped:
            self._last_nonfinite = result.numerics.nonfinite if result.numerics is not None else None
        every = self.config.sampling.every_n_steps
        if every and p.global_step % every == 0:
            self._sample()
        if p.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
            found = self._last_nonfinite
            where = f" The last one: {found.describe()}." if found is not None else ""
            raise TrainingFailed(
                f"fp16 overflow: {p.consecutive_skips} steps in a row had inf/NaN gradients and were skipped "
                f"(step {p.global_step}); training stopped.{where} The last saved LoRA and state were kept unchanged.",
                nan_advice(found, s.precision, self.config.precision.base_weights),
            )

    def _process_done(self, summary: RunSummary) -> RunSummary:
        """Several processes: log how this one ended, with a fingerprint of its LoRA weights (DDP keeps
        them equal on every process, so the main process's saved LoRA is everyone's)."""
        s = self.session
        if s is not None and s.processes.count > 1:
            weights = weights_fingerprint(resume.trainable_state(s))
            s.processes.log(f"{summary.status} at step {summary.steps}; LoRA weights {weights}")
        return summary

    def _validation_due(self) -> float | None:
        """The validation loss on every ``validation.every_n_steps``-th step (with validation images), else None."""
        s = self.session
        if s is None or s.validation_dataset is None or self.progress.global_step % self.config.validation.every_n_steps:
            return None
        return validation.validation_loss(s, self.caches, self.step)

    def validation_loss(self) -> float | None:
        """:func:`validation.validation_loss` of the trained model (None without validation images)."""
        assert self.session is not None, "run() first"
        return validation.validation_loss(self.session, self.caches, self.step)

    def _report(self, r: StepResult, dt: float, images: int, validation_loss: float | None = None) -> None:
        """One StepMetrics: ``loss`` is the total; ``instance_loss``, ``class_loss`` with class images only."""
        s, p = self.session, self.progress
        assert s is not None
        if not s.main:
            return
        peak = int(torch.cuda.max_memory_allocated(s.device)) if s.device.type == "cuda" else None
        self.reporter.on_step(
            StepMetrics(
                step=p.global_step,
                total_steps=s.total_steps,
                epoch=p.epoch + 1,
                loss=r.loss,
                lr=float(s.optimizer.param_groups[0]["lr"]),
                grad_scale=float(s.scaler.get_scale()) if s.scaler is not None else None,
                skipped=r.skipped,
                skipped_total=p.skipped_total,
                grad_norm=r.grad_norm,
                seconds_per_step=dt,
                images_per_second=images / dt if dt > 0 else 0.0,
                peak_memory_bytes=peak,
                class_loss=r.class_loss,
                instance_loss=r.instance_loss,
                **(r.numerics.metrics_fields() if r.numerics is not None else {}),
                validation_loss=validation_loss,
            )
        )

    # ------------------------------------------------------------------ control
    def _take_output_folder(self) -> None:
        """A new output folder chosen during the run (Output page) applies to the saves from now on."""
        folder = self.control.take_output_folder()
        if folder and folder != self.config.output.folder:
            self.config.output.folder = folder
            self.feedback.status(f"saving into {expand(folder)} from now on")

    def _take_save_request(self) -> None:
        assert self.saver is not None
        self._take_output_folder()
        if self.control.take_save_request():
            self.saver.save_intermediate(f"step{self.progress.global_step:06d}")

    def _poll_control(self) -> RunSummary | None:
        c, p, s = self.control, self.progress, self.session
        assert s is not None and self.saver is not None
        self._take_save_request()  # Save now: the main process writes, the others have nothing to do
        # several processes: all stop (or pause) at the same step when the main process's Control says so
        stop, paused = s.processes.any_process(c.stop_requested, c.paused)
        if paused and not stop:
            self.feedback.status(f"paused at step {p.global_step}")
            while paused and not stop:  # Save now (and a new folder) work while paused
                c.wait_while_paused(0.05, timeout=0.25)
                self._take_save_request()
                stop, paused = s.processes.any_process(c.stop_requested, c.paused)
            if not stop:
                self.feedback.status("resumed")
        self._take_output_folder()
        if stop:
            self.feedback.status(f"stopping at step {p.global_step}; saving the LoRA and a resumable state")
            self.saver.save_final_and_state()
            if not s.main:
                return self._summary("stopped", f"stopped at step {p.global_step}; the main process saves")
            return self._summary("stopped", f"stopped at step {p.global_step}; resume from {self.state_path}")
        if c.take_sample_request():  # after a pause: a sample asked for while paused is made on resume
            self._sample()
        return None

    def _sample(self) -> None:
        """Sample images from ``sampling.prompts`` with the current LoRA (:func:`sampling.sample_during_run`)."""
        from guitrainer.engine import sampling

        if self.session is None or self.caches is None or self.saver is None:
            return
        sampling.sample_during_run(self.session, self.caches, self.saver.files, self.feedback, self.progress.global_step)
