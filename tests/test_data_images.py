"""Images at Pillow's edges: decompression bombs, very large images, animated GIFs; each said once, in words."""

from __future__ import annotations

import logging
import os
import struct
import warnings
import zlib
from pathlib import Path

from PIL import Image

from guitrainer.config import DatasetConfig, DatasetFolder
from guitrainer.engine import data


def _cfg(folder: Path) -> DatasetConfig:
    return DatasetConfig(folders=[DatasetFolder.from_value(str(folder))], resolution=64, bucketing=False)


def _png_claiming(path: Path, width: int, height: int) -> None:
    """A small PNG file whose header claims ``width`` x ``height`` pixels (what a decompression bomb looks like
    to Pillow's check, which reads only the header)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _good(folder: Path, name: str = "good.png", size: int = 96) -> None:
    Image.new("RGB", (size, size), (200, 30, 30)).save(folder / name)
    (folder / f"{Path(name).stem}.txt").write_text("a red square", encoding="utf-8")


def test_a_decompression_bomb_is_skipped_with_the_limit_named(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    _good(folder)
    _png_claiming(folder / "bomb.png", 20000, 20000)  # 400 Mpx: over twice Pillow's 89 Mpx warning limit
    said: list[str] = []
    items = data.collect_items(_cfg(folder), warn=said.append)
    assert [i.image.name for i in items] == ["good.png"]
    limit = 2 * Image.MAX_IMAGE_PIXELS
    assert len(said) == 1 and "bomb.png" in said[0] and f"{limit:,}" in said[0] and "decompression-bomb" in said[0]


def test_a_large_image_under_the_limit_is_used_without_pillows_raw_warning(tmp_path, monkeypatch):
    folder = tmp_path / "imgs"
    folder.mkdir()
    _good(folder, "big.png", 96)  # 9,216 px
    _good(folder, "small.png", 64)  # 4,096 px
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 5000)  # so 96x96 is "large", still under 2 x 5000
    said: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = data.collect_items(_cfg(folder), warn=said.append)
        ds = data.TrainDataset(items, _cfg(folder))
        ds.pixels(0, False)  # decoding for training: no raw warning either
    assert sorted(i.image.name for i in items) == ["big.png", "small.png"]
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]
    assert len(said) == 1 and "big.png" in said[0] and "small.png" not in said[0] and "megapixels" in said[0]


def test_an_animated_gif_is_named_not_dropped_silently(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    _good(folder)
    frames = [Image.new("RGB", (64, 64), c) for c in ((255, 0, 0), (0, 0, 255))]
    frames[0].save(folder / "blink.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    (folder / "blink.txt").write_text("a blinking square", encoding="utf-8")
    said: list[str] = []
    items = data.collect_items(_cfg(folder), warn=said.append)
    assert [i.image.name for i in items] == ["good.png"]  # GIF is not a training format here
    assert len(said) == 1 and "blink.gif (animated)" in said[0] and "left out" in said[0]


def test_an_animated_png_trains_its_first_frame_and_says_so(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    frames = [Image.new("RGB", (64, 64), c) for c in ((255, 0, 0), (0, 0, 255))]
    frames[0].save(folder / "blink.png", save_all=True, append_images=frames[1:], duration=100, loop=0)
    (folder / "blink.txt").write_text("a blinking square", encoding="utf-8")
    said: list[str] = []
    items = data.collect_items(_cfg(folder), warn=said.append)
    assert [i.image.name for i in items] == ["blink.png"]
    assert len(said) == 1 and "blink.png" in said[0] and "first frame" in said[0]


def test_unreadable_images_are_reported_once(tmp_path, caplog):
    folder = tmp_path / "imgs"
    folder.mkdir()
    _good(folder)
    (folder / "broken.png").write_bytes(b"not an image at all")
    said: list[str] = []
    with caplog.at_level(logging.INFO):
        data.collect_items(_cfg(folder), warn=said.append)
    assert len(said) == 1 and "skipped 1 unreadable image" in said[0]
    assert not [r for r in caplog.records if "unreadable" in r.getMessage()]  # the caller's warn logs it, once
    with caplog.at_level(logging.INFO):
        data.collect_items(_cfg(folder))  # no warn: logged, once
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 1


# --------------------------------------------------------------------------- issue 27 (14): say which


def _heic_renamed(path: Path) -> None:
    """The first bytes of an iPhone photo (an ISO-BMFF ``ftyp`` box of brand ``heic``) under a .jpg name."""
    path.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 200)


def _png_with_big_metadata(path: Path) -> None:
    """A PNG whose compressed text chunk (a ComfyUI workflow, say) unpacks past Pillow's MAX_TEXT_CHUNK."""
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("workflow", "x" * (PngImagePlugin.MAX_TEXT_CHUNK + 1), zip=True)
    Image.new("RGB", (64, 64)).save(path, pnginfo=info)


def test_unreadable_images_say_which_kind_of_unreadable(tmp_path, monkeypatch):
    from guitrainer.core.dataset.scan import Flag, probe_image

    _heic_renamed(tmp_path / "phone.jpg")
    _png_with_big_metadata(tmp_path / "workflow.png")
    (tmp_path / "junk.png").write_bytes(b"not an image at all" * 10)
    heic, meta, junk = (probe_image(tmp_path / n) for n in ("phone.jpg", "workflow.png", "junk.png"))
    assert Flag.UNREADABLE in heic.flags and "HEIC" in heic.problem and ".jpg" in heic.problem
    assert "convert it to PNG or JPEG" in heic.problem
    assert Flag.UNREADABLE in meta.flags and "PNG metadata" in meta.problem and "1 MB" in meta.problem
    assert Flag.UNREADABLE in junk.flags and "match no image format" in junk.problem

    real_open = Image.open

    def no_permission(fp, *args, **kwargs):  # as root chmod 000 still reads: the error a user gets, raised here
        opened = os.fstat(fp.fileno()) if hasattr(fp, "fileno") else os.stat(fp)  # a path, or the file opened
        if os.path.samestat(opened, os.stat(tmp_path / "locked.png")):
            raise PermissionError(13, "Permission denied", str(fp))
        return real_open(fp, *args, **kwargs)

    _good(tmp_path, "locked.png")
    monkeypatch.setattr(Image, "open", no_permission)
    locked = probe_image(tmp_path / "locked.png")
    assert Flag.UNREADABLE in locked.flags and "no permission" in locked.problem


def test_training_skips_unreadable_images_saying_why_each_one(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    _good(folder)
    _heic_renamed(folder / "phone.jpg")
    _png_with_big_metadata(folder / "workflow.png")
    said: list[str] = []
    items = data.collect_items(_cfg(folder), warn=said.append)
    assert [i.image.name for i in items] == ["good.png"]
    (line,) = [s for s in said if "skipped" in s]
    assert "phone.jpg (is a HEIC" in line and "workflow.png (has PNG metadata" in line
    assert "Cannot be read as an image" not in line
