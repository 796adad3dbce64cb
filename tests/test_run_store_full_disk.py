"""A full disk is not damage (issue 27, item 3): the run history is kept as it is, the app says the disk is full and
writes again when there is room; only a file that fails ``integrity_check`` is moved aside, and then its runs can
be brought back. On a real 1 MB tmpfs (skipped where mounting is not allowed) and with SQLite's own SQLITE_FULL."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guitrainer.config import TrainingConfig
from guitrainer.core.events import NullReporter, RunSummary, StepMetrics
from guitrainer.core.runs import store as S
from guitrainer.core.runs.store import RunStore
from guitrainer.engine.recording import RunRecorder


def _steps(store: RunStore, run_id: int, n: int) -> None:
    store.write_batch(run_id, [(k, 1, 1.0 / k, 1e-3, None, 0.1, 2.0 * k, None, None, 0) for k in range(1, n + 1)],
                      run={"steps": n})  # fmt: skip


def _history(db: Path, runs: int = 3) -> None:
    with RunStore(db) as store:
        for i in range(runs):
            run = store.begin_run(name=f"run{i}", config={"i": i})
            _steps(store, run, 40)
            store.end_run(run, "finished")


class _FullDisk:
    """A connection whose every statement fails with ``error`` (SQLite's own SQLITE_FULL)."""

    def __init__(self, conn: sqlite3.Connection, error: sqlite3.Error):
        self.conn, self.error = conn, error

    def execute(self, *_args: object) -> None:
        raise self.error

    def close(self) -> None:
        self.conn.close()


def _moved_aside(db: Path) -> list[str]:
    """Files beside the history named as a moved-aside one (by any version)."""
    return sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name + ".") and not p.name.endswith(("-wal", "-shm")))


def _sqlite_full() -> sqlite3.OperationalError:
    """A real SQLITE_FULL from SQLite (a database held to its size by ``max_page_count``)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x)")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    try:
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 100)
    except sqlite3.OperationalError as e:
        assert e.sqlite_errorcode == 13  # SQLITE_FULL
        return e
    raise AssertionError("max_page_count did not fill the database")


# --------------------------------------------------------------------------- a small real filesystem


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB tmpfs mounted on a folder (root on Linux only; skipped elsewhere), unmounted afterwards."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root on Linux")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not allowed here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    """Fill the filesystem of ``folder`` to the last byte; returns the filler (delete it to make room)."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        with contextlib.suppress(OSError):
            f.close()
    return filler


def test_a_full_disk_keeps_the_history_says_so_and_it_is_there_again_after(small_disk):
    db = small_disk / "runs.sqlite3"
    _history(db)
    before = {p.name: p.read_bytes() for p in small_disk.iterdir()}
    filler = _fill(small_disk)
    with pytest.raises(S.RunStoreError) as e:
        RunStore(db)
    assert _moved_aside(db) == []  # before the fix: "it is damaged (disk I/O error)", moved aside
    assert db.read_bytes() == before[db.name]  # nothing changed (SQLite may add its empty -wal and -shm)
    assert isinstance(e.value, S.StoreUnavailable) and e.value.full
    assert "is full" in str(e.value) and "Nothing was lost" in str(e.value)
    filler.unlink()  # room again
    with RunStore(db) as store:
        assert store.notice == "" and sorted(r.name for r in store.list_runs()) == ["run0", "run1", "run2"]
        assert all(len(store.series(r.id)["step"]) == 40 for r in store.list_runs())


def test_a_run_recorded_while_the_disk_is_full_is_written_once_there_is_room(small_disk):
    db = small_disk / "runs.sqlite3"
    _history(db, runs=1)
    filler = _fill(small_disk)
    inner = NullReporter()
    rec = RunRecorder(inner, TrainingConfig(), source="test", store_path=db, flush_seconds=0.05)
    rec.retry_seconds = 0.1
    rec.start()
    assert rec.run_id is None and "is full" in inner.warnings[0] and "kept in memory" in inner.warnings[0]  # said once
    for k in range(1, 31):
        rec.on_step(StepMetrics(k, 30, 1, 1.0 / k, 1e-3, seconds_per_step=0.1, images_per_second=20.0))
        if k == 10:
            time.sleep(0.3)  # a few retries while still full
            filler.unlink()  # the user frees some space in the middle of the run
    rec.finish(RunSummary("finished", 30, 1, 1.0 / 30))  # returns at once: the run is not held up by the history
    assert rec.written(timeout=10)
    assert len(inner.warnings) == 1 and rec.error == ""
    with RunStore(db) as store:
        (new,) = [r for r in store.list_runs() if r.id == rec.run_id]
        assert (new.status, new.steps) == ("finished", 30)
        assert store.series(new.id)["step"] == list(range(1, 31))  # every step, none lost to the full disk
        assert len(store.list_runs()) == 2


# --------------------------------------------------------------------------- SQLite's own SQLITE_FULL


def test_sqlite_full_on_opening_leaves_the_file_alone(tmp_path, monkeypatch):
    db = tmp_path / "runs.sqlite3"
    _history(db)
    before = db.read_bytes()
    full, real, calls = _sqlite_full(), RunStore._connect, []

    def connect(self):  # the first connection (the check at opening) reads as on a full disk
        calls.append(1)
        return _FullDisk(real(self), full) if len(calls) == 1 else real(self)

    monkeypatch.setattr(RunStore, "_connect", connect)
    with pytest.raises(S.RunStoreError, match="is full") as e:  # before the fix: "it is damaged", moved aside
        RunStore(db)
    assert db.read_bytes() == before and _moved_aside(db) == []
    assert isinstance(e.value, S.StoreUnavailable) and e.value.full
    monkeypatch.undo()
    with RunStore(db) as store:
        assert len(store.list_runs()) == 3 and store.notice == ""


def test_sqlite_full_while_writing_keeps_the_connection_usable(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as store:
        run = store.begin_run(name="a", config={})
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
        with pytest.raises(sqlite3.OperationalError) as e:
            _steps(store, run, 3000)
        assert S.is_full(e.value) and S.is_not_damage(e.value) and not store.conn.in_transaction
        store.conn.execute("PRAGMA max_page_count = 1073741823")  # room again
        _steps(store, run, 3)
        assert store.series(run)["step"] == [1, 2, 3]


def test_the_recorder_keeps_every_step_through_a_full_disk(tmp_path, monkeypatch):
    """Simulated: the first writes of the run's steps fail with a real SQLITE_FULL; then the disk has room."""
    db = tmp_path / "runs.sqlite3"
    full, failures = _sqlite_full(), [3]
    real = RunStore.write_batch

    def write_batch(self, *args, **kwargs):
        if failures[0]:
            failures[0] -= 1
            raise full
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunStore, "write_batch", write_batch)
    inner = NullReporter()
    rec = RunRecorder(inner, TrainingConfig(), source="test", store_path=db, flush_seconds=0.02)
    rec.retry_seconds = 0.05
    rec.start()
    for k in range(1, 21):
        rec.on_step(StepMetrics(k, 20, 1, 1.0 / k, 1e-3, seconds_per_step=0.25, images_per_second=8.0))
        time.sleep(0.01)
    rec.finish(RunSummary("finished", 20, 1, 0.05))
    assert failures == [0] and rec.error == ""  # before the fix: "not recorded", the rest of the run lost
    assert sum("is full" in w for w in inner.warnings) == 1
    with RunStore(db) as store:
        row = store.run_row(rec.run_id)
        assert (row.status, row.steps) == ("finished", 20)
        s = store.series(rec.run_id, ["step", "images"])
        assert s["step"] == list(range(1, 21)) and s["images"] == [2.0 * k for k in range(1, 21)]  # counted once each


# --------------------------------------------------------------------------- real damage, and bringing it back


def test_only_a_file_that_fails_integrity_check_is_moved_aside_and_its_runs_come_back(tmp_path):
    from guitrainer.core.runs import recovery

    db = tmp_path / "runs.sqlite3"
    _history(db, runs=30)
    with RunStore(db) as store:
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = store.conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'metrics'").fetchone()[0]
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    data[(root - 1) * size : root * size] = b"\xa5" * size  # the series' root page is garbage; the runs table is whole
    db.write_bytes(bytes(data))
    with RunStore(db) as store:
        assert store.moved_to is not None and "integrity check" in store.notice and store.list_runs() == []
        assert recovery.moved_aside(db) == [store.moved_to]
        fresh = store.begin_run(name="after", config={})  # recorded while the damaged file is aside
        back = recovery.bring_back(store, store.moved_to)
        assert (back.runs, back.unreadable, back.partial, back.error) == (30, 0, 30, "")  # rows back, the series lost
        assert sorted(r.name for r in store.list_runs()) == sorted(["after", *(f"run{i}" for i in range(30))])
        assert store.run_row(fresh).name == "after" and "30 runs without part of their curves" in back.describe()
        assert back.kept_as is not None and back.kept_as.read_bytes() == bytes(data)  # kept, byte for byte
        assert recovery.moved_aside(db) == []  # not offered again
        again = recovery.bring_back(store, back.kept_as)
        assert again.runs == 0 and again.already == 30  # never copied twice


def test_an_intact_file_moved_aside_by_an_older_version_comes_back_whole(tmp_path):
    """What the full-disk bug left behind (``runs.sqlite3.unreadable-<time>``, whole): every run comes back."""
    from guitrainer.core.runs import recovery

    db = tmp_path / "runs.sqlite3"
    _history(db, runs=4)
    moved = tmp_path / "runs.sqlite3.unreadable-20250101-120000"
    S.move_database(db, moved)
    with RunStore(db) as store:
        assert store.list_runs() == [] and recovery.moved_aside(db) == [moved]
        back = recovery.bring_back(store, moved)
        assert (back.runs, back.unreadable, back.partial) == (4, 0, 0)
        assert sorted(r.name for r in store.list_runs()) == ["run0", "run1", "run2", "run3"]
        assert all(len(store.series(r.id)["step"]) == 40 for r in store.list_runs())
        assert "Brought back 4 runs" in back.describe()


def test_a_file_sqlite_finds_whole_but_cannot_read_as_a_history_is_left_alone(tmp_path):
    from guitrainer.core.runs import recovery

    db = tmp_path / "runs.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (x)")  # another program's database
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(S.RunStoreError, match="left as it is"):
        RunStore(db)
    assert db.read_bytes() == before and recovery.moved_aside(db) == []
