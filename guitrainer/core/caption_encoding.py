"""Caption files in legacy encodings: tell the encoding from the bytes, write edits back in it.

Many caption sets come from Windows tools that wrote Windows-1252 / Latin-1, or UTF-16 with a BOM.
Reading those as UTF-8 with replacement characters and writing them back destroys every accent, so
the caption editor reads with :func:`detect` and writes with :func:`encode` in the file's own encoding
(BOM kept); when a typed character cannot be stored in it, the editor asks before converting to UTF-8.
Nothing here ever produces U+FFFD: every byte sequence decodes to the characters it stands for.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

_BOMS = (  # longest first: a UTF-32 LE BOM starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
LABELS = {
    "utf-8": "UTF-8",
    "utf-16-le": "UTF-16 LE",
    "utf-16-be": "UTF-16 BE",
    "utf-32-le": "UTF-32 LE",
    "utf-32-be": "UTF-32 BE",
    "cp1252": "Windows-1252",
    "latin-1": "Latin-1",
}


@dataclass(frozen=True)
class Encoding:
    """How a caption file is stored: a codec name and the BOM it starts with (b"" for none)."""

    codec: str = "utf-8"
    bom: bytes = b""

    @property
    def is_utf8(self) -> bool:
        return self.codec == "utf-8"

    @property
    def is_plain_utf8(self) -> bool:
        """UTF-8 without a BOM: what the app writes for new captions."""
        return self.codec == "utf-8" and not self.bom

    def label(self) -> str:
        return LABELS.get(self.codec, self.codec) + (" with BOM" if self.bom else "")


UTF8 = Encoding()


def _utf16_without_bom(raw: bytes) -> str | None:
    """"utf-16-le" / "utf-16-be" when the bytes look like BOM-less UTF-16 text (many NULs on one side)."""
    if len(raw) < 4 or len(raw) % 2:
        return None
    half = len(raw) // 2
    odd_nuls = raw[1::2].count(0)
    even_nuls = raw[0::2].count(0)
    for codec, nuls in (("utf-16-le", odd_nuls), ("utf-16-be", even_nuls)):
        if nuls >= 0.4 * half:
            try:
                raw.decode(codec)
            except UnicodeDecodeError:
                continue
            return codec
    return None


def detect(raw: bytes) -> tuple[str, Encoding]:
    """The text of a caption file and its encoding: BOMs first, then UTF-8, BOM-less UTF-16,
    Windows-1252, and Latin-1 (which decodes any bytes, so no replacement character is ever made)."""
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            try:
                return raw[len(bom) :].decode(codec), Encoding(codec, bom)
            except UnicodeDecodeError:
                break
    try:
        return raw.decode("utf-8"), UTF8
    except UnicodeDecodeError:
        pass
    codec = _utf16_without_bom(raw)
    if codec is not None:
        return raw.decode(codec), Encoding(codec)
    try:
        return raw.decode("cp1252"), Encoding("cp1252")
    except UnicodeDecodeError:  # 0x81, 0x8D, 0x8F, 0x90, 0x9D are undefined in Windows-1252
        return raw.decode("latin-1"), Encoding("latin-1")


def encode(text: str, encoding: Encoding) -> bytes:
    """``text`` in ``encoding`` (its BOM first). Raises UnicodeEncodeError when a character does not fit."""
    return encoding.bom + text.encode(encoding.codec)


def unencodable(text: str, encoding: Encoding) -> list[str]:
    """The distinct characters of ``text`` that ``encoding`` cannot store, in order of appearance."""
    out: list[str] = []
    for ch in text:
        if ch in out:
            continue
        try:
            ch.encode(encoding.codec)
        except UnicodeEncodeError:
            out.append(ch)
    return out
