"""Recording a run: a Reporter wrapper that passes every call on and keeps the run in the run store.

The training thread only appends each event to a queue (a deque append, well under a microsecond);
a writer thread of its own opens the store, writes the run's row when it starts, then every
``flush_seconds`` writes the queued steps, files and samples in one transaction, touches the run's
heartbeat while the run is quiet (loading, paused), and writes how the run ended. So the GUI thread
never waits on the database and a step never waits on a commit. A failure to record is reported
once as a warning and never stops the training.

A run resumed from a state that a stored run wrote continues that run's row: its series from the
resumed step on are replaced by the new steps, so a kill between the last state and the kill leaves
no doubled steps, and its time is the sum of its parts (:mod:`guitrainer.core.runs.timings`).

Optional TensorBoard event files (``output.tensorboard``) are written by the same thread, into the
run's ``logs/<label>_<time>`` (a resumed run on into the folder of its earlier parts), opened at the
first step: a run that never trains leaves no empty log folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from guitrainer.base.paths import expand
from guitrainer.config import TrainingConfig
from guitrainer.core.events import Reporter, RunSummary, SampleImage, SavedFile, StepMetrics
from guitrainer.core.runs import names as run_names
from guitrainer.core.runs import timings as run_timings
from guitrainer.core.runs.names import RunFiles
from guitrainer.core.runs.store import RunStore, RunStoreError, normalize_path

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
HEARTBEAT_SECONDS = 20.0


class RunRecorder:
    """Implements :class:`~guitrainer.core.events.Reporter`: forwards to ``inner`` and records the run.

    Call :meth:`start` before the run, :meth:`attach` with the trainer once built, and :meth:`finish`
    (or :meth:`fail`) at the end; :func:`recording` does all three.
    """

    def __init__(
        self,
        inner: Reporter,
        config: TrainingConfig,
        *,
        source: str,
        store_path: str | os.PathLike[str] | None = None,
        flush_seconds: float = FLUSH_SECONDS,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
    ):
        self.inner = inner
        self.config = config
        self.source = source
        self.store_path = store_path
        self.flush_seconds = flush_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.run_id: int | None = None
        self.error = ""  # why recording stopped ("" while it works)
        self.tensorboard_folder: str | None = None
        self._queue: deque[tuple[str, Any]] = deque()
        self._wake = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._trainer: Any = None
        self._continuing = False
        self._resumed_row: dict[str, Any] = {}
        self._first_step: int | None = None
        self._images = 0.0
        self._timings: dict[str, float] = {}
        self._train_seconds = 0.0
        self._steps_seen = 0
        self._tb: Any = None

    # ------------------------------------------------------------------ Reporter (training thread)
    def on_step(self, metrics: StepMetrics) -> None:
        self._queue.append(("step", metrics))
        self.inner.on_step(metrics)

    def on_status(self, text: str) -> None:
        self.inner.on_status(text)

    def on_warning(self, text: str) -> None:
        self.inner.on_warning(text)

    def on_saved(self, saved: SavedFile) -> None:
        self._queue.append(("saved", saved))
        self.inner.on_saved(saved)

    def on_sample(self, sample: SampleImage) -> None:
        self._queue.append(("sample", sample))
        self.inner.on_sample(sample)

    @property
    def reporter(self) -> RunRecorder:
        """What the trainer reports to (this recorder)."""
        return self

    # ------------------------------------------------------------------ life cycle (worker thread)
    def start(self, timeout: float = 30.0) -> None:
        """Start the writer thread and wait until the run's row exists (or recording gave up)."""
        self._timings["started_at"] = time.time()
        self._thread = threading.Thread(target=self._loop, name="RunRecorder", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)

    def attach(self, trainer: Any) -> None:
        """The trainer whose device and dataset sizes are recorded at the first step."""
        self._trainer = trainer

    def finish(self, summary: RunSummary, timeout: float = 60.0) -> None:
        """Write how the run ended (after every queued step) and stop the writer thread."""
        self._queue.append(("end", summary))
        self._stop(timeout)

    def fail(self, message: str, *, interrupted: bool = False, timeout: float = 60.0) -> None:
        """The run ended with an exception (``interrupted``: aborted by the user, e.g. a second Ctrl+C)."""
        status = "interrupted" if interrupted else "failed"
        self._queue.append(("end", RunSummary(status=status, steps=0, epochs=0, final_loss=None, message=message)))
        self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the run recorder did not finish writing within %.0f s", timeout)

    # ------------------------------------------------------------------ writer thread
    def _give_up(self, reason: str) -> None:
        self.error = reason
        log.warning("run history: %s", reason)
        with contextlib.suppress(Exception):
            self.inner.on_warning(f"This run is not recorded in the run history: {reason}")

    def _loop(self) -> None:
        store: RunStore | None = None
        try:
            store = RunStore(self.store_path)
            if store.notice:
                self.inner.on_warning(store.notice)
            store.mark_dead_runs()
            self.run_id = self._begin(store)
        except (RunStoreError, sqlite3.Error, OSError) as e:
            self._give_up(str(e))
            self._ready.set()
            self._drain_forever()
            if store is not None:
                store.close()
            return
        self._ready.set()
        try:
            self._write_loop(store)
        except (sqlite3.Error, OSError) as e:
            self._give_up(f"writing to {store.path} failed: {e}")
            self._drain_forever()
        finally:
            self._close_tensorboard()
            store.close()

    def _drain_forever(self) -> None:
        """Recording gave up: keep the queue empty until the run ends."""
        while True:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            while self._queue:
                kind, _ = self._queue.popleft()
                if kind == "end":
                    return

    def _write_loop(self, store: RunStore) -> None:
        assert self.run_id is not None
        last_write = time.monotonic()
        while True:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            items = []
            end: RunSummary | None = None
            while self._queue:
                kind, payload = self._queue.popleft()
                if kind == "end":
                    end = payload
                    break
                items.append((kind, payload))
            if items:
                self._write(store, items)
                last_write = time.monotonic()
            elif time.monotonic() - last_write >= self.heartbeat_seconds:
                store.heartbeat(self.run_id)
                last_write = time.monotonic()
            if end is not None:
                self._end(store, end)
                return

    def _begin(self, store: RunStore) -> int:
        cfg = self.config
        resume = cfg.schedule.resume_from
        run_id = store.run_for_state(expand(resume)) if resume else None
        if run_id is not None:
            self._resumed_row = store.snapshot_run(run_id)  # put back if this launch trains no step
            store.continue_run(run_id, config=cfg.to_dict())
            self._continuing = True
        else:
            run_id = self._new_row(store)
        store.update_run(run_id, dataset_json=_dataset_summary(cfg))
        return run_id

    def _new_row(self, store: RunStore) -> int:
        cfg = self.config
        return store.begin_run(
            name=cfg.output.name,
            config=cfg.to_dict(),
            source=self.source,
            model=cfg.model.base,
            precision=cfg.precision.training,
            save_precision=cfg.precision.save,
            output_folder=normalize_path(expand(cfg.output.folder)),
            total_steps=cfg.schedule.max_steps,
        )

    def _files(self) -> RunFiles:
        """The run's file names: the trainer's (chosen when it was made), else as the trainer would choose them."""
        files = getattr(self._trainer, "files", None)
        if isinstance(files, RunFiles):
            return files
        return run_names.choose(self.config.output, self.config.schedule.resume_from)

    def _open_tensorboard(self, earlier: list[str], first_step: int) -> dict[str, Any] | None:
        """The TensorBoard writer of this run, at its first step; returns the artifact to record (None: none new).

        A resumed run writes on into the log folder of its earlier parts (one of ``earlier``, the paths its row
        lists), and tells TensorBoard to drop what they wrote from ``first_step`` on (the steps redone after the
        state), as the run store's series does.
        """
        from guitrainer.engine.tb_events import TensorBoardLog

        files = self._files()
        logs = [p for p in earlier if Path(p).parent == files.folder / run_names.LOGS_FOLDER and Path(p).is_dir()]
        folder = logs[-1] if logs else str(files.logs())
        try:
            self._tb = TensorBoardLog(folder, purge_step=first_step if logs else None)
        except ImportError:
            self.inner.on_warning("TensorBoard logs are on, but tensorboardX is not installed: pip install tensorboardX")
            return None
        except OSError as e:
            self.inner.on_warning(f"TensorBoard logs cannot be written in {folder}: {e.strerror or e}")
            return None
        self.tensorboard_folder = folder
        return None if logs else {"kind": "logs", "path": normalize_path(folder)}

    def _close_tensorboard(self) -> None:
        if self._tb is not None:
            with contextlib.suppress(Exception):
                self._tb.close()
            self._tb = None

    def _write(self, store: RunStore, items: list[tuple[str, Any]]) -> None:
        assert self.run_id is not None
        rows: list[tuple[Any, ...]] = []
        artifacts: list[dict[str, Any]] = []
        run: dict[str, Any] = {}
        drop_from: int | None = None
        for kind, p in items:
            if kind == "step":
                if self._first_step is None:
                    drop_from = self._first(store, p, run, artifacts)
                rows.append(self._row(p))
                run.update(steps=p.step, total_steps=p.total_steps)
                if p.loss == p.loss:  # not NaN
                    run["final_loss"] = p.loss
            elif kind == "saved":
                artifacts.append({"kind": p.kind, "path": normalize_path(p.path), "step": p.step, "epoch": p.epoch})
                if p.kind == "state":
                    run.update(state_path=normalize_path(p.path), state_step=p.step)
                elif p.kind == "lora":
                    run["lora_path"] = normalize_path(p.path)
            elif kind == "sample":
                artifacts.append({"kind": "sample", "path": normalize_path(p.path), "step": p.step, "prompt": p.prompt})
        store.write_batch(self.run_id, rows, artifacts, run, drop_from_step=drop_from)
        if self._tb is not None:
            for r in rows:
                self._tb.add(r[0], dict(zip(("loss", "lr", "grad_scale", "seconds_per_step", "images", "val_loss", "class_loss"), r[2:9])))

    def _first(self, store: RunStore, m: StepMetrics, run: dict[str, Any], artifacts: list[dict[str, Any]]) -> int | None:
        """The first step of this launch: device and dataset sizes, the TensorBoard folder; a resumed run drops
        its later steps."""
        assert self.run_id is not None
        self._first_step = m.step
        self._timings["first_step_at"] = time.time()
        run.update(device=_device_text(self._trainer))
        if isinstance(getattr(self._trainer, "files", None), RunFiles):
            run["name"] = self._files().label  # the run is listed by the name its files carry (name_2 ...)
        sizes = _dataset_sizes(self._trainer)
        if sizes:
            summary = _dataset_summary(self.config)
            summary.update(sizes)
            run["dataset_json"] = summary
        if getattr(self.config.output, "tensorboard", False):
            earlier = [a["path"] for a in store.artifacts(self.run_id)] if self._continuing else []
            logs = self._open_tensorboard(earlier, m.step)
            if logs is not None:
                artifacts.append(logs)
        if not self._continuing:
            return None
        before = store.last_metric(self.run_id, m.step)
        self._images = float(before[1] or 0.0) if before else 0.0
        return m.step

    def _row(self, m: StepMetrics) -> tuple[Any, ...]:
        images = m.images_per_second * m.seconds_per_step
        self._images += round(images) if images > 0 else 0
        self._train_seconds += m.seconds_per_step
        self._steps_seen += 1
        val = getattr(m, "validation_loss", None)
        return (m.step, m.epoch, m.loss, m.lr, m.grad_scale, m.seconds_per_step, self._images, val, m.class_loss, int(m.skipped))

    def _end(self, store: RunStore, summary: RunSummary) -> None:
        assert self.run_id is not None
        if self._continuing and self._first_step is None and self._resumed_row:
            # A resume that trained nothing (refused, failed while loading, or the run was complete) leaves the
            # run it resumed as it was, and is kept as an attempt of its own with its message.
            store.restore_run(self.run_id, self._resumed_row)
            self.run_id = self._new_row(store)
            self._continuing = False
        t = self._timings
        part = run_timings.part(t["started_at"], time.time(), t.get("first_step_at"), self._train_seconds, self._steps_seen)
        earlier = _loads(self._resumed_row.get("timings_json")) if self._continuing else {}
        values: dict[str, Any] = {"timings_json": run_timings.add_part(earlier, part), "message": summary.message[:2000]}
        if summary.steps:
            values["steps"] = summary.steps
        if summary.final_loss is not None:
            values["final_loss"] = summary.final_loss
        if summary.lora_path:
            values["lora_path"] = normalize_path(summary.lora_path)
        if summary.state_path:
            values["state_path"] = normalize_path(summary.state_path)
        store.end_run(self.run_id, summary.status if summary.status in ("finished", "stopped", "failed", "interrupted") else "failed", **values)
        if self._tb is not None:
            self._close_tensorboard()


class _NotRecording:
    """What :func:`recording` yields when recording is off: the inner reporter, and no-ops."""

    run_id = None
    error = ""
    tensorboard_folder = None

    def __init__(self, inner: Reporter):
        self.reporter = inner

    def attach(self, trainer: Any) -> None:
        pass

    def finish(self, summary: RunSummary) -> None:
        pass


def is_main_process() -> bool:
    """False in the other processes of an ``accelerate launch`` / ``torchrun`` run (only rank 0 records)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        world = 1
    return world <= 1 or os.environ.get("RANK", "0") in ("", "0")


@contextlib.contextmanager
def recording(
    inner: Reporter,
    config: TrainingConfig,
    *,
    source: str,
    enabled: bool = True,
    store_path: str | os.PathLike[str] | None = None,
) -> Iterator[Any]:
    """Record the run in the body: yields an object with ``reporter`` (give it to the trainer),
    ``attach(trainer)`` and ``finish(summary)``. An exception out of the body marks the run failed
    (``interrupted`` for KeyboardInterrupt) and goes on; a body that never calls ``finish`` ends failed."""
    if not enabled or not is_main_process():
        yield _NotRecording(inner)
        return
    rec = RunRecorder(inner, config, source=source, store_path=store_path)
    rec.start()
    try:
        yield rec
    except BaseException as e:
        rec.fail(str(e) or type(e).__name__, interrupted=isinstance(e, KeyboardInterrupt))
        raise
    if rec._thread is not None and rec._thread.is_alive():
        rec.fail("the run ended without a summary")


def _dataset_summary(cfg: TrainingConfig) -> dict[str, Any]:
    d = cfg.dataset
    return {
        "folders": [{"path": f.path, "repeats": f.repeats} for f in d.folders],
        "regularization_folders": [{"path": f.path, "repeats": f.repeats} for f in d.regularization_folders],
        "resolution": d.resolution,
        "bucketing": d.bucketing,
        "batch_size": cfg.schedule.batch_size,
        "gradient_accumulation": cfg.schedule.gradient_accumulation,
    }


def _loads(text: Any) -> dict[str, Any]:
    """A JSON column as a dict ({} when empty or not a JSON object)."""
    import json

    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _built(trainer: Any) -> Any:
    """Where the built run lives: the trainer's frozen :class:`~guitrainer.engine.session.Session` once set up."""
    return getattr(trainer, "session", None) or trainer


def _dataset_sizes(trainer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    trainer = _built(trainer)
    for key, attr in (("images_per_epoch", "dataset"), ("class_images_per_epoch", "class_dataset")):
        with contextlib.suppress(Exception):
            ds = getattr(trainer, attr, None)
            if ds is not None:
                out[key] = len(ds)
    with contextlib.suppress(Exception):
        if getattr(trainer, "steps_per_epoch", None):
            out["steps_per_epoch"] = int(trainer.steps_per_epoch)
    return out


def _device_text(trainer: Any) -> str:
    device = getattr(_built(trainer), "device", None)
    if device is None:
        return ""
    text = str(device)
    torch = sys.modules.get("torch")
    if torch is not None and getattr(device, "type", "") == "cuda":
        with contextlib.suppress(Exception):
            text += f" ({torch.cuda.get_device_name(device)})"
    return text
