"""Byte sizes as people read them: one formatter for the whole app."""

from __future__ import annotations

KiB, MiB, GiB = 1024, 1024**2, 1024**3


def format_bytes(n: float | None) -> str:
    """``12884901888`` -> ``"12.0 GB"``; ``3 << 20`` -> ``"3 MB"``; ``5000`` -> ``"5 KB"``; None -> ``"unknown"``.

    Binary units labelled GB / MB / KB, as drivers, nvidia-smi and the operating systems' file managers show
    them; one decimal from a gigabyte up, whole megabytes below, whole kilobytes under a megabyte (at least
    1 KB for anything above nothing, so a few bytes never read "0 MB"); 0 is "0 MB".
    """
    if n is None:
        return "unknown"
    if abs(n) >= GiB:
        return f"{n / GiB:.1f} GB"
    if abs(n) >= MiB or n == 0:
        return f"{n / MiB:.0f} MB"
    kb = max(1, round(abs(n) / KiB))
    return f"{'-' if n < 0 else ''}{kb} KB"
