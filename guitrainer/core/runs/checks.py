"""What a stored run allows: is its process still alive, can it be resumed, removing its files.

Kept apart from :mod:`guitrainer.core.runs.store` (the database) so each stays small; no Qt, no torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from guitrainer.core.runs import state as run_state

if TYPE_CHECKING:
    from guitrainer.core.runs.store import RunStore


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None when it does not exist or cannot be seen."""
    try:
        import psutil
    except ImportError:  # psutil comes with accelerate; without it the heartbeat decides
        return None
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError, ValueError):
        return None


def process_alive(pid: int | None, started: float | None) -> bool | None:
    """True / False when we can tell whether the process that wrote a row still runs; None when we cannot
    (then the heartbeat decides). The start time guards against a reused pid: another process with the
    same pid is not ours. Never sends a signal (``os.kill`` would end the process on Windows)."""
    if not pid:
        return None
    try:
        import psutil
    except ImportError:
        return _pid_gone_posix(pid)
    try:
        now_started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError, ValueError):  # e.g. access denied: cannot tell
        return None
    if started is None:
        return True
    return abs(now_started - started) < 1.0


def _pid_gone_posix(pid: int) -> bool | None:
    """Without psutil, on POSIX: False when no process has this pid, else None (it may be another one)."""
    if os.name != "posix":
        return None
    try:
        os.kill(pid, 0)  # signal 0: only checks that the pid exists
    except ProcessLookupError:
        return False
    except OSError:
        return None
    return None


def remove_paths(paths: Iterable[str | Path]) -> list[str]:
    """Delete files and folders (a run's LoRAs, state, samples, logs); returns what could not be deleted, and why."""
    import shutil

    problems = []
    for p in map(Path, paths):
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
        except OSError as e:
            problems.append(f"{p}: {e.strerror or e}")
    return problems


def resumable(store: RunStore, run_id: int) -> tuple[str | None, str]:
    """(state folder, "") when this run can be resumed from its last saved state, else (None, why not)."""
    row = store.run_row(run_id)
    if row is None:
        return None, "the run is no longer in the history"
    if row.status == "running":
        return None, "it is still running"
    if not row.state_path:
        return None, "it saved no resumable state"
    if not run_state.is_state_folder(row.state_path):
        return None, f"its state folder {row.state_path} is gone"
    owner = store.run_for_state(row.state_path)
    if owner != run_id:
        later = store.run_row(owner) if owner is not None else None
        who = f"a later run (“{later.name}”, {later.date_text})" if later else "another run"
        return None, f"{who} saved its state over this one's"
    if row.status == "finished" and row.total_steps and row.steps >= row.total_steps:
        return None, "it finished all its steps"
    return row.state_path, ""
