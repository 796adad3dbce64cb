"""base.units.format_bytes: the one byte formatter, checked against hand-worked values."""

from __future__ import annotations

from guitrainer.base.units import format_bytes


def test_gigabytes_one_decimal_megabytes_whole_kilobytes_below():
    assert format_bytes(12 * 1024**3) == "12.0 GB"  # 12884901888 B
    assert format_bytes(int(1.25 * 1024**3)) == "1.2 GB"  # 1.25 rounds half to even
    assert format_bytes(3 * 1024**2) == "3 MB"
    assert format_bytes(1024**2) == "1 MB"  # exactly a megabyte is MB, not 1024 KB
    assert format_bytes(5000) == "5 KB"  # 5000 / 1024 = 4.88
    assert format_bytes(1) == "1 KB"  # a few bytes never read "0 MB"
    assert format_bytes(0) == "0 MB"
    assert format_bytes(-2048) == "-2 KB"
    assert format_bytes(None) == "unknown"


def test_no_message_in_the_app_says_gib_or_mib():
    """Users read GB / MB everywhere (drivers, nvidia-smi, file managers): no f-string in the package formats a
    size as GiB or MiB by hand."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "guitrainer"
    hand_rolled = [
        f"{p.relative_to(package)}:{i}"
        for p in package.rglob("*.py")
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"f\"[^\"]*\{[^}]*/ ?(2 ?\*\* ?(20|30)|1024)[^}]*\} (GiB|MiB|GB|MB)", line)
    ]
    assert hand_rolled == []
