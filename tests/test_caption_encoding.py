"""core.caption_encoding: legacy caption encodings read right and written back byte for byte."""

from __future__ import annotations

import codecs

import pytest

from guitrainer.core.caption_encoding import UTF8, Encoding, detect, encode, unencodable

TEXT = "café, naïve, Ærøskøbing, señorita"


@pytest.mark.parametrize(
    "raw, codec, bom",
    [
        (TEXT.encode("latin-1"), "cp1252", b""),  # Latin-1 letters are the same bytes in Windows-1252
        ("“smart quotes” – €5".encode("cp1252"), "cp1252", b""),
        (codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"), "utf-16-le", codecs.BOM_UTF16_LE),
        (codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"), "utf-16-be", codecs.BOM_UTF16_BE),
        (codecs.BOM_UTF8 + TEXT.encode("utf-8"), "utf-8", codecs.BOM_UTF8),
        (TEXT.encode("utf-8"), "utf-8", b""),
        (TEXT.encode("utf-16-le"), "utf-16-le", b""),  # BOM-less UTF-16 from some Windows tools
        (b"caf\xe9 \x81", "latin-1", b""),  # 0x81 is not Windows-1252: Latin-1, never U+FFFD
    ],
)
def test_detect_reads_the_text_and_encode_gives_the_same_bytes(raw, codec, bom):
    text, enc = detect(raw)
    assert enc == Encoding(codec, bom)
    assert "\ufffd" not in text
    assert encode(text, enc) == raw  # unchanged text: the file comes back byte for byte


def test_an_edit_keeps_every_character_not_changed():
    raw = TEXT.encode("cp1252")
    text, enc = detect(raw)
    edited = text.replace("naïve", "naïve, blue")
    assert encode(edited, enc) == edited.encode("cp1252") and "café" in encode(edited, enc).decode("cp1252")


def test_characters_that_do_not_fit_are_named():
    _, enc = detect("café".encode("latin-1"))
    assert unencodable("café 日本 日", enc) == ["日", "本"]
    with pytest.raises(UnicodeEncodeError):
        encode("日本", enc)
    assert unencodable("日本", UTF8) == [] and UTF8.is_plain_utf8 and enc.label() == "Windows-1252"
