"""Recording a run: a Reporter wrapper that passes every call on and keeps the run in the run store.

The training thread only appends each event to a queue (a deque append, well under a microsecond);
a writer thread of its own opens the store, writes the run's row when it starts, then every
``flush_seconds`` writes the queued steps, files and samples in one transaction, touches the run's
heartbeat while the run is quiet (loading, paused), and writes how the run ended. So the GUI thread
never waits on the database and a step never waits on a commit. A failure to record is reported
once as a warning and never stops the training.

A store that cannot be written *now* (a full disk, an I/O error, locked: ``StoreUnavailable``) is not
given up on: what the run reported is kept in memory and written when the store takes it again, tried
every ``retry_seconds`` (also after the run ended, while the process lives: the app's window). The
warning says so once. Only a store that cannot be used at all ends the recording of this run.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guitrainer.base.paths import expand
from guitrainer.config import TrainingConfig
from guitrainer.core.events import Reporter, RunSummary, SampleImage, SavedFile, StepMetrics
from guitrainer.core.runs import names as run_names
from guitrainer.core.runs import timings as run_timings
from guitrainer.core.runs.names import RunFiles
from guitrainer.core.runs.store import (
    RunStore,
    RunStoreError,
    StoreUnavailable,
    is_not_damage,
    normalize_path,
    unavailable,
)

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
HEARTBEAT_SECONDS = 20.0
#: a store that cannot be written now (a full disk) is tried again this often
RETRY_SECONDS = 5.0
_TB_FIELDS = ("loss", "lr", "grad_scale", "seconds_per_step", "images", "val_loss", "class_loss")


@dataclass
class _Batch:
    """Steps, files and run columns made from the reporter's events, not yet committed (one transaction)."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    drop_from: int | None = None

    def __bool__(self) -> bool:
        return bool(self.rows or self.artifacts or self.run or self.drop_from is not None)

    def add(self, other: _Batch) -> None:
        self.rows += other.rows
        self.artifacts += other.artifacts
        self.run.update(other.run)
        if self.drop_from is None:
            self.drop_from = other.drop_from


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
        retry_seconds: float = RETRY_SECONDS,
    ):
        self.inner = inner
        self.config = config
        self.source = source
        self.store_path = store_path
        self.flush_seconds = flush_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.retry_seconds = retry_seconds
        self.run_id: int | None = None
        self.error = ""  # why recording stopped ("" while it works)
        self.waiting = ""  # why the history is not written just now (a full disk); "" when it is
        self.tensorboard_folder: str | None = None
        self._queue: deque[tuple[str, Any]] = deque()
        self._wake = threading.Event()
        self._ready = threading.Event()
        self._settled = threading.Event()  # the end is written, or waits for a store that cannot be written now
        self._said_waiting = False  # the warning that the store cannot be written now is given once per run
        self._thread: threading.Thread | None = None
        self._ended = False
        self._store: RunStore | None = None
        self._retry_at = 0.0
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
        """Start the writer thread and wait until the run's row exists (or recording gave up, or waits)."""
        self._timings["started_at"] = time.time()
        self._thread = threading.Thread(target=self._loop, name="RunRecorder", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)

    def attach(self, trainer: Any) -> None:
        """The trainer whose device, dataset sizes and file names are recorded at the first step."""
        self._trainer = trainer

    @property
    def ended(self) -> bool:
        """:meth:`finish` or :meth:`fail` was called."""
        return self._ended

    def finish(self, summary: RunSummary, timeout: float = 60.0) -> None:
        """Write how the run ended (after every queued step) and stop the writer thread.

        Returns once that is written, or once the store is found unwritable now (a full disk): the writer then
        goes on trying in the background, and the run is not held up.
        """
        self._ended = True
        self._queue.append(("end", summary))
        self._stop(timeout)

    def written(self, timeout: float | None = None) -> bool:
        """Wait until everything reported is in the store (after :meth:`finish` returned while the store could not
        be written, a full disk, say); True when it is."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive() and not self.waiting

    def fail(self, message: str, *, interrupted: bool = False, timeout: float = 60.0) -> None:
        """The run ended with an exception (``interrupted``: aborted by the user, e.g. a second Ctrl+C)."""
        status = "interrupted" if interrupted else "failed"
        self.finish(RunSummary(status=status, steps=0, epochs=0, final_loss=None, message=message), timeout)

    def _stop(self, timeout: float) -> None:
        self._wake.set()
        if self._thread is None:
            return
        if not self._settled.wait(timeout):
            log.warning("the run recorder did not finish writing within %.0f s", timeout)
        elif not self.waiting:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ writer thread
    def _give_up(self, reason: str) -> None:
        self.error = reason
        log.warning("run history: %s", reason)
        with contextlib.suppress(Exception):
            self.inner.on_warning(f"This run is not recorded in the run history: {reason}")

    def _wait_for_store(self, e: StoreUnavailable) -> None:
        """The store cannot be written now: keep everything in memory, say so once, try again later."""
        if not self._said_waiting:
            self._said_waiting = True
            log.warning("run history: %s", e)
            with contextlib.suppress(Exception):
                self.inner.on_warning(
                    f"{e} This run's record is kept in memory meanwhile and written as soon as the history can be "
                    "written again (while the app or this command keeps running)."
                )
        self.waiting = str(e)
        self._retry_at = time.monotonic() + self.retry_seconds

    def _attempt(self, write: Callable[..., Any], *args: Any, reads_only: bool = False) -> bool:
        """``write(store, *args)``; False when the store cannot be written now (then it is tried again later).
        Other database errors are raised: recording this run gives up. ``reads_only``: a success says nothing
        about whether the store takes writes again."""
        assert self._store is not None
        try:
            write(self._store, *args)
        except (sqlite3.Error, OSError) as e:
            if not is_not_damage(e):
                raise
            self._wait_for_store(unavailable(self._store.path, e, "written"))
            return False
        if self.waiting and not reads_only:
            log.info("run history: written again (%s)", self._store.path)
            self.waiting = ""
        return True

    def _open(self) -> None:
        """Open the store and begin (or continue) the run's row; a store that cannot be used now waits."""
        try:
            store = RunStore(self.store_path)
        except StoreUnavailable as e:
            self._wait_for_store(e)
            return
        self._store = store
        if store.notice:
            self.inner.on_warning(store.notice)
        if not self._attempt(self._begin):
            store.close()
            self._store = None

    def _loop(self) -> None:
        try:
            self._open()
            self._ready.set()
            self._write_loop()
        except (RunStoreError, sqlite3.Error, OSError) as e:
            where = self._store.path if self._store is not None else self.store_path
            self._give_up(str(e) if isinstance(e, RunStoreError) else f"writing to {where} failed: {e}")
            self._ready.set()
            self._settled.set()
            self._drain_forever()
        finally:
            self._close_tensorboard()
            if self._store is not None:
                self._store.close()

    def _drain_forever(self) -> None:
        """Recording gave up: keep the queue empty until the run ends."""
        while True:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            while self._queue:
                kind, _ = self._queue.popleft()
                if kind == "end":
                    return

    def _write_loop(self) -> None:
        events: list[tuple[str, Any]] = []  # reported, not yet made into rows (the row may not exist yet)
        batch = _Batch()  # made into rows, not yet committed
        end: RunSummary | None = None
        last_write = time.monotonic()
        while True:
            self._wake.wait(self.retry_seconds if self.waiting else self.flush_seconds)
            self._wake.clear()
            while self._queue and end is None:
                kind, payload = self._queue.popleft()
                if kind == "end":
                    end = payload
                else:
                    events.append((kind, payload))
            if self._store is None and time.monotonic() >= self._retry_at:
                self._open()
            if self._store is None:
                if end is not None:
                    self._settled.set()  # the end waits for the store: the run goes on to its end meanwhile
                continue
            if events and self._attempt(self._prepare_into, batch, events, reads_only=True):
                events = []
            if batch and self._attempt(self._commit, batch):
                batch, last_write = _Batch(), time.monotonic()
            elif not batch and self.run_id is not None and time.monotonic() - last_write >= self.heartbeat_seconds:
                last_write = time.monotonic() if self._attempt(RunStore.heartbeat, self.run_id) else last_write
            if end is not None and not events and not batch and self._attempt(self._end, end):
                self._settled.set()
                return
            if end is not None and self.waiting:
                self._settled.set()

    def _begin(self, store: RunStore) -> None:
        """The run's row: a resumed run's own, else a new one. Tried again whole when the disk was full halfway."""
        store.mark_dead_runs()
        cfg = self.config
        if self.run_id is None:
            resume = cfg.schedule.resume_from
            run_id = store.run_for_state(expand(resume)) if resume else None
            if run_id is not None:
                self._resumed_row = store.snapshot_run(run_id)  # put back if this launch trains no step
                store.continue_run(run_id, config=cfg.to_dict())
                self._continuing = True
            else:
                run_id = self._new_row(store)
            self.run_id = run_id
        store.update_run(self.run_id, dataset_json=_dataset_summary(cfg))

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
            now=self._timings.get("started_at"),  # a row made late (the disk was full) keeps the run's start
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

    def _prepare_into(self, store: RunStore, batch: _Batch, items: list[tuple[str, Any]]) -> None:
        batch.add(self._prepare(store, items))

    def _prepare(self, store: RunStore, items: list[tuple[str, Any]]) -> _Batch:
        """Rows, files and run columns from the reported events (once each: counting images and time goes on)."""
        assert self.run_id is not None
        b = _Batch()
        for kind, p in items:
            if kind == "step":
                if self._first_step is None:
                    self._first(store, p, b)
                b.rows.append(self._row(p))
                b.run.update(steps=p.step, total_steps=p.total_steps)
                if p.loss == p.loss:  # not NaN
                    b.run["final_loss"] = p.loss
            elif kind == "saved":
                b.artifacts.append({"kind": p.kind, "path": normalize_path(p.path), "step": p.step, "epoch": p.epoch})
                if p.kind == "state":
                    b.run.update(state_path=normalize_path(p.path), state_step=p.step)
                elif p.kind == "lora":
                    b.run["lora_path"] = normalize_path(p.path)
            elif kind == "sample":
                b.artifacts.append({"kind": "sample", "path": normalize_path(p.path), "step": p.step, "prompt": p.prompt})
        if self._tb is not None:
            for r in b.rows:
                self._tb.add(r[0], dict(zip(_TB_FIELDS, r[2:9])))
        return b

    def _commit(self, store: RunStore, b: _Batch) -> None:
        assert self.run_id is not None
        store.write_batch(self.run_id, b.rows, b.artifacts, b.run, drop_from_step=b.drop_from)

    def _first(self, store: RunStore, m: StepMetrics, b: _Batch) -> None:
        """The first step of this launch: device and dataset sizes, the TensorBoard folder; a resumed run drops
        its later steps. Reads the store before changing anything (a read that fails leaves all as it was)."""
        assert self.run_id is not None
        before = store.last_metric(self.run_id, m.step) if self._continuing else None
        earlier = [a["path"] for a in store.artifacts(self.run_id)] if self._continuing else []
        self._first_step = m.step
        self._timings["first_step_at"] = time.time()
        b.run.update(device=_device_text(self._trainer))
        if isinstance(getattr(self._trainer, "files", None), RunFiles):
            b.run["name"] = self._files().label  # the run is listed by the name its files carry (name_2 ...)
        sizes = _dataset_sizes(self._trainer)
        if sizes:
            summary = _dataset_summary(self.config)
            summary.update(sizes)
            b.run["dataset_json"] = summary
        if getattr(self.config.output, "tensorboard", False):
            logs = self._open_tensorboard(earlier, m.step)
            if logs is not None:
                b.artifacts.append(logs)
        if self._continuing:
            self._images = float(before[1] or 0.0) if before else 0.0
            b.drop_from = m.step

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
    if not rec.ended:
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
