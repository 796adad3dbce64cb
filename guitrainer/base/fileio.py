"""Atomic file writes: nothing the user made is ever half-written."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from guitrainer.base.errors import first_line


class WriteError(OSError):
    """A file could not be written; the message says why in plain words and what to do."""

    def __str__(self) -> str:  # the plain-words message, without OSError's "[Errno N] ...: 'path'"
        return str(self.strerror)


def _is_file(p: Path) -> bool:
    """``p`` exists and is not a folder; False when it cannot be told (a name too long, no permission)."""
    try:
        return p.exists() and not p.is_dir()
    except OSError:
        return False


#: how other libraries word an errno they do not raise as OSError (safetensors: "IoError(Os { code: 28, ... })",
#: "I/O error: No space left on device (os error 28)")
_OS_CODE = re.compile(r"\bcode:\s*(\d+)|\[Errno (\d+)\]|\(os error (\d+)\)")
#: how PyTorch's zip writer (``torch.save``) reports a write that stopped short, without an errno: on a full disk
#: "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534", or "PytorchStreamWriter failed writing"
_TORCH_SHORT_WRITE = re.compile(r"inline_container\.cc|PytorchStreamWriter failed|unexpected pos \d+")
#: free space under which a write that stopped short is taken for a full disk
NEARLY_FULL_BYTES = 16 * 1024 * 1024


def _errno_of(e: BaseException, path: Path | None = None) -> int:
    """The OS error behind ``e``, however its library words it; 0 when none shows. A PyTorch write that stopped
    short is ENOSPC when the disk holding ``path`` is (nearly) full, else EIO."""
    if isinstance(e, OSError) and e.errno:
        return int(e.errno)
    text = str(e)
    m = _OS_CODE.search(text)
    if m:
        return int(next(g for g in m.groups() if g))
    if "storagefull" in text.lower() or "no space left" in text.lower():
        return errno.ENOSPC
    if _TORCH_SHORT_WRITE.search(text):
        return errno.ENOSPC if path is not None and _nearly_full(path) else errno.EIO
    return 0


def _nearly_full(path: Path) -> bool:
    """The disk holding ``path`` (or its nearest existing folder) has less than :data:`NEARLY_FULL_BYTES` free."""
    for folder in (path, *path.parents):
        try:
            return shutil.disk_usage(folder).free < NEARLY_FULL_BYTES
        except OSError:
            continue
    return False


def is_write_failure(e: BaseException, path: str | Path | None = None) -> bool:
    """``e`` is the OS refusing a write (a full disk, no permission, ...), however the library that wrote words it."""
    return bool(_errno_of(e, Path(path) if path is not None else None))


def explain(path: str | Path, e: BaseException) -> WriteError:
    """``e`` in plain words (a WriteError passes through): what could not be written, why, and what to do.

    Any exception type: other libraries report a full disk as their own errors (safetensors' SafetensorError,
    PyTorch's "unexpected pos" RuntimeError).
    Never raises itself, even for a path the file system refuses.
    """
    if isinstance(e, WriteError):
        return e
    path = Path(path)
    code = _errno_of(e, path)
    blocker = next((p for p in path.parents if _is_file(p)), None)
    if blocker is not None:
        msg = f"The output folder {blocker} is a file, not a folder: could not write {path}."
    elif code == errno.ENOSPC:
        msg = f"The disk is full: could not write {path}. Free some space or choose another folder, then save again."
    elif code in (errno.EACCES, errno.EPERM, errno.EROFS):
        msg = f"No permission to write {path}. Choose a folder you can write to, then save again."
    elif code == errno.ENAMETOOLONG:
        msg = f"The name is too long for the file system: could not write {path}. Choose a shorter output name."
    elif code == errno.EIO and _TORCH_SHORT_WRITE.search(str(e)):
        msg = (f"Could not write {path}: the file stopped short while it was written (PyTorch: {first_line(e, 120)}). "
               "Is the disk full, or was the drive removed? Free some space or choose another folder, then save again.")
    else:
        why = getattr(e, "strerror", None) or first_line(e, 200)
        msg = f"Could not write {path}: {why}."
    err = WriteError(code, msg)
    err.filename = str(path)
    return err


def _target_mode(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path in the target's folder; on success fsync it and rename it over ``path``.

    If the body raises (or the process dies), the previous file at ``path`` is untouched and
    the temp file is removed (or left as ``.name.*.tmp``, never under the real name).
    """
    path = Path(path)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=folder)
        os.close(fd)
        # mkstemp makes 0600 files: keep the replaced file's mode, else the usual umask default.
        mode = _target_mode(path)
        os.chmod(tmp, mode)
    except OSError as e:
        raise explain(path, e) from e
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, mode)  # again: a writer that replaces the file itself (safetensors) makes it 0600
        os.replace(tmp_path, path)
        with contextlib.suppress(OSError):  # make the rename durable where the platform allows
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except BaseException as e:
        # explained before the temp file goes: a full disk still looks full (the part written is freed after)
        err = explain(path, e) if isinstance(e, OSError) or is_write_failure(e, path) else None
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        if err is None:
            raise
        raise err from e


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_with(path: str | Path, writer: Callable[[Path], None]) -> None:
    """Run ``writer(tmp_path)`` (e.g. safetensors' save_file) and move the result into place."""
    with atomic_path(path) as tmp:
        writer(tmp)


def numbered_path(path: str | Path) -> Path:
    """``name.ext`` if free, else ``name_2.ext``, ``name_3.ext`` ... (never overwrite silently)."""
    path = Path(path)
    if not path.exists():
        return path
    i = 2
    while True:
        cand = path.with_name(f"{path.stem}_{i}{path.suffix}")
        if not cand.exists():
            return cand
        i += 1
