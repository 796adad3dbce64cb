"""The run store: every training run remembered in one SQLite database in the user data folder.

One row per run, written when it starts (status ``running``), updated as it goes and when it ends
(``finished``, ``stopped``, ``failed``, ``interrupted``), with its metric series (one row per step)
and the files it wrote. The standard library's ``sqlite3`` in WAL mode: a killed writer leaves every
committed batch readable, and the app can read while a run (in this process or a CLI one) writes.

The schema is versioned (``PRAGMA user_version``) and upgraded by :data:`MIGRATIONS`.

A file that cannot be opened or written *now* is not damaged: a full disk, an I/O error, a file without
permission, one locked by another program, or one made by a newer version of the app is left exactly as
it is, and :class:`StoreUnavailable` says why in plain words (try again later). Only a file that is not an
SQLite database, or one that fails ``PRAGMA integrity_check``, is moved aside (never overwritten, never
deleted) and a new one made; :attr:`RunStore.notice` says what happened, and
:mod:`guitrainer.core.runs.recovery` brings the moved file's runs back.

No Qt and no torch here: the UI, the CLI and the engine's recorder all use it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
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
#: how a damaged history is renamed: ``runs.sqlite3.damaged-<time>`` (older versions wrote ``unreadable-`` and
#: ``newer-``: :mod:`guitrainer.core.runs.recovery` offers those too)
MOVED_DAMAGED = "damaged"
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


#: SQLite's primary result codes of a file that is whole but cannot be used just now (sqlite.org/rescode.html):
#: PERM, BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL (an extended code's low byte is its primary)
NOT_DAMAGE_CODES = frozenset({3, 5, 6, 7, 8, 10, 13, 14, 15})
#: ... and those that mean the file's content is wrong: CORRUPT, NOTADB (confirmed by ``integrity_check``)
DAMAGE_CODES = frozenset({11, 26})
SQLITE_FULL = 13
#: a disk with less room than this left is full as far as the run history goes (SQLite's -shm alone is 32 KiB)
NEARLY_FULL_BYTES = 256 * 1024
#: the same, from the message, for errors without a code (and for OSError): what a full or failing disk says
_NOT_DAMAGE_WORDS = ("disk is full", "disk i/o error", "locked", "readonly", "unable to open", "out of memory",
                     "no space left", "not authorized", "permission denied", "read-only")  # fmt: skip
_FULL_ERRNOS = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_NOT_DAMAGE_ERRNOS = (*_FULL_ERRNOS, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM, errno.EBUSY)


class RunStoreError(Exception):
    """The store could not be opened or written; the message says why in plain words."""


class StoreUnavailable(RunStoreError):
    """The run history is whole but cannot be opened or written now (a full disk, an I/O error, no permission,
    locked, or made by a newer version): nothing was moved or lost; try again later. ``full``: the disk is full."""

    def __init__(self, message: str, *, full: bool = False):
        super().__init__(message)
        self.full = full


def is_not_damage(e: BaseException) -> bool:
    """True for an error that says the disk or the system failed, not the file's content (a full disk, I/O)."""
    if isinstance(e, OSError) and not isinstance(e, sqlite3.Error):
        return e.errno in _NOT_DAMAGE_ERRNOS
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in NOT_DAMAGE_CODES
    return any(w in str(e).lower() for w in _NOT_DAMAGE_WORDS)


def is_full(e: BaseException) -> bool:
    """True for a full disk (SQLITE_FULL, ENOSPC, a quota): the words to say are "free some space"."""
    if isinstance(e, OSError) and not isinstance(e, sqlite3.Error):
        return e.errno in _FULL_ERRNOS
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) == SQLITE_FULL:
        return True
    text = str(e).lower()
    return "disk is full" in text or "no space left" in text


def _nearly_full(folder: Path) -> bool:
    """Less room left on the disk of ``folder`` than SQLite needs to open a WAL database (its -wal and -shm)."""
    try:
        return shutil.disk_usage(folder).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def unavailable(path: Path, e: BaseException, doing: str = "used") -> StoreUnavailable:
    """:class:`StoreUnavailable` for ``e`` in plain words: the history is kept, and what to do.

    A full disk often shows as an I/O error (SQLite cannot map its ``-shm`` file): an I/O error on a disk with
    next to no room left is said as a full disk.
    """
    if is_full(e) or (is_not_damage(e) and "i/o" in str(e).lower() and _nearly_full(path.parent)):
        return StoreUnavailable(
            f"The disk with the run history ({path}) is full: it cannot be {doing} now. Nothing was lost; the "
            "history is kept as it is. Free some disk space and it is written again.",
            full=True,
        )
    why = getattr(e, "strerror", None) or str(e)
    return StoreUnavailable(
        f"The run history {path} cannot be {doing} now ({why}). Nothing was lost; the file is left as it is. "
        "It is tried again later."
    )


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
        self.notice = ""  # set when a damaged file was moved aside
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
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL: a commit survives a killed process
            self._migrate(conn)
        except sqlite3.DatabaseError as e:
            if conn is not None:
                conn.close()
            if is_not_damage(e):
                raise unavailable(self.path, e, "opened") from e
            raise RunStoreError(f"Cannot open the run history {self.path}: {e}") from e
        return conn

    def _problem(self) -> str:
        """Why the existing file must be moved aside ("" when it can be used, or when there is none): it is not
        an SQLite database, or it fails ``integrity_check``.

        Raises :class:`StoreUnavailable` when the file cannot be read or checked now (a full disk, an I/O error,
        no permission, locked) or was made by a newer version: those are left as they are.
        """
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return ""
        except OSError as e:
            raise unavailable(self.path, e, "read") from e
        if size == 0:
            return ""
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError as e:
            raise unavailable(self.path, e, "read") from e
        if head != SQLITE_HEADER:
            return "it is not an SQLite database"
        try:
            version = self._probe()
        except sqlite3.DatabaseError as e:
            if is_not_damage(e):
                raise unavailable(self.path, e, "read") from e
            verdict = self._integrity()
            if verdict == "ok":  # whole, but not a run history this app can read: another program's file?
                raise RunStoreError(
                    f"The run history {self.path} cannot be read ({e}), although SQLite finds nothing damaged in "
                    "it; it was left as it is. Point GUITRAINER_RUNS_DB at another file, or move this one away."
                ) from e
            return f"it is damaged ({e}; SQLite's integrity check: {verdict})"
        if version > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"The run history {self.path} was made by a newer version of guitrainer (schema {version}; this one "
                f"reads up to {SCHEMA_VERSION}). It was left as it is, and this version records no runs in it: use the "
                "newer version, or point GUITRAINER_RUNS_DB at another file."
            )
        return ""

    def _probe(self) -> int:
        """Read a little of every part (a few ms): the schema version, the runs table whole, the series' first page."""
        conn = self._connect()
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if 1 <= version <= SCHEMA_VERSION:
                conn.execute("SELECT count(*), max(length(config_json)) FROM runs").fetchone()
                conn.execute("SELECT * FROM metrics LIMIT 1").fetchone()
            return version
        finally:
            conn.close()

    def _integrity(self) -> str:
        """``PRAGMA integrity_check``'s verdict ("ok", or its first findings); a file SQLite cannot even read as a
        database says so. Raises :class:`StoreUnavailable` when the check cannot run (a full disk, I/O)."""
        try:
            conn = self._connect()
            try:
                rows = conn.execute("PRAGMA integrity_check(5)").fetchall()
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            if is_not_damage(e):
                raise unavailable(self.path, e, "checked") from e
            return str(e)
        found = [" ".join(str(r[0]).split()) for r in rows]  # SQLite's findings span lines: one line each
        return "ok" if found == ["ok"] else "; ".join(found)[:300]

    def _move_aside(self, problem: str) -> None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.path.name}.{MOVED_DAMAGED}-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.{MOVED_DAMAGED}-{stamp}-{n}")
        try:
            move_database(self.path, target)
        except OSError as e:
            raise RunStoreError(
                f"The run history {self.path} cannot be used: {problem}, and it could not be moved aside "
                f"({e.strerror or e}). Move or delete it yourself, then start again."
            ) from e
        self.moved_to = target
        self.notice = (
            f"The run history {self.path} could not be used: {problem}. It was moved to {target} "
            "(nothing was deleted) and a new, empty history was started. The Runs page can bring back the runs "
            "that can still be read from it."
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
            c.execute("COMMIT")  # a full disk can fail here too: then the transaction is still open
        except BaseException:
            if c.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL): ROLLBACK would then raise
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
            raise

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

    def import_run(self, values: dict[str, Any], metrics: Sequence[dict[str, Any]], artifacts: Sequence[dict[str, Any]]) -> int:
        """Add a run read from another history (:mod:`~guitrainer.core.runs.recovery`) under a new id, with its
        series and files, in one transaction; ``values`` are its columns (unknown ones are left out)."""
        cols = [c for c in values if c in self._run_columns() and c != "id"]
        metric_cols = [c for c in METRIC_COLUMNS if any(c in m for m in metrics)] or ["step"]
        with self._tx() as c:
            cur = c.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", [values[k] for k in cols])
            run_id = int(cur.lastrowid or 0)
            c.executemany(
                f"INSERT OR REPLACE INTO metrics (run_id, {', '.join(metric_cols)}) VALUES (?{', ?' * len(metric_cols)})",
                [(run_id, *(m.get(k) for k in metric_cols)) for m in metrics if m.get("step") is not None],
            )
            c.executemany(
                "INSERT INTO artifacts (run_id, kind, path, step, epoch, prompt) VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, a.get("kind") or "", a.get("path") or "", a.get("step"), a.get("epoch"), a.get("prompt"))
                 for a in artifacts if a.get("path")],
            )  # fmt: skip
        return run_id

    def has_run(self, name: str, created_at: float, host: str) -> bool:
        """A run with this name, start time and machine is here (a run brought back twice is one run)."""
        r = self.conn.execute(
            "SELECT 1 FROM runs WHERE name = ? AND created_at = ? AND host = ? LIMIT 1", (name, created_at, host)
        ).fetchone()
        return r is not None

    def _run_columns(self) -> set[str]:
        return {str(r[1]) for r in self.conn.execute("PRAGMA table_info(runs)").fetchall()}

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


def move_database(source: Path, target: Path) -> None:
    """Rename an SQLite file with its ``-wal`` and ``-shm`` companions (the WAL holds committed runs: the two
    belong together)."""
    os.replace(source, target)
    for suffix in ("-wal", "-shm"):
        companion = source.with_name(source.name + suffix)
        if companion.exists():
            os.replace(companion, target.with_name(target.name + suffix))


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
