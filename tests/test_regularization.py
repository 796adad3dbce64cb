"""Regularization images: kohya's per-epoch class draws (hand-computed), pairing, loss rule, validation,
class-image generation with the demo model (resume is pixel-exact, cancel stops early)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from guitrainer.config import ConfigError, DatasetFolder, TrainingConfig, config_from_dict
from guitrainer.core.dataset import regularization as reg
from guitrainer.core.dataset.regularization import Draw

TRAIN = [("t0", 2), ("t1", 2), ("t2", 2)]  # 3 training images × repeats 2 = 6 draws per epoch
CLASS = [("c0", 1), ("c1", 1), ("c2", 1), ("c3", 1)]  # 4 class images × repeats 1


def test_kohya_schedule_hand_computed_two_epochs():
    # kohya's loop: first pass registers c0..c3 with repeats 1 (n=4), second pass +1 for c0 (n=5), c1 (n=6): stop.
    assert reg.kohya_class_repeats(6, CLASS) == [("c0", 2), ("c1", 2), ("c2", 1), ("c3", 1)]
    for epoch in (0, 1):
        plan = reg.epoch_schedule(TRAIN, CLASS, epoch, seed=42, shuffle=False)
        assert plan.train == ("t0", "t0", "t1", "t1", "t2", "t2")
        assert plan.classes == ("c0", "c0", "c1", "c1", "c2", "c3")  # the same every epoch: kohya fixes it once
        assert plan.mixed == (
            Draw("t0", False), Draw("t0", False), Draw("t1", False), Draw("t1", False), Draw("t2", False),
            Draw("t2", False), Draw("c0", True), Draw("c0", True), Draw("c1", True), Draw("c1", True),
            Draw("c2", True), Draw("c3", True),
        )  # fmt: skip
        assert plan.class_counts == (("c0", 2), ("c1", 2), ("c2", 1), ("c3", 1))
        assert plan.unused_class_items == 0

    e0 = reg.epoch_schedule(TRAIN, CLASS, 0, seed=42)
    e1 = reg.epoch_schedule(TRAIN, CLASS, 1, seed=42)
    # shuffled: the same multiset each epoch, a different order, reproducible from (seed, epoch)
    for plan in (e0, e1):
        assert Counter(plan.train) == {"t0": 2, "t1": 2, "t2": 2}
        assert Counter(plan.classes) == {"c0": 2, "c1": 2, "c2": 1, "c3": 1}
        assert Counter(plan.mixed) == Counter(reg.epoch_schedule(TRAIN, CLASS, 0, 42, shuffle=False).mixed)
    assert (e0.train, e0.classes, e0.mixed) != (e1.train, e1.classes, e1.mixed)
    assert reg.epoch_schedule(TRAIN, CLASS, 1, seed=42) == e1
    assert reg.epoch_schedule(TRAIN, CLASS, 1, seed=43) != e1


def test_rotate_mode_continues_the_cycle_across_epochs():
    e0 = reg.epoch_schedule(TRAIN, CLASS, 0, seed=1, mode="rotate", shuffle=False)
    e1 = reg.epoch_schedule(TRAIN, CLASS, 1, seed=1, mode="rotate", shuffle=False)
    assert e0.classes == ("c0", "c1", "c2", "c3", "c0", "c1")
    assert e1.classes == ("c2", "c3", "c0", "c1", "c2", "c3")
    assert e1.class_counts == (("c0", 1), ("c1", 1), ("c2", 2), ("c3", 2))


def test_more_class_draws_than_needed_and_repeats():
    # 2 train draws, 3 class images: only the first two are used (kohya), every epoch
    plan = reg.epoch_schedule([("t", 2)], [("a", 1), ("b", 1), ("c", 1)], 3, seed=0, shuffle=False)
    assert plan.classes == ("a", "b") and plan.unused_class_items == 1
    # class folder repeats 3, 2 class images, 4 train draws: kohya would register a×3 + b×3 = 6;
    # capped so the halves match: a×3 + b×1
    assert reg.kohya_class_repeats(4, [("a", 3), ("b", 3)]) == [("a", 3), ("b", 1)]
    # 7 train draws, a×2 b×1: first pass a2 b1 (3), then +1 each: a3 b2 (5), a4 b3 (7)
    assert reg.kohya_class_repeats(7, [("a", 2), ("b", 1)]) == [("a", 4), ("b", 3)]
    assert reg.epoch_schedule(TRAIN, [], 0, seed=0).classes == ()
    usage = reg.class_usage([("t", 2)], [("a", 1), ("b", 1), ("c", 1)])
    assert (usage.train_draws, usage.class_draws, usage.used_images) == (2, 2, 2)
    assert "2 of 3 class images used" in usage.describe()


def test_class_caption_and_losses():
    assert reg.class_caption("a dog, sitting", "a photo of a dog") == "a dog, sitting"
    assert reg.class_caption("  \n", "a photo of a dog ") == "a photo of a dog"
    assert reg.class_caption(None, "a photo of a dog") == "a photo of a dog"
    assert reg.combined_loss(0.25, 0.5, 1.0) == pytest.approx(0.75)
    assert reg.combined_loss(0.25, 0.5, 0.3) == pytest.approx(0.25 + 0.15)
    assert reg.combined_loss(0.25, None, 1.0) == 0.25


def test_regularization_folder_that_is_also_a_training_folder_is_refused(tmp_path):
    a, b = tmp_path / "10_me", tmp_path / "class"
    a.mkdir(), b.mkdir()
    cfg = TrainingConfig()
    cfg.dataset.folders = [DatasetFolder(str(a), 10)]
    cfg.dataset.regularization_folders = [DatasetFolder(str(b), 1)]
    assert cfg.errors() == []
    cfg.dataset.regularization_folders.append(DatasetFolder(str(tmp_path / "x" / ".." / "10_me"), 1))  # same, spelt differently
    errs = cfg.errors()
    assert [e.field for e in errs] == ["dataset.regularization_folders"]
    assert "also a training folder" in errs[0].message
    with pytest.raises(ConfigError):
        config_from_dict({"dataset": {"folders": [str(a)], "regularization_folders": [str(a)]}})


# --------------------------------------------------------------------------- generation (demo model)


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    import os

    from guitrainer.config import ModelConfig
    from guitrainer.engine.models.loading import load_base_model

    old = os.environ.get("GUITRAINER_HOME")
    os.environ["GUITRAINER_HOME"] = str(tmp_path_factory.getbasetemp() / "guitrainer_home")
    try:
        return load_base_model(ModelConfig())
    finally:
        if old is None:
            os.environ.pop("GUITRAINER_HOME", None)
        else:
            os.environ["GUITRAINER_HOME"] = old


def _pixels(path: Path) -> bytes:
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB").tobytes()


@pytest.mark.slow
def test_generation_writes_images_and_captions_then_resumes_pixel_exact(tmp_path, demo_model):
    from guitrainer.config import ModelConfig
    from guitrainer.engine.class_images import generate_class_images

    folder = tmp_path / "class"
    calls: list[tuple[int, int]] = []
    kw = dict(size=64, steps=3, seed=11, model=demo_model)
    r = generate_class_images(ModelConfig(), "a photo of a shape", folder, 5, progress=lambda d, n: calls.append((d, n)), **kw)
    assert (r.written, r.skipped_existing, r.cancelled) == (5, 0, False)
    pngs = sorted(folder.glob("*.png"))
    assert [p.name for p in pngs] == [f"class_0000{i}.png" for i in range(5)]
    assert all(p.with_suffix(".txt").read_text() == "a photo of a shape" for p in pngs)
    assert calls == [(0, 5), (1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    from PIL import Image

    with Image.open(pngs[0]) as im:
        assert im.size == (64, 64)
    originals = {p.name: _pixels(p) for p in pngs}
    assert len(set(originals.values())) == 5  # per-index seeds: five different images
    assert not list(folder.glob(".*"))  # no temp files left

    for name in ("class_00001.png", "class_00003.png"):
        (folder / name).unlink()
    r2 = generate_class_images(ModelConfig(), "a photo of a shape", folder, 5, **kw)
    assert (r2.written, r2.skipped_existing) == (2, 3)
    assert sorted(Path(p).name for p in r2.paths) == ["class_00001.png", "class_00003.png"]
    assert {p.name: _pixels(p) for p in sorted(folder.glob("*.png"))} == originals  # pixel for pixel

    r3 = generate_class_images(ModelConfig(), "a photo of a shape", folder, 4, **kw)  # enough already: no work
    assert (r3.written, r3.skipped_existing, r3.cancelled) == (0, 5, False)


@pytest.mark.slow
def test_generation_cancel_stops_early(tmp_path, demo_model):
    from guitrainer.config import ModelConfig
    from guitrainer.engine.class_images import generate_class_images

    done: list[int] = []
    r = generate_class_images(
        ModelConfig(), "a photo of a shape", tmp_path / "c", 6, size=64, steps=3, seed=0, model=demo_model,
        progress=lambda d, _n: done.append(d), should_stop=lambda: len(done) >= 3,  # after 2 images
    )  # fmt: skip
    assert r.cancelled and r.written == 2
    assert len(list((tmp_path / "c").glob("*.png"))) == 2

    # a stop request in the middle of an image drops that image (nothing half-made is saved)
    polls = iter(range(1000))
    r = generate_class_images(
        ModelConfig(), "a photo of a shape", tmp_path / "d", 3, size=64, steps=4, seed=0, model=demo_model,
        should_stop=lambda: next(polls) >= 2,  # polls: before loading, before image 0, after its step 1 -> stop
    )  # fmt: skip
    assert r.cancelled and r.written == 0
    assert not list((tmp_path / "d").glob("*.png"))
    with pytest.raises(ValueError, match="class prompt"):
        generate_class_images(ModelConfig(), " ", tmp_path / "e", 1, size=64, steps=1, seed=0, model=demo_model)
