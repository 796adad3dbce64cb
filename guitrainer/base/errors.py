"""Exception text as the user reads it: one line, never empty, never a crash of its own."""

from __future__ import annotations


def first_line(error: BaseException | str, limit: int | None = None) -> str:
    """The first non-empty line of an exception's text (or of a message), at most ``limit`` characters.

    An exception without a message (``OSError()``, a bare ``RuntimeError``) gives its type's name, where
    ``str(e).splitlines()[0]`` would raise ``IndexError`` and hide the real error; an empty message gives "".
    """
    text = str(error)
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if not line and isinstance(error, BaseException):
        line = type(error).__name__
    if limit is not None and len(line) > limit:
        line = line[: max(limit - 1, 0)].rstrip() + "…"
    return line
