"""Saving: the LoRA (final, intermediate, on Save now), its metadata, the rescue folder, and the state.

Only the main process writes. A failed write of an intermediate save only warns (training goes on, the
next save tries again); a failed final save moves the LoRA to the rescue folder (:meth:`Saver.rescue`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import math
import os
import re
import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from guitrainer.base.fileio import WriteError
from guitrainer.base.fileio import explain as explain_write_error
from guitrainer.base.names import safe_name
from guitrainer.base.paths import expand, path_key
from guitrainer.core.events import SavedFile
from guitrainer.core.precision.numerics import SaveReport
from guitrainer.core.runs import names as run_names
from guitrainer.core.runs import state as run_state
from guitrainer.core.runs.names import RunFiles
from guitrainer.engine import resume
from guitrainer.engine.optim import averaged_weights
from guitrainer.engine.resume import Progress

log = logging.getLogger(__name__)


class Saver:
    """Writes a session's LoRA and state; remembers what it wrote (``lora_path``, ``state_path``)."""

    def __init__(self, session: Any, feedback: Any, progress: Progress, files: RunFiles | None = None) -> None:
        self.session = session
        self.feedback = feedback
        self.progress = progress
        self.config = session.config
        self.started_at = datetime.now(UTC)
        self.intermediates: list[str] = []
        self.lora_path: str | None = None
        self.state_path: str | None = None
        self.save_error: str | None = None  # why the last LoRA write failed (None: it worked)
        self.save_report: SaveReport | None = None  # the save-precision report of the last LoRA written
        o = self.config.output
        self._files = files or run_names.choose(o, self.config.schedule.resume_from)
        self._by_folder: dict[Path, RunFiles] = {self._files.folder: self._files}
        #: LoRAs this run wrote (a resumed run's earlier parts too), by :func:`path_key`: the only existing
        #: files it writes over
        self.own_files: set[str] = set()
        self.final_lora: str | None = None  # this run's final LoRA so far (a resumed run: the stopped part's)
        self.final_step: int | None = None  # the step it was saved at

    # ------------------------------------------------------------------ the LoRA
    def out_dir(self) -> Path:
        return expand(self.config.output.folder)

    def metadata(self) -> dict[str, str]:
        """kohya ``ss_*`` + ``modelspec.*`` metadata of the LoRA as it is now (see :func:`export.build_metadata`)."""
        from guitrainer.engine.export import build_metadata

        s, cfg, p = self.session, self.config, self.progress
        tags: dict[str, Counter[str]] = {}
        for it in s.dataset.items:
            folder = tags.setdefault(Path(it.image).parent.name or "dataset", Counter())
            folder.update(t.strip() for t in it.caption.split(",") if t.strip())
        spe = max(1, s.steps_per_epoch)
        epochs = cfg.schedule.epochs if cfg.schedule.max_steps <= 0 else math.ceil(s.total_steps / spe)
        meta = build_metadata(
            cfg,
            s.model.family,
            num_images=len(s.dataset),
            num_reg_images=len(s.class_dataset) if s.class_dataset is not None else 0,
            epochs=epochs,
            epoch=p.epoch,
            steps=p.global_step,
            started=self.started_at,
            finished=datetime.now(UTC),
            tag_frequency={k: dict(v) for k, v in tags.items()},
            optimizer_name=s.optimizer_name,
        )
        vds = s.validation_dataset
        meta["ss_num_validation_images"] = str(len(vds.items) if vds is not None else 0)  # sd-scripts' key
        meta["ss_output_name"] = self.files.label  # as kohya's: the file's name (the run's label, name_2 ...)
        return meta

    def write_lora(self, path: Path) -> str | None:
        """Export the LoRA to ``path`` in the configured format and save precision; returns what was written.

        A failed write (full disk, read-only folder) is reported as a warning and returns None: the trained
        LoRA stays in memory, training goes on, and the next save (e.g. ``Control.request_save()`` after
        ``config.output.folder`` was changed) tries again. An fp16 overflow is reported with the advice and
        that file is written as bf16 instead.
        """
        from guitrainer.engine.export import export_lora, saved_item

        s = self.session
        tes = s.model.text_encoders if s.train_te else []
        o = self.config.output
        try:
            with averaged_weights(s.optimizer):  # schedule-free: the averaged weights are the LoRA
                result = export_lora(
                    path,
                    s.model.denoiser,
                    tes,
                    fmt=o.format,
                    save_precision=self.config.precision.save,
                    alpha=self.config.network.alpha,
                    metadata=self.metadata(),
                    on_fp16_overflow="bf16",
                    family=s.model.family,
                )
        except Exception as e:  # noqa: BLE001 - any failure to write (safetensors' own errors too) is a save error
            err = explain_write_error(path, e)
            self.save_error = err.strerror or str(err)
            self.feedback.warn(
                f"The LoRA was not saved: {self.save_error} The trained LoRA is kept in memory: choose another "
                "output folder, and the next save writes there; at the end of the run, if the folder still "
                "fails, the LoRA goes to a rescue folder."
            )
            return None
        self.save_error = None
        report = result.save_report
        self.save_report = dataclasses.replace(report, step=self.progress.global_step) if report is not None else None
        for w in result.warnings:
            self.feedback.warn(w)
        return str(saved_item(path, o.format))

    @property
    def files(self) -> RunFiles:
        """This run's names (:mod:`guitrainer.core.runs.names`) in the folder it saves to now.

        Decided when the run starts; an output folder chosen mid-run keeps the label where it is free there
        (else takes the next free one), and going back to a folder goes back to the names used there.
        """
        folder = expand(self.config.output.folder)
        if folder != self._files.folder:
            self._files = self._by_folder.get(folder) or run_names.choose(self.config.output, keep=self._files.label)
            self._by_folder[folder] = self._files
        return self._files

    def lora_target(self, tag: str = "") -> Path:
        """Where a LoRA of this run goes: its label's name (``tag``: an intermediate save).

        An existing file there is written over only when this run wrote it (an epoch saved again after a kill,
        Save now twice at one step) or with ``output.overwrite``; anything else there is kept, and this save
        takes a name of its own within the run's label (``<label>-step000120``, ``<label>-000003_2``).
        """
        from guitrainer.base.fileio import numbered_path
        from guitrainer.engine.export import saved_item

        files, fmt = self.files, self.config.output.format
        path = files.lora(tag)
        item = saved_item(path, fmt)
        try:
            taken = item.exists()
        except OSError:  # a name too long for the file system: the save says so and rescues the LoRA
            taken = False
        if self.config.output.overwrite or not taken or path_key(item) in self.own_files:
            return path
        if not tag:  # the final LoRA's name is taken by a file this run did not write: name it by its step
            return self.lora_target(f"step{self.progress.global_step:06d}")
        free = numbered_path(item)
        return free / path.name if fmt == "diffusers" else free

    def _keep_earlier_final(self) -> None:
        """A resumed run about to write its final LoRA where its stopped (or finished) part wrote one: that LoRA
        is renamed by its step (``<label>-step000050``, the name a Save now at that step has), so nothing trained
        is lost and the run's final LoRA keeps the run's name. When the rename fails, the new one takes the step
        name instead (the earlier file is never written over)."""
        from guitrainer.base.fileio import numbered_path
        from guitrainer.engine.export import saved_item

        earlier, step = self.final_lora, self.final_step
        item = saved_item(self.files.lora(), self.config.output.format)
        if not earlier or step is None or step == self.progress.global_step or path_key(earlier) != path_key(item):
            return
        self.own_files.discard(path_key(item))  # from here on the file there is not to be written over
        if not item.exists():
            return
        kept = numbered_path(self.files.lora_item(f"step{step:06d}"))  # never over another file, not even this run's
        try:
            os.replace(item, kept)
        except OSError as e:
            log.warning("could not rename %s to %s: %s", item, kept, e)
            return
        self.final_lora = None
        self.own_files.add(path_key(kept))
        self.feedback.reporter.on_saved(SavedFile(str(kept), "lora", step, self.progress.epoch))
        self.feedback.status(f"the LoRA saved at step {step} is kept as {kept.name}")

    def _final_record(self) -> dict[str, Any] | None:
        """What the state says about the run's final LoRA so far (see :func:`resume.write_state`)."""
        if not self.final_lora:
            return None
        return {"path": self.final_lora, "step": self.final_step, "stamp": _stamp(self.final_lora)}

    def _announce(self, path: str) -> None:
        self.own_files.add(path_key(path))
        p = self.progress
        self.feedback.reporter.on_saved(SavedFile(path, "lora", p.global_step, p.epoch, self.save_report))

    def save_final(self) -> str | None:
        """The run's final LoRA, ``<label>.safetensors``; a resumed run's earlier final LoRA is kept first under
        the name of its step (:meth:`_keep_earlier_final`)."""
        if not self.session.main:
            return None
        self._keep_earlier_final()
        out = self.write_lora(self.lora_target())
        if out is not None:
            self.final_lora, self.final_step = out, self.progress.global_step
            self._announce(out)
        return out

    def save_final_and_state(self) -> None:
        """The end of a run or a stop: the final LoRA, then the resumable state.

        Any failure to write goes to the rescue folders (:meth:`rescue`). Raises :class:`WriteError` when the
        LoRA could not be written where asked (the message says where it went instead) or when the state
        could be written nowhere; the trainer turns it into a "failed" summary.
        """
        self.lora_path = self.save_final()
        lora_error = self.save_error if self.session.main and self.lora_path is None else None
        if lora_error:
            self.rescue(lora_error)  # raises: the run ends "failed", saying where the LoRA went
        try:
            self.state_path = self.save_state()
        except WriteError as e:
            self._rescue_state(str(e))

    def _rescue_folders(self) -> list[Path]:
        """Where a save that failed goes instead: the app's data folder, then the system's temp folder
        (another disk, often), each under a short name (the output name may be what was too long)."""
        import tempfile

        from guitrainer.base.paths import user_data_dir

        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        short = safe_name("".join(c for c in str(self.config.output.name)[:40] if c.isalnum() or c in "-_"), "lora")
        return [
            user_data_dir() / "rescued" / f"{short}-{stamp}",
            Path(tempfile.gettempdir()) / "guitrainer-rescued" / f"{short}-{stamp}",
        ]

    def rescue(self, reason: str) -> None:
        """The final LoRA could not be written: save it (and the state) in a rescue folder instead.

        Nothing trained is lost to a full disk, a read-only folder or a name too long when another folder
        has room: the LoRA lands in ``<user data>/rescued/<name>-<time>`` (else the same under the system's temp
        folder) under a short name, and the message says so. Always raises :class:`WriteError` (the run still
        failed to save where asked).
        """
        wanted = self.out_dir()
        o = self.config.output
        tried: list[str] = []
        for folder in self._rescue_folders():
            o.folder, o.name = str(folder), folder.name.rsplit("-", 2)[0]
            self._files = self._by_folder[folder] = run_names.choose(o)
            self.feedback.warn(f"The LoRA was not saved in {wanted}: {reason} Saving it in {folder} instead.")
            self.lora_path = self.save_final()
            if self.lora_path is not None:
                break
            tried.append(f"{folder} ({self.save_error})")
        if self.lora_path is None:
            raise WriteError(
                errno.EIO,
                f"The LoRA could not be saved in {wanted} ({reason}) nor in " + " nor in ".join(tried)
                + ". The trained weights are lost; free some disk space and train again.",
            )
        try:
            self.state_path = self.save_state()
        except WriteError as e:
            self.feedback.warn(f"The training state was not saved in {o.folder} either: {e.strerror or e}")
        raise WriteError(
            errno.EIO,
            f"The LoRA could not be saved in {wanted}: {reason} It was saved in {o.folder} instead "
            f"({Path(self.lora_path).name}); move it where you want it.",
        )

    def _rescue_state(self, reason: str) -> None:
        """The final LoRA was saved but its state was not: write the state in a rescue folder (say where),
        or raise :class:`WriteError` when it can be written nowhere."""
        wanted = self.state_dir()
        for folder in self._rescue_folders():
            target = folder / wanted.name
            try:
                resume.write_state(target, self.session, self.progress, self.intermediates, final_lora=self._final_record())
            except Exception as e:  # noqa: BLE001 - try the next folder
                log.warning("the state could not be rescued in %s: %s", target, e)
                continue
            self.state_path = str(target)
            p = self.progress
            self.feedback.reporter.on_saved(SavedFile(str(target), "state", p.global_step, p.epoch))
            self.feedback.warn(f"The training state was not saved in {wanted}: {reason} It was saved in {target} instead.")
            return
        lora = f"The LoRA was saved ({self.lora_path}), but the" if self.lora_path else "The"
        raise WriteError(errno.EIO, f"{lora} training state could not be saved anywhere: {reason}")

    def save_intermediate(self, tag: str) -> None:
        """An epoch's or Save now's LoRA (pruned to ``output.keep_last``) and the state; failures only warn."""
        if not self.session.main:
            return
        o = self.config.output
        out = self.write_lora(self.lora_target(tag))
        if out is None:
            return  # reported; the state would go to the same folder and fail the same way
        self.intermediates.append(out)
        self._announce(out)
        if o.keep_last:
            while len(self.intermediates) > o.keep_last:
                old = Path(self.intermediates.pop(0))
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        old.unlink()
        try:
            self.save_state()
        except WriteError as e:
            self.feedback.warn(f"The training state was not saved: {e.strerror or e}")

    def continue_from(self, state_folder: Path, intermediates: list[str], info: dict[str, Any]) -> None:
        """A resumed run: the LoRAs its earlier parts wrote are its own again.

        Those the state lists (its intermediate saves, and its final LoRA while that file is still the one
        written: same size and time), and intermediate LoRAs written after the state (a kill between a LoRA and
        its state): this run's tagged names (``<label>-000003``, ``<label>-step000120``), newer than the state.
        They join the ``keep_last`` pruning; the final LoRA of the part that stopped is kept under its step's name
        when the run writes its own (:meth:`_keep_earlier_final`); a file put in its place since is left alone.
        """
        self.intermediates = list(intermediates)
        final = info.get("final_lora")
        known = isinstance(final, dict) and isinstance(final.get("path"), str) and isinstance(final.get("step"), int)
        if known and _stamp(final["path"]) == final.get("stamp"):  # still the file written then
            self.final_lora, self.final_step = final["path"], final["step"]
            self.own_files.add(path_key(final["path"]))
        pattern = re.compile(rf"^{re.escape(self.files.label)}-(step)?\d{{6}}(_\d+)?(\.safetensors)?$")
        try:
            since = (state_folder / run_state.STATE_FILE).stat().st_mtime
            found = [p for p in self.out_dir().iterdir() if pattern.match(p.name) and p.stat().st_mtime > since]
        except OSError:
            found = []
        for p in sorted(found, key=lambda p: p.stat().st_mtime):
            if str(p) not in self.intermediates:
                self.intermediates.append(str(p))
        self.own_files.update(path_key(p) for p in self.intermediates)

    # ------------------------------------------------------------------ the state
    def state_dir(self) -> Path:
        """Where this run's resumable state is written: ``<label>_state`` (:attr:`files`).

        A resumed run writes into the state it resumed from (its label is that state's); a new run's label is
        free in the output folder, so a second run with the same name never overwrites the first one's state.
        """
        return self.files.state

    def save_state(self) -> str | None:
        """Write the resumable state (:func:`resume.write_state`); a failure is raised as a
        :class:`WriteError` whose message says why in plain words."""
        if not self.session.main:
            return None
        target = self.state_dir()
        try:
            resume.write_state(target, self.session, self.progress, self.intermediates, final_lora=self._final_record())
        except Exception as e:  # noqa: BLE001 - any failure to write (torch.save, safetensors, JSON) says why
            raise explain_write_error(target, e) from e
        p = self.progress
        self.feedback.reporter.on_saved(SavedFile(str(target), "state", p.global_step, p.epoch))
        return str(target)


def _stamp(lora: str | None) -> list[int] | None:
    """[size, mtime in ns] of a LoRA (a diffusers folder: its weights file): which file it is, for a resume."""
    if not lora:
        return None
    from guitrainer.core.model.lora_format import DIFFUSERS_WEIGHT_NAME

    path = Path(lora)
    if path.is_dir():
        path = path / DIFFUSERS_WEIGHT_NAME
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]
