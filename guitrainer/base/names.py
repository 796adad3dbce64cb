"""File names made from user text that every system can write, and user text shown safely in messages.

One rule for every platform (users share presets): a name that Windows, macOS or Linux would refuse, change or
show misleadingly is refused by the config and never written by the app. :func:`name_problem` says what is
wrong with a name, :func:`safe_name` gives the name that is written instead, :func:`printable` shows any text
(a path, a name) on one line with its invisible characters spelled out.
"""

from __future__ import annotations

import re
import unicodedata

#: characters Windows refuses in a file name (``/`` and ``\\`` separate folders everywhere; ``:`` is also
#: macOS Finder's separator)
WINDOWS_FORBIDDEN = '<>:"/\\|?*'
#: Unicode categories no file name should hold: control characters (newline, tab, bell), format characters
#: (right-to-left override, zero-width space: they make a name read as another), line and paragraph separators,
#: lone surrogates (not encodable as UTF-8)
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
#: Windows' device names: a file named so (in any case, with any extension: ``nul.txt``) opens the device
_DEVICE = re.compile(r"^(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|COM[0-9¹²³]|LPT[0-9¹²³])$", re.IGNORECASE)
#: a file or folder name's limit on the common file systems (ext4, NTFS, APFS), in bytes of UTF-8
NAME_MAX = 255


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) in _INVISIBLE


def _code(ch: str) -> str:
    """``"\\n"`` -> ``"a newline (U+000A)"``: an invisible character as people can find it."""
    words = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x07": "a bell character", "\x00": "a NUL character",
             "\u202e": "a right-to-left override", "\u202d": "a left-to-right override", "\u200b": "a zero-width space",
             "\ufeff": "a byte-order mark"}
    name = words.get(ch) or f"the invisible character {unicodedata.name(ch, 'without a name').lower()}"
    return f"{name} (U+{ord(ch):04X})"


def printable(text: str) -> str:
    """``text`` on one line for a message: each control or format character spelled as an escape (``\\n``,
    ``\\x07``, ``\\u202e``), so a newline in a path cannot break the message and an override cannot turn it round."""
    if not any(_invisible(c) for c in text):
        return text
    return "".join(c.encode("unicode_escape", "backslashreplace").decode("ascii") if _invisible(c) else c for c in text)


def device_name(name: str) -> str:
    """The Windows device ``name`` would open ("CON", "NUL", "COM1" ...), or "": the part before the first dot,
    trailing spaces dropped as Windows drops them (``nul.txt``, ``Con .tar.gz`` and ``aux`` are all devices)."""
    stem = name.split(".", 1)[0].rstrip(" ")
    return stem.upper() if _DEVICE.match(stem) else ""


def name_problem(name: str) -> str:
    """Why ``name`` cannot be a file name on every system ("" when it can): what it holds, in plain words.

    Refused: empty names, ``.`` and ``..``; control and format characters (newline, tab, bell, right-to-left
    override, zero-width space); ``< > : " / \\ | ? *``; a trailing dot or space (Windows drops it, so the file
    would get another name there); Windows' device names (CON, PRN, AUX, NUL, COM0-9, LPT0-9), in any case and
    with any extension; more than :data:`NAME_MAX` bytes of UTF-8.
    """
    if not name or not name.strip():
        return "is empty"
    if name in (".", ".."):
        return f"is {name!r}, which names a folder, not a file"
    bad = next((c for c in name if _invisible(c)), None)
    if bad is not None:
        return f"holds {_code(bad)}, which file names must not hold"
    forbidden = "".join(dict.fromkeys(c for c in name if c in WINDOWS_FORBIDDEN))
    if forbidden:
        shown = " ".join(forbidden)
        return f"holds {shown}, which Windows does not allow in a file name ({' '.join(WINDOWS_FORBIDDEN)})"
    if name.endswith((".", " ")):
        which = "dot" if name.endswith(".") else "space"
        return f"ends with a {which}, which Windows drops: the file would be named differently there"
    device = device_name(name)
    if device:
        return (f"is the Windows device name {device} (CON, PRN, AUX, NUL, COM1-9, LPT1-9, with any extension): "
                "no file on Windows can be called that")
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        return f"is {size} bytes long; file systems allow at most {NAME_MAX}"
    return ""


def safe_name(text: str, fallback: str = "file", *, max_bytes: int = NAME_MAX) -> str:
    """``text`` as a file name every system can write (:func:`name_problem` finds nothing in it): invisible and
    forbidden characters become ``_``, trailing dots and spaces go, a device name gets a leading ``_``
    (``con`` -> ``_con``), and it is cut to ``max_bytes`` bytes of UTF-8. ``fallback`` when nothing is left.
    A name that is already safe comes back unchanged."""
    name = "".join("_" if _invisible(c) or c in WINDOWS_FORBIDDEN else c for c in text).strip()
    name = _cut(name, max_bytes).rstrip(". ")
    if name in ("", ".", ".."):
        name = fallback
    if device_name(name):
        name = _cut("_" + name, max_bytes).rstrip(". ")
    return name


def _cut(name: str, max_bytes: int) -> str:
    """``name`` cut to at most ``max_bytes`` bytes of UTF-8, never inside a character."""
    raw = name.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return name
    return raw[:max_bytes].decode("utf-8", "ignore")
