"""The run-state folder: its file names, its JSON, where a run writes it and how to find the latest.

A resumable state is a folder ``<output folder>/<run name>_state`` holding the trainable LoRA weights, the
optimizer, lr-scheduler, GradScaler and RNG states, and :data:`STATE_FILE` (JSON: where the run is, its
config). The engine writes it (``engine/resume.py``), the Training page finds and reads it, export lists
it among the planned files: every one of them takes the names from here.

A run's state is ``<label>_state``, its label the one all its files carry (:mod:`guitrainer.core.runs.names`:
``name``, ``name_2`` ...), so a second run never overwrites the first one's state. A resumed run keeps
writing into the folder it resumed from.

A state is written into a temp folder, then swapped in by two renames (:func:`swap_in`). A kill between
them leaves no folder under the state's name; :func:`repair_interrupted` finds such swaps and leftover
temp files and puts the newest complete state back under its name.

No torch here: the GUI reads states without loading torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guitrainer.base import safe_open
from guitrainer.base.names import printable, safe_name
from guitrainer.base.paths import expand
from guitrainer.config import TrainingConfig
from guitrainer.config.files import config_from_dict

log = logging.getLogger(__name__)

STATE_VERSION = 1
STATE_FILE = "trainer_state.json"  # written last: a folder without it is incomplete
WEIGHTS_FILE = "lora_params.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "lr_scheduler.pt"
SCALER_FILE = "scaler.pt"
RNG_FILE = "rng.pt"
STATE_SUFFIX = "_state"
#: largest :data:`STATE_FILE` read: it holds the config and the step counts, a few kilobytes
MAX_STATE_JSON_BYTES = 16 * 1024 * 1024
#: temp files of atomic writes (``core.fileio.atomic_path``) older than this are leftovers of a kill
STALE_TEMP_SECONDS = 3600.0

_SWAP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)$")
_TEMP_FILE = re.compile(r"^\..+\.[A-Za-z0-9_]{6,}\.tmp$")


class StateError(Exception):
    """A state folder that cannot be used; the message says why in plain words."""


def state_folder(output_folder: str | Path, run_name: str) -> Path:
    """``<output folder>/<run name>_state`` (the name as every system can write it: :func:`safe_name`)."""
    return expand(str(output_folder)) / f"{safe_name(run_name, 'lora')}{STATE_SUFFIX}"


def is_state_folder(folder: str | Path) -> bool:
    """A complete state: the folder holds :data:`STATE_FILE` (a regular file; never raises, whatever the path)."""
    return not safe_open.problem(expand(str(folder)) / STATE_FILE, "file")


def run_states(config: TrainingConfig) -> list[Path]:
    """Every complete state of this config's runs (``<name>_state``, ``<name>_N_state``), oldest first."""
    folder = expand(config.output.folder)
    name = safe_name(str(config.output.name), "lora")
    pattern = re.compile(rf"^{re.escape(name)}(_\d+)?{STATE_SUFFIX}$")
    try:
        found = [p for p in folder.iterdir() if pattern.match(p.name) and is_state_folder(p)]
    except OSError:
        return []
    return sorted(found, key=_written_at)


def find_state(config: TrainingConfig) -> str | None:
    """The most recently written state of this config's runs, if one exists."""
    found = run_states(config)
    return str(found[-1]) if found else None


def _written_at(folder: Path) -> int:
    """When the state was completed (nanoseconds: two saves within one float-second still order right)."""
    try:
        return (folder / STATE_FILE).stat().st_mtime_ns
    except OSError:
        return 0


def read_info(folder: str | Path) -> dict[str, Any]:
    """The state's JSON; :class:`StateError` in plain words when it is missing or damaged."""
    shown, state_file = printable(str(folder)), expand(str(folder)) / STATE_FILE
    try:
        safe_open.require(folder, "folder")
        kind = safe_open.look(state_file).kind
    except safe_open.PathError as e:  # a file, a pipe, a name too long: never read
        raise StateError(f"the saved state {e}") from None
    if kind == "missing":
        raise StateError(f"{shown} is not a training state folder (no {STATE_FILE})")
    try:
        info = safe_open.read_json(state_file, limit=MAX_STATE_JSON_BYTES, what="a state file")
    except safe_open.PathError as e:
        raise StateError(f"{e}: the state is damaged and cannot be read") from None
    if not isinstance(info, dict) or not isinstance(info.get("global_step"), int):
        raise StateError(f"{shown}/{STATE_FILE} is damaged: it does not describe a training state")
    return info


def saved_step(folder: str | Path) -> int | None:
    """The step a state was saved at, or None when it cannot be read."""
    try:
        return int(read_info(folder)["global_step"])
    except StateError:
        return None


#: settings a saved state must share with the run that resumes it (the LoRA's shape and its number format)
RESUME_MUST_MATCH = ("network.rank", "network.target_modules", "network.train_text_encoder", "precision.training")


#: settings a resumed run may change, with a warning: another VAE makes slightly other latents (the fp16-fixed
#: SDXL VAE's differ from the original's within its rounding), so the LoRA goes on learning from those
RESUME_SHOULD_MATCH = ("model.vae",)


def setting_label(config: TrainingConfig, path: str) -> str:
    """The label the app shows for a setting ("Rank (dim)"), from the config's field metadata; else the path."""
    section, _, name = path.partition(".")
    part = getattr(config, section, None)
    if dataclasses.is_dataclass(part):
        for f in dataclasses.fields(part):
            if f.name == name:
                return str(f.metadata.get("label") or path)
    return path


def resume_mismatches(info: dict[str, Any], config: TrainingConfig) -> list[tuple[str, Any, Any]]:
    """``(path, saved, now)`` for each :data:`RESUME_MUST_MATCH` setting that differs between the state's stored
    settings and ``config``.

    Raises whatever :func:`~guitrainer.config.files.config_from_dict` raises on damaged stored settings; a state
    without them matches.
    """
    if "config" not in info:
        return []
    saved = config_from_dict(info["config"])
    return [(key, saved.get(key), config.get(key)) for key in RESUME_MUST_MATCH if saved.get(key) != config.get(key)]


def resume_differences(info: dict[str, Any], config: TrainingConfig) -> list[tuple[str, Any, Any]]:
    """``(path, saved, now)`` for each :data:`RESUME_SHOULD_MATCH` setting that changed since the state was saved
    (worth a warning, not a refusal). A state without stored settings, or one saved before a setting existed
    (it then had the setting's default), differs in nothing it did not have."""
    if "config" not in info:
        return []
    saved = config_from_dict(info["config"])
    return [(key, saved.get(key), config.get(key)) for key in RESUME_SHOULD_MATCH
            if _comparable(saved.get(key)) != _comparable(config.get(key))]


def _comparable(value: Any) -> Any:
    """A setting as compared across runs: a path the same however it is spelled (``~``, a trailing ``/``)."""
    if isinstance(value, str) and value.strip() and ("/" in value or "\\" in value or value.startswith("~")):
        text = value.strip()
        if "/" in text and not text.startswith(("/", "~", ".")) and text.count("/") == 1 and ":" not in text:
            return text  # a hub id (owner/name), not a path
        return os.path.normpath(os.path.expanduser(text))
    return value


def shown_value(path: str, value: Any) -> str:
    """A stored setting's value in a message: its repr, or what an empty one means (``model.vae``: the base's own)."""
    if path == "model.vae" and not value:
        return "the base model's own VAE"
    return repr(value)


@dataclass(frozen=True)
class SavedRun:
    """What a run-state folder says about its run: where it stopped and how far it was meant to go."""

    path: str
    global_step: int
    total_steps: int
    epoch: int

    @property
    def complete(self) -> bool:
        """Every planned step was trained: resuming would train nothing."""
        return self.total_steps > 0 and self.global_step >= self.total_steps

    def epochs_for_more(self, more_epochs: int, current_epochs: int) -> int:
        """The ``schedule.epochs`` that trains ``more_epochs`` beyond this run."""
        return max(self.epoch, current_epochs) + max(1, more_epochs)

    def schedule_for_more(self, more_epochs: int, epochs: int, max_steps: int) -> dict[str, int]:
        """The schedule setting (``schedule.max_steps`` when the run counts steps, else ``schedule.epochs``)
        that trains ``more_epochs`` beyond this run."""
        if max_steps > 0:
            per_epoch = max(1, self.total_steps // max(1, self.epoch))
            return {"schedule.max_steps": self.total_steps + max(1, more_epochs) * per_epoch}
        return {"schedule.epochs": self.epochs_for_more(more_epochs, epochs)}


def read_saved_run(folder: str | Path) -> SavedRun | None:
    """The run-state folder's step counts, or None when it is not a readable state."""
    try:
        info = read_info(folder)
        return SavedRun(str(folder), int(info["global_step"]), int(info.get("total_steps", 0)), int(info.get("epoch", 0)))
    except (StateError, ValueError, TypeError):
        return None


def temp_folder(target: Path, pid: int | None = None) -> Path:
    """Where a state is written before :func:`swap_in` (beside the target, so the rename stays on one disk)."""
    return target.with_name(f".{target.name}.tmp-{pid or os.getpid()}")


def swap_in(tmp: Path, target: Path, *, between: Any = None) -> None:
    """Replace ``target`` by the complete state in ``tmp``: two renames, then the old state is removed.

    ``between`` (tests) runs between the renames, where a kill would leave neither under the target's
    name; :func:`repair_interrupted` undoes that.
    """
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists():
        os.replace(target, old)
    if between is not None:
        between()
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else (or a platform without signal 0)
        return True
    return True


def repair_interrupted(folder: str | Path) -> list[str]:
    """Repair what a kill during a save left in ``folder`` (an output folder); returns what was done.

    * a state swap cut between its two renames (no ``<run>_state``, but a complete ``.<run>_state.tmp-PID``
      or the previous ``.<run>_state.old-PID``): the newest complete one goes back under the state's name;
    * temp folders of finished processes, and their old states once the state is in place, are removed;
    * temp files of atomic writes older than an hour (``.<file>.XXXXXXXX.tmp``) are removed.

    Folders of a process still running are left alone. Never raises for an unreadable folder.
    """
    done: list[str] = []
    try:
        root = expand(str(folder))
        entries = list(root.iterdir())
    except (OSError, ValueError):  # not a folder, no permission, a name too long, a NUL character
        return done
    swaps: dict[str, list[tuple[str, Path]]] = {}
    for p in entries:
        m = _SWAP.match(p.name)
        if m and p.is_dir() and m["name"].endswith(STATE_SUFFIX) and not _pid_alive(int(m["pid"])):
            swaps.setdefault(m["name"], []).append((m["kind"], p))
        elif _TEMP_FILE.match(p.name) and p.is_file() and time.time() - _mtime(p) > STALE_TEMP_SECONDS:
            with contextlib.suppress(OSError):
                p.unlink()
                done.append(f"removed the unfinished temp file {p}")
    for name, leftovers in swaps.items():
        target = root / name
        if not target.exists():
            complete = [p for kind, p in leftovers if is_state_folder(p)]
            newest = max(complete, key=lambda p: (_written_at(p), p.name.count(".tmp-")), default=None)
            if newest is not None:
                try:
                    os.replace(newest, target)
                    done.append(f"restored the training state {target} (a save had been interrupted)")
                except OSError as e:
                    log.warning("could not restore %s from %s: %s", target, newest, e)
                    continue
        if target.exists():
            for _kind, p in leftovers:
                if p.exists():
                    shutil.rmtree(p, ignore_errors=True)
                    done.append(f"removed the leftover folder {p}")
    for line in done:
        log.info(line)
    return done


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return time.time()
