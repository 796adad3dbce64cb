"""The disk caches under ``paths.cache_dir()``: how big they are, and keeping them bounded.

Three kinds live there: ``latents`` and ``text`` (the engine's caches, one ``.safetensors`` file per
entry) and ``thumbs`` (the dataset grid's thumbnails). Entries are never stale (their key names what
they depend on) but they pile up: every changed image, crop or dtype adds new ones. The engine
touches an entry's mtime when it reuses it, so the oldest mtime is the least recently used, and
:func:`prune` removes those first. No torch, no Qt: the UI calls this from a worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from guitrainer.base import paths

log = logging.getLogger(__name__)

KINDS = ("latents", "text", "thumbs")
#: the engine prunes the latent and text caches to this size after caching (least recently used first)
DEFAULT_BUDGET_BYTES = 20 * 1024**3


@dataclass(frozen=True)
class KindUsage:
    kind: str
    files: int
    bytes: int


@dataclass(frozen=True)
class PruneResult:
    files: int = 0
    bytes: int = 0
    failed: int = 0  # files that could not be removed (in use, permissions): left in place


def _entries(folder: Path) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of every file under ``folder``; unreadable parts are skipped."""
    out: list[tuple[float, int, Path]] = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(root) / name
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((st.st_mtime, st.st_size, p))
    return out


def _remove(p: Path) -> bool | None:
    """Delete one entry: True when removed, None when already gone, False when it could not be."""
    try:
        p.unlink()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("could not remove cache entry %s: %s", p, e)
        return False
    return True


def usage(root: Path | None = None) -> list[KindUsage]:
    """Files and bytes of each cache kind (0 for a kind not created yet)."""
    root = paths.cache_dir() if root is None else root
    out = []
    for kind in KINDS:
        entries = _entries(root / kind)
        out.append(KindUsage(kind, len(entries), sum(size for _t, size, _p in entries)))
    return out


def prune(
    max_bytes: int,
    root: Path | None = None,
    kinds: tuple[str, ...] = ("latents", "text"),
    keep_since: float | None = None,
) -> PruneResult:
    """Remove the least recently used entries of ``kinds`` until they hold at most ``max_bytes`` together.

    Entries used or written at or after ``keep_since`` (a ``time.time()``) are never removed, so a run
    keeps what it has just cached even when that alone is over the budget.
    """
    root = paths.cache_dir() if root is None else root
    entries = [e for kind in kinds for e in _entries(root / kind)]
    total = sum(size for _t, size, _p in entries)
    removed = freed = failed = 0
    for mtime, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= max_bytes:
            break
        if keep_since is not None and mtime >= keep_since:
            break  # sorted by mtime: everything after this is newer still
        done = _remove(p)
        if done is False:
            failed += 1
            continue
        total -= size  # gone either way
        if done:
            removed += 1
            freed += size
    if removed:
        log.info("pruned %d cache entries (%.1f MB)", removed, freed / 1e6)
    return PruneResult(removed, freed, failed)


def clear(root: Path | None = None, kinds: tuple[str, ...] = KINDS) -> PruneResult:
    """Remove every entry of ``kinds``, then their emptied folders (made again when needed)."""
    root = paths.cache_dir() if root is None else root
    removed = freed = failed = 0
    for kind in kinds:
        folder = root / kind
        for _t, size, p in _entries(folder):
            done = _remove(p)
            if not done:
                failed += done is False
                continue
            removed += 1
            freed += size
        for sub, _dirs, _files in sorted(os.walk(folder), key=lambda w: -len(w[0])):  # deepest first
            with contextlib.suppress(OSError):  # not empty (a file that could not go) or already gone
                os.rmdir(sub)
    return PruneResult(removed, freed, failed)
