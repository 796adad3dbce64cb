"""Exception text as the user reads it: one line, never empty."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first non-empty line of ``str(error)``; the exception's type name when its message is empty.

    ``str(e).splitlines()[0]`` raises ``IndexError`` on an exception without a message (``OSError()``,
    ``KeyError()`` of an empty key, a bare ``RuntimeError``): every message built from an exception goes
    through here instead.
    """
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__
