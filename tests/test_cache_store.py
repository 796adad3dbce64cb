"""Disk cache bookkeeping: usage per kind, least-recently-used pruning within a budget, clearing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from guitrainer.core import cache_store


def _entry(root: Path, kind: str, name: str, size: int, age_s: float) -> Path:
    p = root / kind / name[:2] / f"{name}.safetensors"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * size)
    t = time.time() - age_s
    os.utime(p, (t, t))
    return p


def test_usage_counts_each_kind(tmp_path):
    _entry(tmp_path, "latents", "aa1", 100, 10)
    _entry(tmp_path, "latents", "bb2", 50, 10)
    _entry(tmp_path, "text", "cc3", 7, 10)
    got = {u.kind: (u.files, u.bytes) for u in cache_store.usage(tmp_path)}
    assert got == {"latents": (2, 150), "text": (1, 7), "thumbs": (0, 0)}


def test_prune_removes_least_recently_used_first_and_keeps_this_runs_entries(tmp_path):
    oldest = _entry(tmp_path, "latents", "aa", 400, 300)
    older = _entry(tmp_path, "text", "bb", 300, 200)
    recent = _entry(tmp_path, "latents", "cc", 200, 100)
    thumb = _entry(tmp_path, "thumbs", "dd", 10_000, 1000)  # not a kind the engine prunes
    run_start = time.time() - 50
    fresh = _entry(tmp_path, "latents", "ee", 1000, 1)  # written by this run: kept even over budget
    r = cache_store.prune(1200, tmp_path, keep_since=run_start)
    assert (r.files, r.bytes, r.failed) == (2, 700, 0)
    assert not oldest.exists() and not older.exists()
    assert recent.exists() and fresh.exists() and thumb.exists()
    r = cache_store.prune(0, tmp_path, keep_since=run_start)  # only this run's entry left to protect
    assert r.files == 1 and not recent.exists() and fresh.exists()
    assert cache_store.prune(10**9, tmp_path) == cache_store.PruneResult()  # under budget: nothing to do


def test_a_reused_entry_counts_as_recently_used(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from guitrainer.engine.cache import TensorCache

    cache = TensorCache(tmp_path / "latents")
    cache.put("ab" * 32, {"latent": torch.zeros(2)})
    path = cache._file("ab" * 32)
    old = time.time() - 10_000
    os.utime(path, (old, old))
    again = TensorCache(tmp_path / "latents")  # a new run: the entry comes from the disk
    assert again.get("ab" * 32) is not None and again.disk_hits == 1
    assert path.stat().st_mtime > old + 9_000


def test_clear_removes_files_and_folders_and_reports_what_it_could_not(tmp_path, monkeypatch):
    _entry(tmp_path, "latents", "aa", 100, 1)
    stuck = _entry(tmp_path, "text", "bb", 30, 1)
    _entry(tmp_path, "thumbs", "cc", 5, 1)
    real_unlink = Path.unlink

    def unlink(self, *a, **kw):
        if self == stuck:
            raise PermissionError(13, "Permission denied")
        return real_unlink(self, *a, **kw)

    monkeypatch.setattr(Path, "unlink", unlink)
    r = cache_store.clear(tmp_path)
    assert (r.files, r.bytes, r.failed) == (2, 105, 1)
    assert not (tmp_path / "latents").exists() and not (tmp_path / "thumbs").exists()
    assert stuck.exists()  # its folder stays, with the file
