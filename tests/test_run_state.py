"""core.run_state: names, finding the latest state, damaged JSON, and repairing interrupted swaps (no torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from guitrainer.core.runs import state as run_state


def cfg(folder: Path, name: str = "ink") -> SimpleNamespace:
    return SimpleNamespace(output=SimpleNamespace(folder=str(folder), name=name))


def make_state(folder: Path, step: int, mtime: float | None = None) -> Path:
    folder.mkdir(parents=True)
    f = folder / run_state.STATE_FILE
    f.write_text(json.dumps({"global_step": step}), encoding="utf-8")
    if mtime is not None:
        os.utime(f, (mtime, mtime))
    return folder


def test_core_run_state_imports_neither_torch_nor_qt():
    code = "import sys, guitrainer.core.runs.state; print('torch' in sys.modules, 'PySide6' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_find_state_takes_the_latest_complete_state_of_this_name(tmp_path):
    now = time.time()
    make_state(tmp_path / "ink_state", 5, now - 100)
    make_state(tmp_path / "ink_2_state", 7, now - 10)
    make_state(tmp_path / "inkwell_state", 9, now)  # another name
    (tmp_path / "ink_3_state").mkdir()  # incomplete: no JSON
    assert run_state.find_state(cfg(tmp_path)) == str(tmp_path / "ink_2_state")
    assert run_state.find_state(cfg(tmp_path / "nowhere")) is None
    assert [p.name for p in run_state.run_states(cfg(tmp_path))] == ["ink_state", "ink_2_state"]


def test_damaged_json_is_reported_in_plain_words(tmp_path):
    state = make_state(tmp_path / "ink_state", 3)
    assert run_state.saved_step(state) == 3
    (state / run_state.STATE_FILE).write_text('{"global_st', encoding="utf-8")
    with pytest.raises(run_state.StateError, match="damaged"):
        run_state.read_info(state)
    assert run_state.saved_step(state) is None
    with pytest.raises(run_state.StateError, match="not a training state folder"):
        run_state.read_info(tmp_path)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_kill_between_the_two_renames_is_repaired(tmp_path):
    dead = _dead_pid()
    target = make_state(tmp_path / "ink_state", 4)
    tmp = make_state(run_state.temp_folder(target, dead), 6)  # the new state, complete, before the swap

    def killed() -> None:
        raise KeyboardInterrupt  # the process dies here: old state hidden, new one not yet in place

    with pytest.raises(KeyboardInterrupt):
        run_state.swap_in(tmp, target, between=killed)
    assert not target.exists()
    old = tmp_path / f".ink_state.old-{os.getpid()}"
    old.rename(tmp_path / f".ink_state.old-{dead}")  # the name a later start sees: a process that is gone
    done = run_state.repair_interrupted(tmp_path)
    assert run_state.saved_step(target) == 6  # the newest complete state is back under its name
    assert any("restored" in line for line in done)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ink_state.")]  # leftovers removed


def test_repair_keeps_the_old_state_when_the_new_one_is_incomplete_and_spares_live_processes(tmp_path):
    pid = _dead_pid()
    make_state(tmp_path / f".ink_state.old-{pid}", 4)
    (tmp_path / f".ink_state.tmp-{pid}").mkdir()  # the new one was cut short: no JSON
    live = make_state(tmp_path / f".other_state.tmp-{os.getpid()}", 1)  # this process is still writing it
    stale = tmp_path / ".ink.safetensors.a1b2c3d4.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 2 * run_state.STALE_TEMP_SECONDS,) * 2)
    fresh = tmp_path / ".ink.safetensors.e5f6g7h8.tmp"
    fresh.write_bytes(b"being written")
    run_state.repair_interrupted(tmp_path)
    assert run_state.saved_step(tmp_path / "ink_state") == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ink_state", live.name, fresh.name])
    assert run_state.repair_interrupted(tmp_path / "missing") == []
