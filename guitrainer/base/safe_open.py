"""Safe opening of a user-given path: what is there is told before anything is opened, so a named pipe never
blocks, a device is never read without end, and every refusal says in plain words what the path is.

Every reader of a path the user typed, dropped or wrote into a config goes through here:

* :func:`look` says what a path is (a file, a folder, a named pipe, a device, nothing) from ``stat`` alone;
  :func:`problem` says why it is not the kind asked for ("is a named pipe (FIFO), not a file"), never raising;
* :func:`open_file` opens a regular file only: ``stat`` first, then ``open`` with ``O_NONBLOCK`` (a pipe put there
  in between cannot block), then ``fstat`` again on what was opened, and a size limit where the format has one;
* :func:`read_bytes`, :func:`read_text` and :func:`read_json` read at most the limit, even from a file whose
  ``stat`` says 0 bytes (``/proc`` files).

They raise :class:`PathError`, an ``OSError`` whose ``reason`` is the predicate of a sentence the caller starts
with its own subject ("The config file “x” …", "model.base: …"). No Qt, no torch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from guitrainer.base.names import NAME_MAX, printable
from guitrainer.base.paths import expand
from guitrainer.base.units import format_bytes

Kind = Literal["file", "folder", "fifo", "device", "socket", "other", "missing"]
Want = Literal["file", "folder", "any"]

#: what each kind is, in a sentence: "“x” is a named pipe (FIFO)"
KIND_WORDS: dict[str, str] = {
    "file": "a file",
    "folder": "a folder",
    "fifo": "a named pipe (FIFO)",
    "device": "a device",
    "socket": "a socket",
    "other": "not a regular file",
}


class PathError(OSError):
    """A user-given path that cannot be read as asked.

    Attributes:
        path: the path as given (``filename`` too, as for every ``OSError``).
        reason: what is wrong, as the end of a sentence about the path: "is a named pipe (FIFO), not a file",
            "does not exist", "is larger than 4 MB (5.0 GB)".
        kind: what :func:`look` found there ("missing" when nothing, or when it could not be looked at).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str, code: int = 0, kind: Kind = "missing") -> None:
        super().__init__(code, reason)
        self.path = os.fspath(path)
        self.filename = self.path
        self.reason = reason
        self.kind = kind

    def __str__(self) -> str:  # "“/tmp/x” is a named pipe (FIFO), not a file" (never OSError's "[Errno N] ...")
        return f"“{printable(self.path)}” {self.reason}"


@dataclass(frozen=True)
class Look:
    """What is at a path: ``kind`` and, when something is there, its ``stat`` (symbolic links followed)."""

    kind: Kind
    st: os.stat_result | None = None

    @property
    def size(self) -> int:
        return int(self.st.st_size) if self.st is not None else 0


def kind_of(mode: int) -> Kind:
    """The kind of a ``st_mode``."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "other"


def look(path: str | os.PathLike[str]) -> Look:
    """What is at ``path`` (``~`` and ``$VARS`` expanded), from ``stat`` only: nothing is opened.

    Raises:
        PathError: the path cannot be looked at: a NUL character, a name too long, a symbolic link loop, no
            permission for a folder on the way. A path that leads nowhere (``ENOENT``, or a file where a folder
            should be on the way) is ``Look("missing")``, not an error.
    """
    text = _text(path)
    try:
        st = os.stat(expand(text))
    except ValueError:  # "embedded null byte"
        raise PathError(text, "holds a NUL character, which no path can hold", errno.EINVAL) from None
    except (FileNotFoundError, NotADirectoryError):
        return Look("missing")
    except OSError as e:
        raise PathError(text, _os_reason(text, e), e.errno or 0) from None
    return Look(kind_of(st.st_mode), st)


def problem(path: str | os.PathLike[str], want: Want = "file") -> str:
    """Why ``path`` is not a ``want`` ("file", "folder" or "any": either) that can be used, or "" when it is.
    Never raises, never opens anything."""
    try:
        require(path, want)
    except PathError as e:
        return e.reason
    return ""


def require(path: str | os.PathLike[str], want: Want = "file") -> Look:
    """:func:`look`, refusing anything but a ``want`` ("file", "folder", "any": a file or a folder).

    Raises:
        PathError: nothing is there ("does not exist"), or something else is ("is a named pipe (FIFO), not a
            file", "is a file, not a folder").
    """
    text = _text(path)
    found = look(text)
    if found.kind == "missing":
        raise PathError(text, missing_reason(text), errno.ENOENT)
    if want == "any" and found.kind in ("file", "folder") or found.kind == want:
        return found
    wanted = "a file or a folder" if want == "any" else KIND_WORDS[want]
    code = errno.EISDIR if found.kind == "folder" else errno.ENOTDIR if want == "folder" else errno.EINVAL
    raise PathError(text, f"is {KIND_WORDS[found.kind]}, not {wanted}", code, found.kind)


def missing_reason(text: str) -> str:
    """"does not exist", and why when the path says it: a ``~user`` with no such user."""
    if text.startswith("~") and expand(text) == Path(text):
        user = text[1:].split("/", 1)[0].split("\\", 1)[0]
        if user:
            return f"does not exist (there is no user “{printable(user)}” for “~{printable(user)}”)"
    return "does not exist"


@contextlib.contextmanager
def open_file(path: str | os.PathLike[str], *, limit: int | None = None, what: str = "a file of this kind") -> Iterator[BinaryIO]:
    """``path`` opened for reading in binary, when it is a regular file of at most ``limit`` bytes (``stat``'s size;
    the readers below also stop reading at the limit). ``what`` names the file in a size refusal ("a config file").

    Raises:
        PathError: not a regular file, too large, or it cannot be opened (the reason says why).
    """
    text = _text(path)
    found = require(text, "file")
    _check_size(text, found.size, limit, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(expand(text), flags)
    except OSError as e:
        raise PathError(text, _os_reason(text, e), e.errno or 0, "file") from None
    try:
        st = os.fstat(fd)  # what was opened, not what was looked at: a pipe swapped in meanwhile is caught here
        kind = kind_of(st.st_mode)
        if kind != "file":
            raise PathError(text, f"is {KIND_WORDS[kind]}, not a file", errno.EINVAL, kind)
        _check_size(text, st.st_size, limit, what)
        _blocking(fd)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_bytes(path: str | os.PathLike[str], *, limit: int, what: str = "a file of this kind") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (see :func:`open_file`); never more are read."""
    text = _text(path)
    with open_file(text, limit=limit, what=what) as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:  # /proc/self/mem: EIO
            raise PathError(text, _os_reason(text, e), e.errno or 0, "file") from None
    if len(data) > limit:  # a file whose stat says less than it holds (/proc)
        raise PathError(text, f"is larger than {what} can be ({format_bytes(limit)})", errno.EFBIG, "file")
    return data


def read_text(path: str | os.PathLike[str], *, limit: int, what: str = "a file of this kind", encoding: str = "utf-8") -> str:
    """The text of a regular file (see :func:`read_bytes`); a UTF-8 byte-order mark at the start is dropped.

    Raises:
        PathError: as :func:`read_bytes`, or "is not UTF-8 text" (not ``encoding`` text).
    """
    text = _text(path)
    data = read_bytes(text, limit=limit, what=what)
    try:
        return data.decode(encoding).removeprefix("\ufeff")
    except UnicodeDecodeError:
        label = "UTF-8" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
        raise PathError(text, f"is not {label} text", errno.EILSEQ, "file") from None


def read_json(path: str | os.PathLike[str], *, limit: int, what: str = "a JSON file") -> Any:
    """The JSON of a regular file (see :func:`read_text`).

    Raises:
        PathError: as :func:`read_text`, or "is not valid JSON (…)".
    """
    text = _text(path)
    try:
        return json.loads(read_text(text, limit=limit, what=what))
    except (ValueError, RecursionError) as e:
        raise PathError(text, f"is not valid JSON ({printable(str(e))[:120]})", errno.EILSEQ, "file") from None


def first_special_file(folder: str | os.PathLike[str], *, limit: int = 100_000) -> Path | None:
    """The first entry under ``folder`` (looked at to ``limit`` entries) that is neither a file nor a folder (a
    named pipe, a device, a socket, a link to one): a library handed the folder would block on it or read it
    without end. None when there is none."""
    seen = 0
    stack = [expand(_text(folder))]
    while stack and seen < limit:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                st = os.stat(entry.path)  # links followed: a link to /dev/zero is a device
            except OSError:
                continue
            kind = kind_of(st.st_mode)
            if kind == "folder":
                if not entry.is_symlink():
                    stack.append(Path(entry.path))
            elif kind != "file":
                return Path(entry.path)
    return None


def _text(path: str | os.PathLike[str]) -> str:
    return os.fspath(path)


def _check_size(text: str, size: int, limit: int | None, what: str) -> None:
    if limit is not None and size > limit:
        raise PathError(text, f"is {format_bytes(size)}, larger than {what} can be ({format_bytes(limit)})", errno.EFBIG,
                        "file")


def _blocking(fd: int) -> None:
    """Back to blocking reads once the file is known to be regular (where the platform has the flag)."""
    with contextlib.suppress(ImportError, OSError):
        import fcntl

        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)


def _os_reason(text: str, e: OSError) -> str:
    """An ``OSError`` of looking at or opening ``text`` as the end of a sentence about it."""
    code = e.errno or 0
    if code == errno.ENAMETOOLONG:
        if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in Path(text).parts):
            return f"has a name longer than {NAME_MAX} bytes, which no file system allows"
        return "is longer than the file system allows"
    if code == errno.ELOOP:
        return "is a symbolic link that leads back to itself (a loop)"
    if code in (errno.EACCES, errno.EPERM):
        return "cannot be read (no permission)"
    if code == errno.EISDIR:
        return "is a folder, not a file"
    if code == errno.EILSEQ:
        return "has a name the file system cannot store"
    return f"cannot be read ({e.strerror or type(e).__name__})"
