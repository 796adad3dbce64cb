"""A run history that was moved aside: finding it, and bringing its runs back into the current one.

The store moves a damaged file aside (``runs.sqlite3.damaged-<time>``, with its ``-wal``); older versions
also moved whole files that a full disk or a newer version had made unreadable for a moment
(``unreadable-`` / ``newer-``). Bringing one back copies every run that can still be read from it, with its
series and its list of files, into the current history, beside the runs recorded since; a run already
there (same name, start time and machine) is not copied twice. The moved file is only read; afterwards it
is renamed ``<name>.brought-back`` (with its companions), so it is not offered again, and kept.

No Qt and no torch here.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from guitrainer.core.dataset.report import plural
from guitrainer.core.runs.store import METRIC_COLUMNS, MOVED_DAMAGED, RunStore, move_database

#: the names a moved-aside history has had: ``runs.sqlite3.<kind>-<time>``
MOVED_KINDS = (MOVED_DAMAGED, "unreadable", "newer")
BROUGHT_BACK = ".brought-back"
_COMPANIONS = ("-wal", "-shm")
_ARTIFACT_COLUMNS = ("kind", "path", "step", "epoch", "prompt")


@dataclass(frozen=True)
class BroughtBack:
    """What bringing back one moved-aside file did.

    Attributes:
        source: the moved-aside file read.
        runs: runs copied into the current history.
        already: runs that were there already (left as they are).
        unreadable: runs whose row could not be read (the damage), left out.
        partial: runs copied without all of their series or files (the rest could not be read).
        kept_as: where the moved file is now (renamed so it is not offered again); None if it could not be renamed.
        error: why nothing could be read ("" when something could).
    """

    source: Path
    runs: int = 0
    already: int = 0
    unreadable: int = 0
    partial: int = 0
    kept_as: Path | None = None
    error: str = ""

    def describe(self) -> str:
        """One sentence for the Runs page."""
        if self.error:
            return f"Nothing could be read from {self.source}: {self.error}. The file is kept as it is."
        words = [f"Brought back {plural(self.runs, 'run')} from {self.source.name}"]
        if self.already:
            words.append(f"{plural(self.already, 'run')} already in the history")
        if self.partial:
            its = "its curve or files" if self.partial == 1 else "their curves or files"
            words.append(f"{plural(self.partial, 'run')} without part of {its}")
        if self.unreadable:
            words.append(f"{plural(self.unreadable, 'run')} too damaged to read")
        kept = f" The file is kept as {self.kept_as}." if self.kept_as else f" The file {self.source} is kept."
        return "; ".join(words) + "." + kept


def moved_aside(store_path: str | Path) -> list[Path]:
    """The moved-aside histories beside ``store_path`` not yet brought back, newest first."""
    path = Path(store_path)
    found: list[Path] = []
    for kind in MOVED_KINDS:
        for p in path.parent.glob(f"{path.name}.{kind}-*"):
            if p.is_file() and not p.name.endswith(_COMPANIONS) and not p.name.endswith(BROUGHT_BACK):
                found.append(p)
    return sorted(found, key=_mtime, reverse=True)


def bring_back(store: RunStore, source: str | Path) -> BroughtBack:
    """Copy every readable run of ``source`` (a moved-aside history) into ``store``; see the module's docstring.

    Raises what ``store`` raises when it cannot be written (a full disk: :class:`~guitrainer.core.runs.store.StoreUnavailable`
    through the caller's handling of ``sqlite3.Error``); the runs copied until then stay copied.
    """
    source = Path(source)
    try:
        conn = sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return BroughtBack(source, error=str(e))
    try:
        try:
            run_cols = [str(r[1]) for r in conn.execute("PRAGMA table_info(runs)").fetchall()]
            ids = [int(r[0]) for r in conn.execute("SELECT id FROM runs ORDER BY id").fetchall()]
        except sqlite3.DatabaseError as e:
            return BroughtBack(source, error=str(e))
        if not run_cols:
            return BroughtBack(source, error="it holds no runs table")
        counts = {"runs": 0, "already": 0, "unreadable": 0, "partial": 0}
        metric_cols = [c for c in METRIC_COLUMNS if c in _columns(conn, "metrics")]
        for run_id in ids:
            _copy_run(conn, store, run_id, run_cols, metric_cols, counts)
    finally:
        conn.close()
    return BroughtBack(source, **counts, kept_as=_set_aside(source))


def _copy_run(
    conn: sqlite3.Connection, store: RunStore, run_id: int, run_cols: list[str], metric_cols: list[str], counts: dict[str, int]
) -> None:
    try:
        row = conn.execute(f"SELECT {', '.join(run_cols)} FROM runs WHERE id = ?", (run_id,)).fetchone()
    except sqlite3.DatabaseError:
        counts["unreadable"] += 1
        return
    values = dict(zip(run_cols, row))
    if store.has_run(str(values.get("name", "")), float(values.get("created_at") or 0.0), str(values.get("host", ""))):
        counts["already"] += 1
        return
    metrics, whole_series = _read(conn, f"SELECT {', '.join(metric_cols)} FROM metrics WHERE run_id = ? ORDER BY step",
                                  run_id, metric_cols)  # fmt: skip
    artifacts, whole_files = _read(conn, f"SELECT {', '.join(_ARTIFACT_COLUMNS)} FROM artifacts WHERE run_id = ? ORDER BY rowid",
                                   run_id, list(_ARTIFACT_COLUMNS))  # fmt: skip
    store.import_run(values, metrics, artifacts)
    counts["runs"] += 1
    counts["partial"] += int(not (whole_series and whole_files))


def _read(conn: sqlite3.Connection, sql: str, run_id: int, cols: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The rows of one run that can be read, and whether that was all of them (damage can cut a table short)."""
    out: list[dict[str, Any]] = []
    if not cols:
        return out, True
    try:
        for r in conn.execute(sql, (run_id,)):
            out.append(dict(zip(cols, r)))
    except sqlite3.DatabaseError:
        return out, False
    return out, True


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    try:
        return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})").fetchall()}
    except sqlite3.DatabaseError:
        return set()


def _set_aside(source: Path) -> Path | None:
    """Rename the file brought back (and its companions) so it is not offered again; None when that fails."""
    target = source.with_name(source.name + BROUGHT_BACK)
    with contextlib.suppress(OSError):
        if not target.exists():
            move_database(source, target)
            return target
    return None


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
