"""Training data: buckets, image modes, corrupt files, batches within a bucket, latent / text caches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from guitrainer.config import DatasetConfig, DatasetFolder
from guitrainer.core.dataset import scan as core_ds
from guitrainer.engine import data as D

RED, BLUE = (220, 20, 20), (20, 20, 220)


def _cfg(folder: Path, **kw) -> DatasetConfig:
    base = dict(resolution=128, bucketing=True, min_bucket_resolution=64, max_bucket_resolution=256, bucket_step=32)
    base.update(kw)
    return DatasetConfig(folders=[DatasetFolder.from_value(str(folder))], **base)


# --------------------------------------------------------------------------- buckets

# resolution 128, sides 64..256 in steps of 32: image (w, h) -> bucket (w, h), resized size, crop (left, top)
BUCKET_TABLE = [
    ((200, 100), (160, 96), (192, 96), (16, 0)),
    ((100, 100), (128, 128), (128, 128), (0, 0)),
    ((60, 180), (64, 192), (64, 192), (0, 0)),
    ((300, 100), (192, 64), (192, 64), (0, 0)),
    ((90, 150), (96, 160), (96, 160), (0, 0)),
    ((400, 100), (256, 64), (256, 64), (0, 0)),
    ((100, 130), (96, 160), (123, 160), (13, 0)),
]


def test_buckets_of_a_mixed_aspect_set_match_the_hand_computed_table(tmp_path):
    folder = tmp_path / "2_mixed"
    folder.mkdir()
    for i, ((w, h), *_rest) in enumerate(BUCKET_TABLE):
        Image.new("RGB", (w, h), (i * 30, 100, 100)).save(folder / f"{i}.png")
    cfg = _cfg(folder)
    assert D.bucket_list(cfg) == [
        (64, 256), (64, 224), (64, 192), (96, 160), (128, 128), (160, 96), (192, 64), (224, 64), (256, 64)
    ]
    items = D.collect_items(cfg)
    ds = D.TrainDataset(items, cfg)
    assert len(ds) == 2 * len(BUCKET_TABLE) and all(it.repeats == 2 for it in items)
    for idx, (size, bucket, resized, (left, top)) in enumerate(BUCKET_TABLE):
        assert (items[idx].width, items[idx].height) == size
        assert items[idx].bucket == bucket, size
        g = ds.geometry(idx)
        assert (g.resized, g.left, g.top) == (resized, left, top), size
        assert g.time_ids() == [size[1], size[0], top, left, bucket[1], bucket[0]]
        assert g.time_ids(flip=True)[3] == resized[0] - bucket[0] - left
        s = ds.item_sample(idx, False, "x")
        assert s["pixels"].shape == (3, bucket[1], bucket[0])
        assert s["time_ids"].tolist() == g.time_ids()
    # the dataset page's summary counts the same steps as the engine's batches
    scan = core_ds.scan_folders([(folder, 2)], ".txt", 128)
    summary = core_ds.summarize(scan.items, 128, min_side=64, max_side=256, step=32, batch_size=2)
    batches = D.epoch_batches([ds.bucket_of(i) for i in range(len(ds))], seed=3, epoch=0, batch_size=2)
    assert summary.steps_per_epoch == len(batches)
    assert {b: n for b, n in summary.buckets.items()} == {
        (160, 96): 1, (128, 128): 1, (64, 192): 1, (192, 64): 1, (96, 160): 2, (256, 64): 1
    }


def test_epoch_batches_stay_within_a_bucket_and_are_seeded():
    buckets = [(64, 64)] * 5 + [(96, 32)] * 4 + [(32, 96)] * 3
    a = D.epoch_batches(buckets, seed=1, epoch=0, batch_size=2)
    assert a == D.epoch_batches(buckets, seed=1, epoch=0, batch_size=2)
    assert a != D.epoch_batches(buckets, seed=1, epoch=1, batch_size=2)
    assert sorted(i for b in a for i in b) == list(range(12))
    assert all(len({buckets[i] for i in b}) == 1 for b in a)
    assert len(a) == 3 + 2 + 2
    one = [(64, 64)] * 7
    assert D.epoch_batches(one, 5, 2, 3) == D.batches_of(D.epoch_order(7, 5, 2), 3)
    shards = [D.epoch_batches(buckets, 1, 0, 2, num_processes=2, process_index=i) for i in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == 4


def test_no_bucketing_is_a_center_cropped_square(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    im = Image.new("RGB", (120, 60), RED)
    im.paste(BLUE, (0, 0, 30, 60))  # a blue strip on the left, cut off by the center crop
    im.save(folder / "a.png")
    cfg = _cfg(folder, resolution=64, bucketing=False)
    items = D.collect_items(cfg)
    assert items[0].bucket == (64, 64)
    px = D.TrainDataset(items, cfg).pixels(0)
    assert px.shape == (3, 64, 64) and px[0].mean() > 0.6 and px[2].mean() < -0.6


# --------------------------------------------------------------------------- image modes and broken files


def _rgb01(t: torch.Tensor) -> np.ndarray:
    return ((t.permute(1, 2, 0).numpy() + 1.0) * 127.5).round()


def test_image_modes_are_converted_properly(tmp_path):
    from PIL import ImageCms  # noqa: F401  (Pillow with littlecms: CMYK JPEGs decode)

    rgba = Image.new("RGBA", (40, 40), (0, 0, 0, 0))
    rgba.paste((20, 20, 220, 255), (20, 0, 40, 40))
    rgba.save(tmp_path / "rgba.png")
    Image.new("CMYK", (40, 40), (0, 255, 255, 0)).save(tmp_path / "cmyk.jpg", quality=95)
    Image.fromarray(np.full((40, 40), 200 * 257, dtype=np.uint16)).save(tmp_path / "gray16.png")
    la = Image.new("LA", (40, 40), (0, 0))
    la.save(tmp_path / "la.png")
    pal = Image.new("P", (40, 40), 0)
    pal.putpalette([0, 255, 0] + [0, 0, 0] * 255)
    pal.save(tmp_path / "pal.png", transparency=0)
    exif = Image.new("RGB", (80, 40), RED)
    exif.paste(BLUE, (40, 0, 80, 40))  # stored: red left, blue right
    ex = Image.Exif()
    ex[0x0112] = 6  # display rotated 90° clockwise: the left half becomes the top
    exif.save(tmp_path / "exif.jpg", exif=ex, quality=95)

    assert Image.open(tmp_path / "gray16.png").mode.startswith("I")
    px = _rgb01(D.load_image_tensor(tmp_path / "rgba.png", (40, 40)))
    assert (px[:, :20] == 255).all(), "transparent area must be white"
    assert np.allclose(px[:, 25:], (20, 20, 220), atol=1)
    px = _rgb01(D.load_image_tensor(tmp_path / "cmyk.jpg", (40, 40)))
    assert np.allclose(px.mean(axis=(0, 1)), (255, 0, 0), atol=8)
    px = _rgb01(D.load_image_tensor(tmp_path / "gray16.png", (40, 40)))
    assert np.allclose(px, 200, atol=1)
    assert (_rgb01(D.load_image_tensor(tmp_path / "la.png", (40, 40))) == 255).all()
    assert (_rgb01(D.load_image_tensor(tmp_path / "pal.png", (40, 40))) == 255).all()
    up = D.open_rgb(tmp_path / "exif.jpg")
    assert up.size == (40, 80)
    px = _rgb01(D.load_image_tensor(tmp_path / "exif.jpg", (40, 80)))
    assert np.allclose(px[5:35].mean(axis=(0, 1)), RED, atol=10) and np.allclose(px[45:75].mean(axis=(0, 1)), BLUE, atol=10)
    # through the scanner: the upright size is what the bucket is chosen from
    cfg = _cfg(tmp_path, resolution=64, min_bucket_resolution=32, max_bucket_resolution=128)
    items = {it.image.name: it for it in D.collect_items(cfg)}
    assert (items["exif.jpg"].width, items["exif.jpg"].height) == (40, 80)
    assert items["exif.jpg"].bucket[1] > items["exif.jpg"].bucket[0]
    assert set(items) == {"rgba.png", "cmyk.jpg", "gray16.png", "la.png", "pal.png", "exif.jpg"}


def test_corrupt_truncated_and_empty_images_are_skipped_and_listed(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (64, 64), RED).save(folder / "good.png")
    (folder / "good.txt").write_text("a red square")
    full = (folder / "good.png").read_bytes()
    big = Image.effect_noise((96, 96), 50).convert("RGB")
    big.save(folder / "noise.jpg", quality=90)
    data = (folder / "noise.jpg").read_bytes()
    (folder / "noise.jpg").unlink()
    (folder / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (folder / "cut.png").write_bytes(full[:-20])
    (folder / "empty.png").write_bytes(b"")
    (folder / "garbage.webp").write_bytes(b"RIFF0000WEBPnonsense")
    warnings: list[str] = []
    items = D.collect_items(_cfg(folder, resolution=64), warn=warnings.append)
    assert [i.image.name for i in items] == ["good.png"] and items[0].caption == "a red square"
    assert len(warnings) == 1 and "skipped 4 unreadable images" in warnings[0]
    for name in ("truncated.jpg", "cut.png", "empty.png", "garbage.webp"):
        assert name in warnings[0]
    (folder / "good.png").unlink()
    with pytest.raises(D.DatasetError, match="no usable training images"):
        D.collect_items(_cfg(folder, resolution=64))


def test_captions_trigger_shuffle_keep_tokens_and_dropout(tmp_path):
    import random

    folder = tmp_path / "5_thing"
    folder.mkdir()
    Image.new("RGB", (64, 64), RED).save(folder / "a.png")
    (folder / "a.txt").write_text("one, two, three, four, five")
    cfg = _cfg(folder, resolution=64, trigger_word="sks", shuffle_captions=True, keep_tokens=1)
    items = D.collect_items(cfg)
    assert items[0].repeats == 5
    ds = D.TrainDataset(items, cfg)
    rng = random.Random(0)
    seen = {ds.caption(0, rng) for _ in range(30)}
    assert len(seen) > 3 and all(c.startswith("sks, one, ") for c in seen)
    cfg.caption_dropout = 1.0
    assert ds.caption(0, rng) == ""
    assert ds.fixed_caption(0) == "sks, one, two, three, four, five"
