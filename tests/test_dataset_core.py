"""core.dataset and core.buckets: scanning, image flags, caption I/O, tag operations, summary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.buckets import assign_bucket, bucket_counts, make_buckets
from guitrainer.core.dataset.scan import Flag


def make_image(path: Path, size=(640, 640), mode="RGB", fmt: str | None = None, **save) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    color = {"RGB": (200, 80, 40), "RGBA": (200, 80, 40, 128), "CMYK": (0, 128, 255, 0), "L": 90, "I;16": 40000}
    Image.new(mode, size, color.get(mode, 0)).save(path, format=fmt, **save)
    return path


def test_scan_accepts_images_rejects_others_and_reads_repeats(tmp_path):
    root = tmp_path / "10_mychar"
    make_image(root / "a.png")
    make_image(root / "b.JPG", fmt="JPEG")
    make_image(root / "c.webp")
    make_image(root / "d.bmp")
    (root / "a.txt").write_text("mychar, smiling", encoding="utf-8")
    (root / "notes.pdf").write_bytes(b"%PDF-1.4")
    (root / "README").write_text("hi")
    (root / ".DS_Store").write_bytes(b"\0")
    make_image(root / "sub" / "e.png")
    make_image(root / "3_extra" / "f.png")
    loose = make_image(tmp_path / "loose.jpeg", fmt="JPEG")

    res = ds.scan([root, loose, root / "a.png", tmp_path / "missing.png"])
    names = sorted(it.name for it in res.items)
    assert names == ["a.png", "b.JPG", "c.webp", "d.bmp", "e.png", "f.png", "loose.jpeg"]
    by = {it.name: it for it in res.items}
    assert by["a.png"].repeats == 10 and by["a.png"].caption == "mychar, smiling" and by["a.png"].has_caption
    assert by["e.png"].repeats == 10 and by["e.png"].folder == root / "sub"  # nearest N_ folder above
    assert by["f.png"].repeats == 3
    assert by["loose.jpeg"].repeats == 1 and not by["loose.jpeg"].has_caption
    rejected = {p.name: why for p, why in res.rejected}
    assert set(rejected) == {"notes.pdf", "README", "missing.png"}
    assert ".pdf" in rejected["notes.pdf"]
    assert [p.name for p, _ in res.duplicates] == ["a.png"]


def test_hard_link_is_a_duplicate_and_known_files_are_skipped(tmp_path):
    a = make_image(tmp_path / "x" / "a.png")
    os.link(a, tmp_path / "x" / "a_link.png")
    res = ds.scan([tmp_path / "x"])
    assert len(res.items) == 1 and len(res.duplicates) == 1
    again = ds.scan([a], known={ds.file_key(a)})
    assert not again.items and again.duplicates[0][1] == "already in the dataset"


def test_scan_folders_is_not_recursive_and_uses_configured_repeats(tmp_path):
    make_image(tmp_path / "5_a" / "one.png")
    make_image(tmp_path / "5_a" / "deeper" / "two.png")
    res = ds.scan_folders([(tmp_path / "5_a", 7)])
    assert [(it.name, it.repeats) for it in res.items] == [("one.png", 7)]


def test_flags(tmp_path):
    good = make_image(tmp_path / "good.png", (640, 640))
    assert ds.inspect_image(good, 512) == set()

    jpg = make_image(tmp_path / "trunc.jpg", (700, 700), fmt="JPEG", quality=95)
    data = jpg.read_bytes()
    jpg.write_bytes(data[: len(data) // 2])
    assert Flag.TRUNCATED in ds.inspect_image(jpg, 512)

    png16 = make_image(tmp_path / "deep.png", (600, 600), mode="I;16")
    assert Flag.HIGH_BIT_DEPTH in ds.inspect_image(png16, 512)

    cmyk = make_image(tmp_path / "cmyk.jpg", (600, 600), mode="CMYK", fmt="JPEG")
    assert Flag.CMYK in ds.inspect_image(cmyk, 512)

    rot = tmp_path / "rot.jpg"
    im = Image.new("RGB", (800, 600), (10, 20, 30))
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(rot, exif=exif)
    info = ds.probe_image(rot, 512)
    assert Flag.EXIF_ROTATED in info.flags and (info.width, info.height) == (600, 800)

    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    assert ds.inspect_image(empty) == {Flag.EMPTY}

    junk = tmp_path / "junk.png"
    junk.write_bytes(b"this is not a png at all")
    assert ds.inspect_image(junk) == {Flag.UNREADABLE}

    assert Flag.SMALL in ds.inspect_image(make_image(tmp_path / "small.png", (300, 300)), 512)
    assert Flag.ALPHA in ds.inspect_image(make_image(tmp_path / "alpha.png", mode="RGBA"), 512)
    assert Flag.PALETTE in ds.inspect_image(make_image(tmp_path / "pal.png", mode="P"), 512)
    big = tmp_path / "big.png"
    Image.new("L", (4100, 16)).save(big)
    assert Flag.LARGE in ds.inspect_image(big, 8)


def test_caption_io_atomic_and_non_utf8(tmp_path, monkeypatch):
    cap = tmp_path / "a.txt"
    ds.write_caption(cap, "café, 1girl")
    assert ds.read_caption(cap) == ds.CaptionText("café, 1girl", True, encoding="utf-8")
    assert ds.read_caption(tmp_path / "none.txt").exists is False

    latin = tmp_path / "latin.txt"
    latin.write_bytes("café, blue".encode("latin-1"))
    c = ds.read_caption(latin)
    assert not c.was_utf8 and c.text == "café, blue" and c.encoding == "cp1252"

    # A write that dies half-way leaves the old caption in place and no stray file.
    import guitrainer.base.fileio as fileio

    real_write = Path.write_bytes

    def dying_write(self, data):
        real_write(self, data[:3])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.Path, "write_bytes", dying_write)
    with pytest.raises(OSError):
        ds.write_caption(cap, "something else entirely")
    monkeypatch.undo()
    assert cap.read_text(encoding="utf-8") == "café, 1girl"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "latin.txt"]


def test_tag_functions():
    t = "1girl,  smile , blue hair, smile"
    assert ds.split_tags(t) == ["1girl", "smile", "blue hair", "smile"]
    assert ds.add_trigger(t, "mychar") == "mychar, 1girl, smile, blue hair, smile"
    assert ds.add_trigger("mychar, x", "mychar") == "mychar, x"
    assert ds.add_trigger("x, mychar", "mychar") == "mychar, x"
    assert ds.remove_tag(t, "smile") == "1girl, blue hair"
    assert ds.remove_tag(t, "absent") == t  # unchanged text stays byte for byte
    assert ds.rename_tag(t, "blue hair", "blue_hair") == "1girl, smile, blue_hair, smile"
    assert ds.sort_tags("c, a, b") == "a, b, c"
    assert ds.sort_tags("trig, c, a", keep_first=1) == "trig, a, c"
    assert ds.dedupe_tags(t) == "1girl, smile, blue hair"
    assert ds.find_replace("red hair, red eyes", "red", "green") == "green hair, green eyes"
    assert ds.find_replace("hair1, hair22", r"hair\d+", "h", regex=True) == "h, h"
    assert ds.tag_frequency(["a, b", "b, c", "b, b"]) == [("b", 3), ("a", 1), ("c", 1)]


def test_bulk_find_replace_and_undo_restore_bytes(tmp_path):
    folder = tmp_path / "set"
    raw = {
        "a": b"red hair, smile\r\n",  # CRLF kept
        "b": "\ufeffred dress, caf\u00e9".encode(),  # BOM kept
        "c": b"blue sky",  # unchanged by the operation
        "d": "red, latin \xe9".encode("latin-1"),  # not UTF-8: skipped
    }
    for stem, data in raw.items():
        make_image(folder / f"{stem}.png", (64, 64))
        (folder / f"{stem}.txt").write_bytes(data)
    make_image(folder / "e.png", (64, 64))  # no caption
    items = ds.scan([folder]).items
    edit = ds.apply_tag_operation(items, lambda s: ds.find_replace(s, "red", "green"), "replace")
    assert edit.count == 2 and edit.skipped_not_utf8 == 1
    assert (folder / "a.txt").read_bytes() == b"green hair, smile\r\n"
    assert next(it for it in items if it.name == "a.png").caption.startswith("green")
    trig = ds.apply_tag_operation(items, lambda s: ds.add_trigger(s, "zz"), "trigger")
    assert trig.count == 4 and (folder / "e.txt").read_text() == "zz"
    trig.revert()
    edit.revert()
    for stem, data in raw.items():
        assert (folder / f"{stem}.txt").read_bytes() == data
    assert not (folder / "e.txt").exists()


HAND_BUCKETS_512 = [
    (256, 1024), (256, 960), (256, 896), (256, 832), (320, 768), (320, 704), (384, 640), (448, 576),
    (512, 512),
    (576, 448), (640, 384), (704, 320), (768, 320), (832, 256), (896, 256), (960, 256), (1024, 256),
]  # fmt: skip


def test_buckets_match_hand_computed_table():
    # Area budget (512/64)² = 64 cells of 64×64: width w cells -> height min(16, 64 // w) cells.
    assert make_buckets(512, 256, 1024, 64) == HAND_BUCKETS_512
    sizes = {
        (1024, 1024): (512, 512),
        (1024, 768): (576, 448),  # 4:3 -> 9:7 (ln 0.288 vs 0.251)
        (768, 1024): (448, 576),
        (1920, 1080): (640, 384),  # 16:9 -> 5:3
        (600, 1800): (256, 832),  # 1:3 -> 4:13
        (5000, 1000): (1024, 256),
    }
    for (w, h), bucket in sizes.items():
        assert assign_bucket(w, h, HAND_BUCKETS_512) == bucket, (w, h)
    counts = bucket_counts([(1024, 1024), (1000, 1000), (1024, 768), (1920, 1080)], HAND_BUCKETS_512)
    assert counts == {(512, 512): 2, (576, 448): 1, (640, 384): 1}
    for b in make_buckets(1024, 512, 2048, 64):
        assert b[0] % 64 == 0 and b[1] % 64 == 0 and b[0] * b[1] <= 1024 * 1024


def test_summary_counts_buckets_and_steps(tmp_path):
    make_image(tmp_path / "4_a" / "sq1.png", (1024, 1024))
    make_image(tmp_path / "4_a" / "sq2.png", (1000, 1000))
    make_image(tmp_path / "4_a" / "wide.png", (1024, 768))
    (tmp_path / "4_a" / "sq1.txt").write_text("x")
    make_image(tmp_path / "1_b" / "tall.png", (768, 1024))
    make_image(tmp_path / "1_b" / "small.png", (200, 300))
    items = ds.scan([tmp_path]).items
    s = ds.summarize(items, 512, batch_size=2)
    assert (s.image_count, s.captioned_count, s.flagged_count) == (5, 1, 1)
    assert s.buckets == {(512, 512): 2, (576, 448): 1, (448, 576): 1, (384, 640): 1}
    # square: 2 images × 4 repeats = 8 -> 4 batches; wide: 4 -> 2; tall: 1 -> 1; small: 1 -> 1
    assert s.steps_per_epoch == 8
    assert s.resolution_histogram == {"< 256": 1, "768–1023": 3, "1024–1535": 1}
    flat = ds.summarize(items, 512, bucketing=False, batch_size=2)
    assert flat.steps_per_epoch == 7  # 4*3 + 1 + 1 = 14 -> 7
