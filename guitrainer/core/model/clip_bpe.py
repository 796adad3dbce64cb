"""CLIP's byte-level BPE alphabet (as in GPT-2): shared by the demo tokenizer and the tokenizer generator."""

from __future__ import annotations


def bytes_to_unicode() -> dict[int, str]:
    """Every byte maps to one printable unicode character (printable Latin-1 bytes map to themselves)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table
