"""Issue 15 #2: captions in legacy encodings are read correctly and an edit keeps every character the user
did not change, byte for byte, in the file's own encoding; nothing writes replacement characters."""

from __future__ import annotations

import pytest

from guitrainer.core.dataset.captions import CaptionEncodingError, read_caption, save_caption

ORIGINAL = "café, naïve, crème brûlée, 1girl"


@pytest.mark.parametrize(
    ("encoding", "raw"),
    [
        ("latin-1", "café, naïve, crème brûlée, 1girl".encode("latin-1")),  # read as cp1252: same bytes above 0x9F
        ("cp1252", "“café”, naïve – crème brûlée, 1girl €".encode("cp1252")),  # 0x80-0x9F: quotes, dash, euro
        ("utf-16-le", b"\xff\xfe" + ORIGINAL.encode("utf-16-le")),
        ("utf-16-be", b"\xfe\xff" + ORIGINAL.encode("utf-16-be")),
        ("utf-8-sig", b"\xef\xbb\xbf" + ORIGINAL.encode("utf-8")),
    ],
)
def test_an_edit_keeps_every_unchanged_character_in_the_files_encoding(tmp_path, encoding, raw):
    path = tmp_path / "a.txt"
    path.write_bytes(raw)
    before = read_caption(path)
    assert "\ufffd" not in before.text and "\x00" not in before.text
    expected_text = raw.decode({"latin-1": "latin-1", "cp1252": "cp1252"}.get(encoding, "utf-8"), errors="strict") \
        if encoding in ("latin-1", "cp1252", "utf-8-sig") else raw[2:].decode(encoding)
    assert before.text == expected_text.removeprefix("\ufeff")
    edited = before.text + ", smile"
    save_caption(path, edited)
    after = path.read_bytes()
    assert after.startswith(raw)  # every byte the user did not change is where it was
    assert read_caption(path).text == edited
    assert read_caption(path).encoding == before.encoding


def test_a_character_the_encoding_cannot_store_is_reported_and_nothing_is_written(tmp_path):
    path = tmp_path / "a.txt"
    raw = "café".encode("cp1252")
    path.write_bytes(raw)
    with pytest.raises(CaptionEncodingError) as ei:
        save_caption(path, "café, 猫")
    assert ei.value.characters == "猫" and ei.value.encoding == "cp1252"
    assert path.read_bytes() == raw
    save_caption(path, "café, 猫", encoding="utf-8")  # after the user agreed to convert
    assert path.read_bytes() == "café, 猫".encode()


def test_replacement_characters_are_never_written(tmp_path):
    path = tmp_path / "a.txt"
    with pytest.raises(CaptionEncodingError):
        save_caption(path, "caf\ufffd")
    assert not path.exists()


def test_utf16_without_a_mark_and_plain_utf8(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("red hair".encode("utf-16-le"))
    assert read_caption(path).text == "red hair"
    path.write_bytes("日本語".encode())
    c = read_caption(path)
    assert c.text == "日本語" and c.was_utf8 and c.encoding == "utf-8"
