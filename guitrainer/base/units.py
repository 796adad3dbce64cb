"""Byte sizes as people read them: one formatter for the whole app."""

from __future__ import annotations

KiB, MiB, GiB = 1024, 1024**2, 1024**3


def format_bytes(n: float | None) -> str:
    """``12884901888`` -> ``"12.0 GB"``; ``3 << 20`` -> ``"3 MB"``; None -> ``"unknown"``.

    Binary units labelled GB / MB, as drivers, nvidia-smi and the operating systems' file managers show
    them; one decimal from a gigabyte up, whole megabytes below.
    """
    if n is None:
        return "unknown"
    if abs(n) >= GiB:
        return f"{n / GiB:.1f} GB"
    return f"{n / MiB:.0f} MB"
