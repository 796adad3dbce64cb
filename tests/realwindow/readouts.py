"""Reading what the app shows: the sizes written in a tooltip or status line ("1.6 GB", "12 MB")."""

from __future__ import annotations

import re

UNITS = {"B": 1, "KB": 2**10, "KIB": 2**10, "MB": 2**20, "MIB": 2**20, "GB": 2**30, "GIB": 2**30}
SIZE = re.compile(r"(\d+(?:[.,]\d+)?)\s*(GiB|MiB|KiB|GB|MB|KB|B)\b", re.IGNORECASE)


def sizes_in(text: str) -> list[tuple[float, float]]:
    """Each size written in ``text`` as (bytes, rounding step in bytes): "1.5 GB" -> (1.5 GiB, 0.1 GiB)."""
    out = []
    for number, unit in SIZE.findall(text):
        decimals = len(number.replace(",", ".").partition(".")[2])
        scale = UNITS[unit.upper()]
        out.append((float(number.replace(",", ".")) * scale, scale * 10**-decimals))
    return out


def shows_size(text: str, nbytes: int) -> bool:
    """``text`` states ``nbytes`` (to its own rounding, or within 2 %)."""
    return any(abs(value - nbytes) <= step / 2 + 0.02 * nbytes for value, step in sizes_in(text))
