"""The Demo's world and its measure: the shapes drawn, read back from pixels, and the before / after verdicts."""

from __future__ import annotations

import random

import numpy as np
import pytest
from PIL import Image

from guitrainer.core.demo import dataset as demo_dataset
from guitrainer.core.demo.measure import SHOWS_IOU, expectation, iou, read_image
from guitrainer.core.demo.progress import demo_progress, is_demo
from guitrainer.core.demo.shapes import (
    BASE_SHAPES,
    CONCEPT,
    MIN_CONTRAST,
    PALETTE,
    SIZE,
    Drawing,
    backgrounds_for,
    contrast,
    draw,
    random_drawing,
    shape_mask,
)
from guitrainer.core.events import SampleImage
from guitrainer.core.runs.samples import first_and_last, from_artifacts


@pytest.mark.parametrize("shape", [*BASE_SHAPES, CONCEPT.shape])
def test_every_drawing_is_read_as_what_was_drawn(shape):
    rng = random.Random(hash(shape) % 1000)
    for _ in range(60):
        d = random_drawing(rng, shape, rng.choice(list(PALETTE)))
        r = read_image(draw(d))
        assert r.shows(d.shape, d.color), (d, r)
        assert r.background == d.background
        # the other shapes' templates fit clearly worse: the measure tells shapes apart, it does not guess
        assert max(v for k, v in r.ious.items() if k != shape) < r.iou - 0.05, (d, r.ious)


def Sample(prompt: str, step: int, path: str) -> SampleImage:  # noqa: N802 - reads like the record it builds
    return SampleImage(path=path, prompt=prompt, step=step)


def test_a_drawing_is_never_cut_off_and_always_contrasts():
    rng = random.Random(3)
    for _ in range(300):
        d = random_drawing(rng, rng.choice(BASE_SHAPES), rng.choice(list(PALETTE)))
        mask = shape_mask(d.shape, d.cx, d.cy, d.half)
        assert not (mask[0].any() or mask[-1].any() or mask[:, 0].any() or mask[:, -1].any())
        assert contrast(d.color, d.background) >= MIN_CONTRAST
    assert all(backgrounds_for(c) for c in PALETTE)  # every colour can be drawn on something


def test_empty_and_noise_pictures_show_nothing():
    plain = Image.new("RGB", (SIZE, SIZE), PALETTE["yellow"])
    r = read_image(plain)
    assert r.shape is None and r.color is None and r.describe() == "nothing drawn"
    noise = Image.fromarray(np.random.default_rng(0).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8))
    n = read_image(noise)
    assert not any(n.shows(s, c) for s in (*BASE_SHAPES, CONCEPT.shape) for c in PALETTE)


def test_a_blurred_enlarged_sample_is_still_read():
    """A sample at another size (the user set 128 px) and softened is read at its own size."""
    d = Drawing("triangle", "green", "white", 30, 34, 18)
    big = draw(d).resize((128, 128), Image.Resampling.BILINEAR)
    assert read_image(big).shows("triangle", "green")


def test_a_wrong_colour_or_a_blob_does_not_show_the_shape():
    wrong = read_image(draw(Drawing("square", "purple", "white", 32, 32, 18)))
    assert wrong.shape == "square" and not wrong.shows("square", "blue")
    # a ragged blob: foreground where a circle is, with a third of its pixels knocked out at random
    px = np.asarray(draw(Drawing("circle", "red", "white", 32, 32, 20))).copy()
    knock = np.random.default_rng(1).random((SIZE, SIZE)) < 0.45
    px[knock] = PALETTE["white"]
    assert read_image(Image.fromarray(px)).iou < SHOWS_IOU


def test_iou_by_hand():
    a = np.zeros((4, 4), bool)
    b = np.zeros((4, 4), bool)
    a[:2] = True  # 8 pixels
    b[1:3] = True  # 8 pixels, 4 shared
    assert iou(a, b) == pytest.approx(4 / 12)
    assert iou(np.zeros((2, 2), bool), np.zeros((2, 2), bool)) == 0.0


def test_expectation_reads_demo_prompts_only():
    assert expectation("a red zorb") == ("bar", "red")
    assert expectation("  A Red Zorb --d 7 --s 30") == ("bar", "red")
    assert expectation("a zorb") is None  # the trigger without its colour is not the Demo's prompt
    assert expectation("a blue square") == ("square", "blue")
    assert expectation("a blue square on a yellow background") is None
    assert expectation("a photo of a cat") is None
    assert expectation("") is None


def test_first_and_last_per_prompt():
    s = [Sample("a red zorb", 0, "z0"), Sample("a blue square", 0, "b0"), Sample("a red zorb", 40, "z40"),
         Sample("a red zorb", 80, "z80"), Sample("a blue square", 80, "b80"), Sample("a red zorb", 80, "z80-again")]
    pairs = first_and_last(s)
    assert [p.prompt for p in pairs] == ["a red zorb", "a blue square"]
    assert (pairs[0].first.path, pairs[0].last.path) == ("z0", "z80-again")  # a resumed run's re-made sample
    assert pairs[0].before_training and pairs[1].last.step == 80
    assert first_and_last([]) == []


def test_from_artifacts_keeps_samples_only():
    arts = [{"kind": "lora", "path": "/x.safetensors", "step": 10}, {"kind": "sample", "path": "/s.png", "step": 5, "prompt": "a red zorb"},
            {"kind": "sample", "path": "/t.png", "step": None, "prompt": None}]
    assert from_artifacts(arts) == [Sample("a red zorb", 5, "/s.png"), Sample("", 0, "/t.png")]


def _png(tmp_path, name, d):
    path = tmp_path / f"{name}.png"
    draw(d).save(path)
    return str(path)


def test_verdicts(tmp_path):
    tri = _png(tmp_path, "tri", Drawing("triangle", "purple", "white", 32, 32, 18))
    bar = _png(tmp_path, "bar", Drawing("bar", "red", "white", 30, 33, 19))
    sq = _png(tmp_path, "sq", Drawing("square", "blue", "yellow", 32, 32, 17))
    circ = _png(tmp_path, "circ", Drawing("circle", "green", "white", 32, 32, 17))
    samples = [Sample("a red zorb", 0, tri), Sample("a red zorb", 240, bar), Sample("a blue square", 0, sq), Sample("a blue square", 240, sq),
               Sample("a green circle", 0, circ), Sample("a green circle", 240, tri), Sample("a cat", 0, tri), Sample("a cat", 9, bar)]
    got = {p.prompt: p for p in demo_progress(first_and_last(samples))}
    assert set(got) == {"a red zorb", "a blue square", "a green circle"}  # "a cat" is no Demo prompt
    assert got["a red zorb"].verdict == "learned" and got["a red zorb"].is_concept
    assert got["a blue square"].verdict == "kept"
    assert got["a green circle"].verdict == "changed"
    line = got["a red zorb"].describe()
    assert "step 0 a purple triangle" in line and "step 240 a red bar" in line and line.endswith("learned")
    not_yet = demo_progress(first_and_last([Sample("a red zorb", 0, tri), Sample("a red zorb", 40, tri)]))
    assert not_yet[0].verdict == "not yet"
    both = demo_progress(first_and_last([Sample("a red zorb", 0, bar), Sample("a red zorb", 40, bar)]))
    assert both[0].verdict == "shown before training too"
    gone = demo_progress(first_and_last([Sample("a red zorb", 0, str(tmp_path / "deleted.png")), Sample("a red zorb", 4, bar)]))
    assert gone == []


def test_is_demo():
    from guitrainer.config import TrainingConfig

    cfg = TrainingConfig()
    cfg.model.base, cfg.model.family = "/models/sd15", "sd15"
    assert not is_demo(cfg)
    cfg.model.base = "demo"
    assert is_demo(cfg)
    assert is_demo({"model": {"base": "x", "family": "demo"}}) and not is_demo({"model": {"base": "/m", "family": "sd15"}})
    assert not is_demo({})


def test_demo_dataset_teaches_the_concept_and_keeps_the_users_edits(tmp_path, monkeypatch):
    monkeypatch.setenv("GUITRAINER_HOME", str(tmp_path))
    folder = demo_dataset.ensure_demo_dataset()
    pngs = sorted(folder.glob("*.png"))
    assert len(pngs) == 12
    captions = {p.name: p.with_suffix(".txt").read_text(encoding="utf-8") for p in pngs}
    zorbs = [n for n, c in captions.items() if c == CONCEPT.prompt]
    assert len(zorbs) == 8
    for p in pngs:
        with Image.open(p) as img:
            assert img.size == (SIZE, SIZE)
        wanted = expectation(captions[p.name])
        assert wanted is not None and read_image(p).shows(*wanted), p.name  # every picture shows its caption
    # the base's own shapes are there too, so the LoRA keeps them
    assert {c for c in captions.values() if c != CONCEPT.prompt} >= {"a blue square"}
    edited = pngs[0].with_suffix(".txt")
    edited.write_text("a zorb, edited by me", encoding="utf-8")
    assert demo_dataset.ensure_demo_dataset() == folder
    assert edited.read_text(encoding="utf-8") == "a zorb, edited by me"


def test_a_half_written_demo_folder_is_set_aside_not_deleted(tmp_path, monkeypatch):
    monkeypatch.setenv("GUITRAINER_HOME", str(tmp_path))
    target = demo_dataset.demo_dataset_dir()
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("keep me", encoding="utf-8")
    folder = demo_dataset.ensure_demo_dataset()
    assert len(list(folder.glob("*.png"))) == 12
    aside = [p for p in folder.parent.iterdir() if p.name.startswith("demo_images.incomplete.")]
    assert len(aside) == 1 and (aside[0] / "mine.txt").read_text(encoding="utf-8") == "keep me"


def test_a_background_that_shades_from_one_colour_to_another_stays_background():
    """A sample's background is rarely flat: shading from yellow to red across the picture, with a blue triangle."""
    px = np.zeros((SIZE, SIZE, 3), dtype=float)
    t = np.linspace(0.0, 1.0, SIZE)[None, :, None]
    px[:] = (1 - t) * np.asarray(PALETTE["yellow"], dtype=float) + t * np.asarray(PALETTE["red"], dtype=float)
    mask = shape_mask("triangle", 34, 30, 17)
    px[mask] = PALETTE["blue"]
    r = read_image(Image.fromarray(px.astype(np.uint8)))
    assert r.shows("triangle", "blue"), r
    flat = read_image(draw(Drawing("triangle", "blue", "yellow", 34, 30, 17)))
    assert abs(r.iou - flat.iou) < 0.02  # the shaded background is not counted as drawn: as good as on a flat one
