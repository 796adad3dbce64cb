"""Count the file-system work code does under a folder: stats, listings, opens (a test's stopwatch that
does not depend on the machine).

``count_file_work(monkeypatch, root)`` wraps ``os.stat``, ``os.lstat``, ``os.scandir``, ``open`` (builtins,
``io`` and ``os.open``, the call ``base.safe_open`` makes) and ``PIL.Image.open`` (given a path, or a file object
whose descriptor ``os.open`` opened on a path) for the rest of the test (or until ``stop()``) and records each
call on a path inside ``root``. pathlib's ``stat`` / ``is_dir`` / ``resolve``, ``os.path.islink`` and
``os.path.realpath`` go through these, so they are counted too; ``os.DirEntry``'s cached ``is_dir()``
(no system call on Linux) is not.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
from collections import Counter
from pathlib import Path

import pytest

OPS = ("stat", "lstat", "scandir", "open", "image_open")


class FileWork:
    """Calls per (operation, path relative to ``root``; "." is ``root`` itself)."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.abspath(root)
        self.calls: Counter[tuple[str, str]] = Counter()
        self.counting = True

    def note(self, op: str, path: object) -> None:
        if not self.counting or isinstance(path, int):  # a file descriptor: not a path
            return
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return
        full = os.path.abspath(text)
        if full == self.root or full.startswith(self.root + os.sep):
            self.calls[(op, os.path.relpath(full, self.root))] += 1

    def total(self, op: str, suffix: str = "") -> int:
        """How many ``op`` calls on paths ending in ``suffix`` ("" for all)."""
        return sum(n for (o, p), n in self.calls.items() if o == op and p.endswith(suffix))

    def most(self, op: str, suffix: str = "") -> int:
        """The most ``op`` calls on any one path ending in ``suffix``."""
        return max((n for (o, p), n in self.calls.items() if o == op and p.endswith(suffix)), default=0)

    def on_root(self, op: str) -> int:
        return self.calls[(op, ".")]

    def reset(self) -> None:
        self.calls.clear()

    def summary(self) -> str:
        return ", ".join(f"{op} {self.total(op)}" for op in OPS)


def count_file_work(monkeypatch: pytest.MonkeyPatch, root: Path) -> FileWork:
    """Start counting file-system calls on paths inside ``root``; ``work.counting = False`` pauses it."""
    from PIL import Image

    work = FileWork(root)
    real_stat, real_lstat, real_scandir, real_open, real_os_open, real_image_open = (
        os.stat, os.lstat, os.scandir, builtins.open, os.open, Image.open,
    )
    fd_paths: dict[int, object] = {}  # descriptor -> the path os.open opened (a descriptor number is reused)

    def stat(path, *args, **kwargs):  # noqa: ANN001, ANN202 - os.stat's own signature
        work.note("stat" if kwargs.get("follow_symlinks", True) else "lstat", path)
        return real_stat(path, *args, **kwargs)

    def lstat(path, *args, **kwargs):  # noqa: ANN001, ANN202
        work.note("lstat", path)
        return real_lstat(path, *args, **kwargs)

    def scandir(path=".", *args, **kwargs):  # noqa: ANN001, ANN202
        work.note("scandir", path)
        return real_scandir(path, *args, **kwargs)

    def open_(file, *args, **kwargs):  # noqa: ANN001, ANN202
        work.note("open", file)
        return real_open(file, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):  # noqa: ANN001, ANN202
        work.note("open", path)
        fd = real_os_open(path, flags, *args, **kwargs)
        fd_paths[fd] = path
        return fd

    def image_open(fp, *args, **kwargs):  # noqa: ANN001, ANN202
        if isinstance(fp, str | os.PathLike):
            work.note("image_open", fp)
        elif hasattr(fp, "fileno"):
            with contextlib.suppress(OSError, ValueError):  # a file object without a descriptor (BytesIO)
                work.note("image_open", fd_paths.get(fp.fileno(), fp.fileno()))
        return real_image_open(fp, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)  # pathlib's Path.open
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(Image, "open", image_open)
    return work
