"""The precision lab: a few real training steps of the user's own configuration, once per precision.

``compare_precisions(config, candidates, steps)`` trains the user's model on the user's dataset with their
batch and resolution for ``warmup + steps`` steps per candidate (fp32, fp16 AMP, bf16 AMP, and each with
fp8 base weights where the trainer and the device allow), through the public Trainer API only, and
measures what the seed promises of mixed precision: faster steps, less memory, less energy, and a loss
that stays close to fp32's.

Fair comparison:
* every candidate starts from the same LoRA weights: the first candidate's fresh initialisation is
  written (fp32) before its first step and every later candidate continues from it (``model.init_lora``);
  a user's own ``init_lora`` is kept as it is;
* the same seed, so the same batches and the same noise stream;
* warm-up steps are not timed; s/step is the median of the timed steps.

Candidates the device cannot run are listed with the precision rules' reason, not run. A candidate that
runs out of memory is reported as "does not fit", its memory is freed and the next one runs. ``control``
stops the lab between or inside candidates (the Trainer polls it each step); nothing is left running and
the caller's config is never changed (each candidate trains a copy, into a temporary folder).
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from guitrainer.config import TrainingConfig
from guitrainer.core.device.hardware import DeviceInfo
from guitrainer.core.events import Control, RunSummary, SampleImage, SavedFile, StepMetrics
from guitrainer.core.memory import estimate
from guitrainer.core.memory.specs import config_family
from guitrainer.core.precision.lab import (
    Candidate,
    CandidateResult,
    LabProgress,
    LabReport,
    device_key,
    median,
)
from guitrainer.core.precision.lab_plan import plan
from guitrainer.core.precision.measurements import MeasurementStore
from guitrainer.engine.compute_device import compute_device
from guitrainer.engine.lab.meters import EnergyMeter, MemoryMeter, energy_meter, free_memory

log = logging.getLogger(__name__)

#: the images the evaluation loss is measured on (the first of the dataset, fixed noise and timesteps)
EVAL_IMAGES = 8
EVAL_SEED = 1234
INIT_FILE = "lab_init_lora.safetensors"
FLOAT8_DTYPES = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz") if hasattr(torch, n)}
#: a candidate whose first step takes this many times the fp32 reference's median step is stopped there
#: (fp16 convolutions on a CPU: ~20x slower than fp32; a lab of minutes per step helps nobody)
SLOW_LIMIT = 10.0

ProgressCallback = Callable[[LabProgress], None]
TrainerFactory = Callable[[TrainingConfig, Any, Control], Any]


def engine_supports_fp8() -> bool:
    """Whether this trainer can store the frozen base weights in fp8 (``precision.base_weights``)."""
    return hasattr(TrainingConfig().precision, "base_weights") and hasattr(torch, "float8_e4m3fn")


def _default_factory(config: TrainingConfig, reporter: Any, control: Control) -> Any:
    from guitrainer.engine.trainer import Trainer

    return Trainer(config, reporter, control)


class _CandidateControl(Control):
    """One candidate's control: stops on its own request (too slow) or when the whole lab is cancelled."""

    def __init__(self, lab: Control):
        super().__init__()
        self.lab = lab

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set() or self.lab.stop_requested


def trainer_model(trainer: Any) -> Any:
    """The trainer's loaded model (``LoadedModel``), or None before it is loaded or after it was freed."""
    session = getattr(trainer, "session", None)
    return session.model if session is not None else getattr(trainer, "model", None)


def trainer_dataset(trainer: Any) -> Any:
    session = getattr(trainer, "session", None)
    return session.dataset if session is not None else getattr(trainer, "dataset", None)


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


class _LabReporter:
    """Collects a candidate's steps; reports progress; snapshots the LoRA before the first step."""

    def __init__(self, lab: _Lab, index: int, candidate: Candidate, total_steps: int):
        self.lab, self.index, self.candidate, self.total_steps = lab, index, candidate, total_steps
        self.trainer: Any = None
        self.steps: list[StepMetrics] = []
        self.warnings: list[str] = []
        self.energy_start: float | None = None
        self.energy_end: float | None = None
        self.control: _CandidateControl | None = None
        self.too_slow = ""
        self.fp8_ignored = ""

    def _progress(self, step: int, message: str) -> None:
        self.lab.progress(LabProgress(self.index, self.lab.count, self.candidate, step, self.total_steps, message))

    def on_status(self, text: str) -> None:
        if not self.steps and self.trainer is not None and trainer_model(self.trainer) is not None:
            self.lab.before_first_step(self.trainer)
            self._check_fp8()
            if self.lab.warmup == 0:  # every step is timed: the energy window opens before the first
                self.energy_start = self.lab.energy.read()
        self._progress(len(self.steps), f"{self.candidate.label}: {text}")

    def _check_fp8(self) -> None:
        """An fp8 candidate whose UNet holds no float8 weights measured nothing new: stop it, say why."""
        if self.candidate.base_weights != "fp8" or self.fp8_ignored or self.control is None:
            return
        unet = trainer_model(self.trainer).denoiser
        dtypes = {t.dtype for t in (*unet.parameters(), *unet.buffers())}
        if not dtypes & FLOAT8_DTYPES:
            stored = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
            self.fp8_ignored = (
                f"this trainer does not store base weights in fp8 yet (precision.base_weights = fp8 left the "
                f"UNet in {stored})"
            )
            self.lab.fp8_ignored = self.fp8_ignored
            self.control.request_stop()

    def on_step(self, metrics: StepMetrics) -> None:
        self.steps.append(metrics)
        self.lab.memory.sample()
        limit = self.lab.slow_after()
        if len(self.steps) == 1 and limit is not None and metrics.seconds_per_step > limit and self.control is not None:
            ref = limit / SLOW_LIMIT
            self.too_slow = (
                f"too slow to measure: its first step took {metrics.seconds_per_step:.1f} s, "
                f"{metrics.seconds_per_step / ref:.0f}x fp32's {ref:.2f} s; stopped there"
            )
            self.control.request_stop()
        if metrics.step == self.lab.warmup:
            self.energy_start = self.lab.energy.read()
        elif metrics.step == self.total_steps:
            self.energy_end = self.lab.energy.read()
        self._progress(metrics.step, f"{self.candidate.label}: step {metrics.step} of {self.total_steps}")

    def on_warning(self, text: str) -> None:
        self.warnings.append(text)

    def on_saved(self, saved: SavedFile) -> None:
        pass

    def on_sample(self, sample: SampleImage) -> None:
        pass


class _Lab:
    """One comparison: the shared state of its candidates (folder, init LoRA, meters)."""

    def __init__(self, config: TrainingConfig, steps: int, warmup: int, progress: ProgressCallback | None, control: Control):
        self.config = config.copy()  # never the caller's object
        self.steps, self.warmup = steps, warmup
        self._progress = progress
        self.control = control
        self.count = 0
        self.folder = Path(tempfile.mkdtemp(prefix="guitrainer-lab-"))
        self.init_path: Path | None = None if config.model.init_lora else self.folder / INIT_FILE
        self.init_written = False
        self.device_type = "cpu"
        self.memory = MemoryMeter("cpu")
        self.energy: EnergyMeter = EnergyMeter()
        self.notes: list[str] = []
        self.reference_step: float | None = None  # fp32's median s/step, once measured
        self.fp8_ignored = ""  # set when the trainer turned out not to store fp8 weights

    def slow_after(self) -> float | None:
        """Seconds a first step may take before the candidate counts as too slow (None: no limit yet)."""
        return SLOW_LIMIT * self.reference_step if self.reference_step else None

    def progress(self, p: LabProgress) -> None:
        if self._progress is not None:
            self._progress(p)

    # ------------------------------------------------------------------ per candidate
    def candidate_config(self, candidate: Candidate, index: int) -> TrainingConfig:
        cfg = self.config.copy()
        cfg.precision.training = candidate.training  # type: ignore[assignment]
        if hasattr(cfg.precision, "base_weights"):
            cfg.precision.base_weights = candidate.base_weights  # type: ignore[attr-defined]
        cfg.schedule.max_steps = self.warmup + self.steps
        cfg.schedule.resume_from = ""
        cfg.sampling.every_n_steps = 0
        cfg.sampling.at_start = False
        cfg.output.save_every_n_epochs = 0
        cfg.output.folder = str(self.folder / f"candidate_{index}")
        cfg.output.overwrite = True
        cfg.precision.save = "fp32"  # the lab's files are thrown away: no fp16 range check to report
        if self.init_written and self.init_path is not None:
            cfg.model.init_lora = str(self.init_path)
        return cfg

    def before_first_step(self, trainer: Any) -> None:
        """The trainer is set up and has not stepped: reset the peak, and keep the first fresh LoRA init."""
        self.memory.steps_begin()
        if self.init_path is None or self.init_written:
            return
        from guitrainer.engine.families import registry
        from guitrainer.engine.network import lora as L

        model = trainer_model(trainer)
        if not L.lora_layers(model.denoiser):
            return
        tes = model.text_encoders if trainer.config.network.train_text_encoder else []
        kohya = registry.family(model.family).kohya_state_dict(model.denoiser, tes, trainer.config.network.alpha)
        sd = {k: v.float() for k, v in kohya.items()}
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in sd.items()}, str(self.init_path))  # a temp file: no metadata needed
        self.init_written = True

    def warm_up(self, factory: TrainerFactory) -> None:
        """Load the model once, unmeasured, so that first-use costs (imports, building the demo model, the
        file cache) land on no candidate: on a CPU the memory column is the process's RSS growth."""
        control = Control()
        control.request_stop()  # the trainer stops right after loading the base model
        cfg = self.candidate_config(Candidate("fp32"), -1)
        self.progress(LabProgress(0, self.count, Candidate("fp32"), 0, 0, "loading the model once before measuring"))
        trainer = factory(cfg, _LabReporter(self, 0, Candidate("fp32"), 0), control)
        try:
            trainer.run()
        finally:
            del trainer
            free_memory()

    def run_candidate(self, factory: TrainerFactory, candidate: Candidate, index: int) -> CandidateResult:
        cfg = self.candidate_config(candidate, index)
        total = self.warmup + self.steps
        breakdown = estimate.estimate(cfg)
        est_bytes = breakdown.allocated  # comparable with max_memory_allocated: no CUDA context, no slack
        reporter = _LabReporter(self, index, candidate, total)
        base = {"candidate": candidate, "estimate_bytes": est_bytes, "warmup_steps": self.warmup}
        self.progress(LabProgress(index, self.count, candidate, 0, total, f"{candidate.label}: setting up"))
        started = time.perf_counter()
        self.memory.start()
        trainer = None
        try:
            reporter.control = _CandidateControl(self.control)
            trainer = factory(cfg, reporter, reporter.control)
            reporter.trainer = trainer
            summary: RunSummary = trainer.run()
            if reporter.fp8_ignored and not self.control.stop_requested:
                return CandidateResult(status="not_run", reason=reporter.fp8_ignored, **base)
            if reporter.too_slow and not self.control.stop_requested:
                return CandidateResult(status="too_slow", reason=reporter.too_slow, losses=_losses(reporter), **base)
            if summary.status == "stopped" or self.control.stop_requested:
                return CandidateResult(status="cancelled", reason="cancelled", **base)
            if summary.status != "finished":
                status = "does_not_fit" if summary.message.startswith("out of memory") else "failed"
                reason = "does not fit: " + summary.message if status == "does_not_fit" else summary.message
                return CandidateResult(status=status, reason=reason, losses=_losses(reporter), **base)
            eval_loss = _evaluation_loss(trainer)
            result = self._result(candidate, reporter, eval_loss, time.perf_counter() - started, base)
            if candidate == Candidate("fp32"):
                self.reference_step = result.seconds_per_step
            return result
        except Exception as e:  # noqa: BLE001 - one candidate's failure is a result; the others still run
            first = (str(e).splitlines() or [""])[0][:200]
            if _is_oom(e):
                return CandidateResult(status="does_not_fit", reason=f"does not fit: {first}", **base)
            log.exception("precision lab: %s failed", candidate.label)  # the traceback, for a bug report
            return CandidateResult(status="failed", reason=f"{type(e).__name__}: {first}", losses=_losses(reporter), **base)
        finally:
            reporter.trainer = None
            del trainer
            free_memory()

    def _result(self, candidate: Candidate, rep: _LabReporter, eval_loss: float | None, seconds: float, base: dict) -> CandidateResult:
        timed = [m for m in rep.steps if m.step > self.warmup]
        per_step = [m.seconds_per_step for m in timed]
        images = sum(m.images_per_second * m.seconds_per_step for m in timed)
        s = median(per_step)
        images_per_step = images / len(timed) if timed else 0.0
        energy = None
        if rep.energy_start is not None and rep.energy_end is not None and images > 0:
            energy = (rep.energy_end - rep.energy_start) / images
        last = rep.steps[-1] if rep.steps else None
        return CandidateResult(
            status="ran",
            seconds_per_step=s,
            images_per_second=images_per_step / s if s else None,
            step_seconds=tuple(per_step),
            losses=_losses(rep),
            peak_memory_bytes=self.memory.peak(),
            memory_source=self.memory.source,
            energy_per_image_j=energy,
            energy_source=self.energy.source,
            eval_loss=eval_loss,
            skipped_steps=last.skipped_total if last else 0,
            final_scale=last.grad_scale if last else None,
            total_seconds=seconds,
            **base,
        )


def _losses(rep: _LabReporter) -> tuple[float, ...]:
    return tuple(m.loss for m in rep.steps)


def _evaluation_loss(trainer: Any) -> float | None:
    """The trained LoRA's loss on the first :data:`EVAL_IMAGES` images, with fixed noise and timesteps."""
    ds = trainer_dataset(trainer)
    if ds is None or not hasattr(trainer, "evaluation_loss"):
        return None
    items, buckets = ds.items, ds.buckets
    try:
        ds.items, ds.buckets = items[:EVAL_IMAGES], buckets[:EVAL_IMAGES]
        value = float(trainer.evaluation_loss(seed=EVAL_SEED, repeats=1))
    finally:
        ds.items, ds.buckets = items, buckets
    return value if math.isfinite(value) else None


def _with_drift(results: list[CandidateResult]) -> list[CandidateResult]:
    import dataclasses

    ref = next((r for r in results if r.candidate == Candidate("fp32") and r.ran and r.eval_loss is not None), None)
    if ref is None or ref.eval_loss is None:
        return results
    out = []
    for r in results:
        if r.ran and r.eval_loss is not None:
            drift = r.eval_loss - ref.eval_loss
            rel = drift / ref.eval_loss if ref.eval_loss else None
            r = dataclasses.replace(r, loss_drift=drift, loss_drift_relative=rel)
        out.append(r)
    return out


def compare_precisions(
    config: TrainingConfig,
    candidates: Iterable[Candidate] | None = None,
    steps: int = 4,
    *,
    warmup: int = 1,
    progress: ProgressCallback | None = None,
    control: Control | None = None,
    device: DeviceInfo | None = None,
    trainer_factory: TrainerFactory | None = None,
    store: MeasurementStore | None = None,
) -> LabReport:
    """Measure each candidate on this machine with the user's own settings; returns the comparison.

    Args:
        config: the user's settings (not changed).
        candidates: what to try (default: all of :func:`~guitrainer.core.precision.lab.all_candidates`);
            fp32 is always measured first, as the reference.
        steps: timed steps per candidate (after ``warmup`` untimed ones).
        progress: called with a :class:`LabProgress` at each set-up status and step (in this thread).
        control: ``request_stop()`` cancels the lab; the candidate running stops at its next step.
        device: the machine's facts (default: probed).
        trainer_factory: builds the trainer (tests); default the engine's Trainer.
        store: where a finished comparison is kept (default: the user data folder); None keeps it there.
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"`steps` must be at least 1 and `warmup` at least 0, got {steps} and {warmup}")
    from guitrainer.core.device import hardware

    if device is None:
        device = hardware.probe().for_gpu_index(config.precision.gpu_index)
    control = control or Control()
    lab = _Lab(config, steps, warmup, progress, control)
    chosen = plan(device, config, candidates, engine_supports_fp8=engine_supports_fp8())
    lab.count = len(chosen)
    tdev = compute_device(device.gpu.index if device.gpu is not None else config.precision.gpu_index)
    lab.device_type = tdev.type
    lab.memory = MemoryMeter(tdev.type)
    lab.energy = energy_meter(tdev)
    factory = trainer_factory or _default_factory
    started = time.perf_counter()
    results: list[CandidateResult] = []
    try:
        if tdev.type == "cpu" and not control.stop_requested and any(not reason for _c, reason in chosen):
            lab.warm_up(factory)
        for index, (candidate, reason) in enumerate(chosen):
            if not reason and candidate.base_weights == "fp8" and lab.fp8_ignored:
                reason = lab.fp8_ignored  # seen on an earlier fp8 candidate: not worth another model load
            if reason:
                results.append(CandidateResult(candidate, "not_run", reason=reason))
            elif control.stop_requested:
                results.append(CandidateResult(candidate, "cancelled", reason="cancelled"))
            else:
                results.append(lab.run_candidate(factory, candidate, index))
    finally:
        lab.energy.close()
        shutil.rmtree(lab.folder, ignore_errors=True)
    report = _report(lab, config, device, results, time.perf_counter() - started)
    try:
        (store or MeasurementStore()).put(report)
    except OSError as e:  # the measurement is still returned and shown
        log.warning("the precision lab's result could not be kept: %s", e)
    return report


def _report(lab: _Lab, config: TrainingConfig, device: DeviceInfo, results: list[CandidateResult], seconds: float) -> LabReport:
    """The comparison, with the drift from fp32 filled in and notes on how to read it."""
    ran = any(r.ran for r in results)
    if lab.device_type == "cpu" and ran:
        lab.notes.append(
            "on a CPU peak memory is the process's RSS growth: memory the allocator kept from an earlier "
            "candidate is reused, not counted again, so later candidates can read low"
        )
    if config.model.init_lora:
        lab.notes.append(f"every candidate continued from {config.model.init_lora}")
    elif not lab.init_written and ran:
        lab.notes.append("the LoRA initialisation could not be shared; each candidate drew its own from the same seed")
    return LabReport(
        device_key=device_key(device),
        device_name=device.name,
        family=config_family(config),
        resolution=int(config.dataset.resolution),
        batch_size=int(config.schedule.batch_size),
        steps=lab.steps,
        warmup_steps=lab.warmup,
        results=tuple(_with_drift(results)),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        total_seconds=seconds,
        notes=tuple(lab.notes),
        cancelled=lab.control.stop_requested,
    )
