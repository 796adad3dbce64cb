"""The run store: every training run remembered in one SQLite database in the user data folder.

One row per run, written when it starts (status ``running``), updated as it goes and when it ends
(``finished``, ``stopped``, ``failed``, ``interrupted``), with its metric series (one row per step)
and the files it wrote. The standard library's ``sqlite3`` in WAL mode: a killed writer leaves every
committed batch readable, and the app can read while a run (in this process or a CLI one) writes.

The schema is versioned (``PRAGMA user_version``) and upgraded by :data:`MIGRATIONS`. A file that
is not a readable database, or one made by a newer version of the app, is moved aside (never
overwritten) and a new one is made; :attr:`RunStore.notice` says what happened.

No Qt and no torch here: the UI, the CLI and the engine's recorder all use it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from guitrainer.base.paths import user_data_dir
from guitrainer.core.runs.checks import process_alive, process_started

log = logging.getLogger(__name__)

DB_NAME = "runs.sqlite3"
SCHEMA_VERSION = 2
SQLITE_HEADER = b"SQLite format 3\x00"
#: a running row whose writer has not touched it for this long (and whose process cannot be checked) is dead
STALE_SECONDS = 180.0
STATUSES = ("running", "finished", "stopped", "failed", "interrupted")
#: the per-step series, in the order :meth:`RunStore.add_metrics` takes them (after run_id)
METRIC_COLUMNS = (
    "step",
    "epoch",
    "loss",
    "lr",
    "grad_scale",
    "seconds_per_step",
    "images",
    "val_loss",
    "class_loss",
    "skipped",
)

#: MIGRATIONS[n] turns a version-n database into version n + 1 (version 0: an empty file).
MIGRATIONS: list[str] = [
    # 0 -> 1: runs, their metric series and their files
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        ended_at REAL,
        status TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT '',
        pid INTEGER,
        pid_started REAL,
        host TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL DEFAULT '',
        precision TEXT NOT NULL DEFAULT '',
        save_precision TEXT NOT NULL DEFAULT '',
        device TEXT NOT NULL DEFAULT '',
        total_steps INTEGER NOT NULL DEFAULT 0,
        steps INTEGER NOT NULL DEFAULT 0,
        final_loss REAL,
        output_folder TEXT NOT NULL DEFAULT '',
        lora_path TEXT,
        state_path TEXT,
        state_step INTEGER,
        message TEXT NOT NULL DEFAULT '',
        config_json TEXT NOT NULL DEFAULT '{}',
        dataset_json TEXT NOT NULL DEFAULT '{}',
        timings_json TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX runs_by_state ON runs(state_path);
    CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        epoch INTEGER,
        loss REAL,
        lr REAL,
        grad_scale REAL,
        seconds_per_step REAL,
        val_loss REAL,
        class_loss REAL,
        skipped INTEGER,
        PRIMARY KEY (run_id, step)
    ) WITHOUT ROWID;
    CREATE TABLE artifacts (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        path TEXT NOT NULL,
        step INTEGER,
        epoch INTEGER,
        prompt TEXT
    );
    CREATE INDEX artifacts_by_run ON artifacts(run_id);
    """,
    # 1 -> 2: images seen so far at each step (overlays aligned by images), the writer's heartbeat
    """
    ALTER TABLE metrics ADD COLUMN images REAL;
    ALTER TABLE runs ADD COLUMN heartbeat_at REAL;
    UPDATE runs SET heartbeat_at = updated_at;
    """,
]
assert len(MIGRATIONS) == SCHEMA_VERSION

#: run columns :meth:`RunStore.update_run` may set
_UPDATABLE = frozenset(
    {
        "name", "status", "ended_at", "device", "total_steps", "steps", "final_loss", "output_folder",
        "lora_path", "state_path", "state_step", "message", "config_json", "dataset_json", "timings_json",
        "model", "precision", "save_precision", "pid", "pid_started", "host", "source",
    }
)  # fmt: skip
#: what :meth:`RunStore.continue_run` and a resumed launch change in a run's row
_ON_RESUME = (
    "status", "ended_at", "updated_at", "heartbeat_at", "pid", "pid_started", "host", "message",
    "config_json", "dataset_json", "timings_json", "device",
)  # fmt: skip
_LIST_COLUMNS = (
    "id, name, created_at, updated_at, ended_at, status, source, model, precision, total_steps, steps, "
    "final_loss, output_folder, lora_path, state_path, state_step, message, pid, host, heartbeat_at"
)


class RunStoreError(Exception):
    """The store could not be opened or written; the message says why in plain words."""


@dataclass(frozen=True)
class RunRow:
    """One run as the list shows it (no series, no config)."""

    id: int
    name: str
    created_at: float
    updated_at: float
    ended_at: float | None
    status: str
    source: str
    model: str
    precision: str
    total_steps: int
    steps: int
    final_loss: float | None
    output_folder: str
    lora_path: str | None
    state_path: str | None
    state_step: int | None
    message: str
    pid: int | None
    host: str
    heartbeat_at: float | None

    @property
    def date_text(self) -> str:
        return datetime.fromtimestamp(self.created_at).strftime("%Y-%m-%d %H:%M")


@dataclass(frozen=True)
class RunDetail:
    """A run with everything the store keeps about it except its series."""

    row: RunRow
    config: dict[str, Any]
    device: str
    save_precision: str
    dataset: dict[str, Any]
    timings: dict[str, Any]
    artifacts: list[dict[str, Any]] = field(default_factory=list)


def default_path() -> Path:
    """``<user data>/runs.sqlite3``; ``GUITRAINER_RUNS_DB`` names another file (e.g. on a synced disk)."""
    env = os.environ.get("GUITRAINER_RUNS_DB")
    return Path(env).expanduser() if env else user_data_dir() / DB_NAME


class RunStore:
    """The database of runs. One instance per thread (sqlite3 connections stay in their thread)."""

    def __init__(self, path: str | Path | None = None, *, timeout: float = 10.0):
        self.path = Path(path) if path is not None else default_path()
        self.notice = ""  # set when an unreadable or newer file was moved aside
        self.moved_to: Path | None = None
        self._timeout = timeout
        self.conn = self._open()

    # ------------------------------------------------------------------ opening
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=self._timeout, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunStoreError(f"Cannot create the folder for the run history {self.path.parent}: {e.strerror or e}") from e
        problem = self._problem()
        if problem:
            self._move_aside(problem)
        try:
            conn = self._connect()
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL: a commit survives a killed process
            self._migrate(conn)
        except sqlite3.DatabaseError as e:
            raise RunStoreError(f"Cannot open the run history {self.path}: {e}") from e
        return conn

    def _problem(self) -> str:
        """Why the existing file cannot be used ("" when it can, or when there is none)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return ""
        except OSError as e:
            return f"it cannot be read ({e.strerror or e})"
        if size == 0:
            return ""
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError as e:
            return f"it cannot be read ({e.strerror or e})"
        if head != SQLITE_HEADER:
            return "it is not an SQLite database"
        try:
            conn = self._connect()
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                if 1 <= version <= SCHEMA_VERSION:  # the runs table whole, the series' first page (a few ms)
                    conn.execute("SELECT count(*), max(length(config_json)) FROM runs").fetchone()
                    conn.execute("SELECT * FROM metrics LIMIT 1").fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            return f"it is damaged ({e})"
        if version > SCHEMA_VERSION:
            return f"it was made by a newer version of guitrainer (schema {version}; this one reads up to {SCHEMA_VERSION})"
        return ""

    def _move_aside(self, problem: str) -> None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        kind = "newer" if "newer" in problem else "unreadable"
        target = self.path.with_name(f"{self.path.name}.{kind}-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.{kind}-{stamp}-{n}")
        try:
            os.replace(self.path, target)
            for suffix in ("-wal", "-shm"):
                companion = self.path.with_name(self.path.name + suffix)
                if companion.exists():
                    os.replace(companion, target.with_name(target.name + suffix))
        except OSError as e:
            raise RunStoreError(
                f"The run history {self.path} cannot be used: {problem}, and it could not be moved aside "
                f"({e.strerror or e}). Move or delete it yourself, then start again."
            ) from e
        self.moved_to = target
        self.notice = (
            f"The run history {self.path} could not be used: {problem}. It was moved to {target} "
            "(nothing was deleted) and a new, empty history was started."
        )
        log.warning(self.notice)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        while version < SCHEMA_VERSION:
            # the step and its version bump commit together; a second process that migrated first wins
            try:
                conn.executescript(f"BEGIN IMMEDIATE;\n{MIGRATIONS[version]}\nPRAGMA user_version = {version + 1};\nCOMMIT;")
            except sqlite3.OperationalError:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                now = conn.execute("PRAGMA user_version").fetchone()[0]
                if now <= version:
                    raise
                version = now
                continue
            version += 1

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction: everything in it is committed together or not at all."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")

    # ------------------------------------------------------------------ writing
    def begin_run(
        self,
        *,
        name: str,
        config: dict[str, Any],
        source: str = "",
        model: str = "",
        precision: str = "",
        save_precision: str = "",
        output_folder: str = "",
        total_steps: int = 0,
        pid: int | None = None,
        now: float | None = None,
    ) -> int:
        """Add a run in status ``running`` (owned by this process unless ``pid`` says otherwise); returns its id."""
        now = time.time() if now is None else now
        pid = os.getpid() if pid is None else pid
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO runs (name, created_at, updated_at, heartbeat_at, status, source, pid, pid_started, host, "
                "model, precision, save_precision, output_folder, total_steps, config_json) "
                "VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, now, now, now, source, pid, process_started(pid), socket.gethostname(), model, precision,
                 save_precision, output_folder, int(total_steps), json.dumps(config, sort_keys=True)),
            )  # fmt: skip
            return int(cur.lastrowid or 0)

    def continue_run(self, run_id: int, *, pid: int | None = None, config: dict[str, Any] | None = None) -> None:
        """A resumed run: ``running`` again, owned by this process (its series continue from the resumed step)."""
        now = time.time()
        pid = os.getpid() if pid is None else pid
        with self._tx() as c:
            c.execute(
                "UPDATE runs SET status = 'running', ended_at = NULL, updated_at = ?, heartbeat_at = ?, pid = ?, "
                "pid_started = ?, host = ?, message = '' WHERE id = ?",
                (now, now, pid, process_started(pid), socket.gethostname(), run_id),
            )
            if config is not None:
                c.execute("UPDATE runs SET config_json = ? WHERE id = ?", (json.dumps(config, sort_keys=True), run_id))

    def snapshot_run(self, run_id: int) -> dict[str, Any]:
        """The columns a resume attempt changes (:data:`_ON_RESUME`), to put back when it trained nothing."""
        row = self.conn.execute(f"SELECT {', '.join(_ON_RESUME)} FROM runs WHERE id = ?", (run_id,)).fetchone()
        return dict(zip(_ON_RESUME, row)) if row else {}

    def restore_run(self, run_id: int, snapshot: dict[str, Any]) -> None:
        """Put back what :meth:`snapshot_run` saw (a failed resume must not rewrite a run that ended well)."""
        if snapshot:
            with self._tx() as c:
                c.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in snapshot)} WHERE id = ?", (*snapshot.values(), run_id))

    def update_run(self, run_id: int, **values: Any) -> None:
        """Set some columns of a run (dicts are stored as JSON); also touches its heartbeat."""
        bad = set(values) - _UPDATABLE
        if bad:
            raise ValueError(f"not a run column: {', '.join(sorted(bad))}")
        now = time.time()
        cols = {k: json.dumps(v, sort_keys=True) if isinstance(v, dict) else v for k, v in values.items()}
        sets = ", ".join(f"{k} = ?" for k in cols)
        with self._tx() as c:
            c.execute(
                f"UPDATE runs SET {sets}{', ' if sets else ''}updated_at = ?, heartbeat_at = ? WHERE id = ?",
                (*cols.values(), now, now, run_id),
            )

    def heartbeat(self, run_id: int) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (time.time(), run_id))

    def write_batch(
        self,
        run_id: int,
        metrics: Sequence[Sequence[Any]] = (),
        artifacts: Sequence[dict[str, Any]] = (),
        run: dict[str, Any] | None = None,
        drop_from_step: int | None = None,
    ) -> None:
        """One transaction: drop the series from ``drop_from_step`` on (a resumed run redoes those steps),
        add metric rows (:data:`METRIC_COLUMNS` order), add files, update the run's columns."""
        now = time.time()
        run = dict(run or {})
        bad = set(run) - _UPDATABLE
        if bad:
            raise ValueError(f"not a run column: {', '.join(sorted(bad))}")
        with self._tx() as c:
            if drop_from_step is not None:
                c.execute("DELETE FROM metrics WHERE run_id = ? AND step >= ?", (run_id, drop_from_step))
            if metrics:
                c.executemany(
                    f"INSERT OR REPLACE INTO metrics (run_id, {', '.join(METRIC_COLUMNS)}) "
                    f"VALUES (?{', ?' * len(METRIC_COLUMNS)})",
                    [(run_id, *m) for m in metrics],
                )
            for a in artifacts:
                c.execute(
                    "INSERT INTO artifacts (run_id, kind, path, step, epoch, prompt) VALUES (?, ?, ?, ?, ?, ?)",
                    (run_id, a["kind"], a["path"], a.get("step"), a.get("epoch"), a.get("prompt")),
                )
            cols = {k: json.dumps(v, sort_keys=True) if isinstance(v, dict) else v for k, v in run.items()}
            sets = "".join(f"{k} = ?, " for k in cols)
            c.execute(f"UPDATE runs SET {sets}updated_at = ?, heartbeat_at = ? WHERE id = ?", (*cols.values(), now, now, run_id))

    def end_run(self, run_id: int, status: str, **values: Any) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        self.update_run(run_id, status=status, ended_at=time.time(), **values)

    def mark_dead_runs(self, now: float | None = None) -> list[RunRow]:
        """Runs left ``running`` by a process that is gone become ``interrupted``; returns them.

        On this machine the process is checked (pid and start time); a run from another machine
        (a shared home folder) counts as gone when its heartbeat is older than :data:`STALE_SECONDS`.
        """
        now = time.time() if now is None else now
        host = socket.gethostname()
        rows = self.conn.execute("SELECT id, pid, pid_started, host, heartbeat_at FROM runs WHERE status = 'running'").fetchall()
        dead = []
        for run_id, pid, started, run_host, beat in rows:
            alive = process_alive(pid, started) if run_host == host else None
            if alive is None:
                alive = beat is not None and now - beat < STALE_SECONDS
            if not alive:
                dead.append(run_id)
        if not dead:
            return []
        with self._tx() as c:
            for run_id in dead:
                c.execute(
                    "UPDATE runs SET status = 'interrupted', ended_at = coalesce(heartbeat_at, updated_at), message = ? "
                    "WHERE id = ? AND status = 'running'",
                    ("the process ended without saying how the run ended (killed, crashed or the machine stopped)", run_id),
                )
        return [r for r in (self.run_row(i) for i in dead) if r is not None]

    def delete_run(self, run_id: int) -> None:
        """Forget a run (its series and file list too). Its files on disk are left alone."""
        with self._tx() as c:
            c.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # ------------------------------------------------------------------ reading
    @staticmethod
    def _row(values: Sequence[Any]) -> RunRow:
        return RunRow(*values)

    def list_runs(self) -> list[RunRow]:
        """Every run, newest first."""
        cur = self.conn.execute(f"SELECT {_LIST_COLUMNS} FROM runs ORDER BY created_at DESC, id DESC")
        return [RunRow(*r) for r in cur.fetchall()]

    def run_row(self, run_id: int) -> RunRow | None:
        r = self.conn.execute(f"SELECT {_LIST_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        return RunRow(*r) if r else None

    def run(self, run_id: int) -> RunDetail | None:
        row = self.run_row(run_id)
        if row is None:
            return None
        config, device, save_precision, dataset, timings = self.conn.execute(
            "SELECT config_json, device, save_precision, dataset_json, timings_json FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        return RunDetail(row, _loads(config), device, save_precision, _loads(dataset), _loads(timings), self.artifacts(run_id))

    def config(self, run_id: int) -> dict[str, Any]:
        r = self.conn.execute("SELECT config_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _loads(r[0]) if r else {}

    def artifacts(self, run_id: int) -> list[dict[str, Any]]:
        cur = self.conn.execute(
            "SELECT kind, path, step, epoch, prompt FROM artifacts WHERE run_id = ? ORDER BY rowid", (run_id,)
        )
        return [dict(zip(("kind", "path", "step", "epoch", "prompt"), r)) for r in cur.fetchall()]

    def series(self, run_id: int, columns: Iterable[str] = METRIC_COLUMNS) -> dict[str, list[Any]]:
        """The run's per-step series, ordered by step: ``{column: [values...]}`` (None where absent)."""
        cols = list(columns)
        bad = set(cols) - set(METRIC_COLUMNS)
        if bad:
            raise ValueError(f"not a metric column: {', '.join(sorted(bad))}")
        rows = self.conn.execute(f"SELECT {', '.join(cols)} FROM metrics WHERE run_id = ? ORDER BY step", (run_id,)).fetchall()
        return {c: [r[i] for r in rows] for i, c in enumerate(cols)}

    def last_metric(self, run_id: int, before_step: int) -> tuple[int, float | None] | None:
        """(step, images) of the last stored step before ``before_step``."""
        r = self.conn.execute(
            "SELECT step, images FROM metrics WHERE run_id = ? AND step < ? ORDER BY step DESC LIMIT 1", (run_id, before_step)
        ).fetchone()
        return (int(r[0]), r[1]) if r else None

    def run_for_state(self, state_path: str | Path) -> int | None:
        """The newest run whose resumable state is ``state_path`` (the one that last wrote it)."""
        key = _norm(state_path)
        r = self.conn.execute(
            "SELECT id FROM runs WHERE state_path = ? ORDER BY updated_at DESC, id DESC LIMIT 1", (key,)
        ).fetchone()
        return int(r[0]) if r else None

    def files_of(self, run_id: int) -> list[Path]:
        """The files and folders on disk this run wrote that still exist (LoRAs, state, samples, logs).

        Only the run's own: a path that another run recorded after it (written over with ``output.overwrite``,
        a state saved over it, or the shared names of runs before one label went on all of a run's files) is
        the later run's, and deleting this run leaves it where it is.
        """
        last_writer = {
            str(path): int(owner)
            for path, _last, owner in self.conn.execute(
                # SQLite: with max(), the bare column (run_id) comes from the row holding the maximum
                "SELECT path, max(rowid), run_id FROM artifacts "
                "WHERE path IN (SELECT path FROM artifacts WHERE run_id = ?) GROUP BY path",
                (run_id,),
            ).fetchall()
        }
        paths = [a["path"] for a in self.artifacts(run_id)]
        row = self.run_row(run_id)
        if row is not None:
            paths += [p for p in (row.lora_path, row.state_path) if p]
        out: list[Path] = []
        for p in dict.fromkeys(paths):  # once each, in the order written
            if last_writer.get(p, run_id) != run_id:
                continue
            if p == (row.state_path if row else None) and p not in last_writer and self.run_for_state(p) != run_id:
                continue
            if Path(p).exists():
                out.append(Path(p))
        return out


def _loads(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _norm(path: str | Path) -> str:
    """How paths are stored: absolute, ``~`` expanded, not resolved through links."""
    return os.path.abspath(os.path.expanduser(str(path)))


def normalize_path(path: str | Path) -> str:
    return _norm(path)
