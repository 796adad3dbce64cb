"""engine.captioners on tiny local models with random weights: the captions are nonsense, the pipeline is real."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.taggers import FakeHub, build_tiny_tagger
from PIL import Image

from guitrainer.core.dataset.scan import CaptionEdit
from guitrainer.engine import captioners as cap


def build_tiny_blip(folder: Path) -> Path:
    from transformers import (
        BertTokenizer,
        BlipConfig,
        BlipForConditionalGeneration,
        BlipImageProcessorPil,
        BlipProcessor,
    )

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]"] + [f"word{i}" for i in range(58)]
    tok = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, bos_token="[DEC]")
    proc = BlipProcessor(image_processor=BlipImageProcessorPil(size={"height": 32, "width": 32}), tokenizer=tok)
    cfg = BlipConfig(
        text_config=dict(
            vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
            max_position_embeddings=64, bos_token_id=5, pad_token_id=0, sep_token_id=3, eos_token_id=3,
        ),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, image_size=32, patch_size=8),
        projection_dim=32,
    )  # fmt: skip
    import torch

    torch.manual_seed(0)
    BlipForConditionalGeneration(cfg).save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


@pytest.fixture
def images(tmp_path) -> list[Path]:
    out = []
    for i in range(5):
        p = tmp_path / "imgs" / f"img{i}.png"
        p.parent.mkdir(exist_ok=True)
        Image.new("RGB", (40 + 8 * i, 48), (40 * i, 100, 200)).save(p)
        out.append(p)
    (tmp_path / "imgs" / "img0.txt").write_text("existing, smile", encoding="utf-8")
    return out


def test_wd14_tagger_thresholds_modes_and_undo(tmp_path, images):
    folder = build_tiny_tagger(tmp_path / "tagger")
    tagger = cap.load_captioner("wd14", folder, general_threshold=0.9, character_threshold=0.85)
    assert tagger.caption([Image.new("RGB", (30, 20))]) == ["my char, long hair, ^_^"]  # kaomoji keeps "_"
    strict = cap.WDTagger(folder, general_threshold=0.999, character_threshold=0.999)
    assert strict.caption([Image.new("RGBA", (10, 10))]) == [""]

    res = cap.run_captioning(tagger, images, mode="skip", batch_size=2)
    assert res.skipped == 1 and len(res.changes) == 4 and not res.cancelled
    assert (images[1].with_suffix(".txt")).read_text() == "my char, long hair, ^_^"
    assert (images[0].with_suffix(".txt")).read_text() == "existing, smile"

    res2 = cap.run_captioning(tagger, images[:1], mode="append")
    assert (images[0].with_suffix(".txt")).read_text() == "existing, smile, my char, long hair, ^_^"
    CaptionEdit("auto", res2.changes).revert()
    assert (images[0].with_suffix(".txt")).read_text() == "existing, smile"

    seen: list[int] = []
    res3 = cap.run_captioning(
        tagger, images, mode="overwrite", batch_size=1, on_progress=lambda d, t: seen.append(d), should_stop=lambda: len(seen) >= 2
    )
    assert res3.cancelled and seen == [1, 2] and len(res3.changes) + res3.skipped == 2  # img1 already had it


@pytest.mark.slow
def test_blip_captioner_runs_and_cancels(tmp_path, images):
    folder = build_tiny_blip(tmp_path / "blip")
    blip = cap.load_captioner("blip", folder, max_new_tokens=4, num_beams=1)
    texts = blip.caption([Image.open(p).convert("RGB") for p in images[:3]])
    assert len(texts) == 3 and all(isinstance(t, str) for t in texts)
    assert any(t for t in texts)  # random weights still emit vocabulary words

    stop_after = {"n": 0}

    def progress(done: int, total: int) -> None:
        stop_after["n"] = done

    res = cap.run_captioning(blip, images, mode="overwrite", batch_size=2, on_progress=progress, should_stop=lambda: stop_after["n"] >= 2)
    assert res.cancelled and stop_after["n"] == 2 and len(res.changes) <= 2
    assert not images[4].with_suffix(".txt").exists()


def test_merge_caption_and_bad_sources(tmp_path):
    assert cap.merge_caption("a, b", "b, c", "append") == "a, b, c"
    assert cap.merge_caption("a, b", "b", "append") is None
    assert cap.merge_caption("a", "x", "skip") is None
    assert cap.merge_caption(" ", "x", "skip") == "x"
    assert cap.merge_caption("a", "x", "overwrite") == "x"
    with pytest.raises(cap.CaptionerError):
        cap.load_captioner("wd14", tmp_path / "nothing_here")
    (tmp_path / "half").mkdir()
    with pytest.raises(cap.CaptionerError, match="missing"):
        cap.WDTagger(tmp_path / "half")


def test_hub_download_reports_each_file_and_its_bytes(tmp_path, monkeypatch):
    files = {
        "config.json": b"{}" * 40, "model.safetensors": b"w" * 300, "pytorch_model.bin": b"x", "tf_model.h5": b"x",
        "README.md": b"hi", "sub/extra.json": b"{}" * 5,
    }  # fmt: skip
    hub = FakeHub(monkeypatch, tmp_path / "cache", files)
    seen: list[tuple[str, int, int, int, int]] = []
    root = cap.download_from_hub("someone/model", ["*.json", "*.safetensors", "*.bin"], lambda *a: seen.append(a))
    assert root == hub.snapshot  # also when the last file is in a sub-folder
    assert hub.fetched == ["config.json", "model.safetensors", "sub/extra.json"]  # one copy of the weights
    assert seen == [
        ("config.json", 1, 3, 0, 0), ("config.json", 1, 3, 40, 80), ("config.json", 1, 3, 80, 80),
        ("model.safetensors", 2, 3, 0, 0), ("model.safetensors", 2, 3, 150, 300), ("model.safetensors", 2, 3, 300, 300),
        ("sub/extra.json", 3, 3, 0, 0), ("sub/extra.json", 3, 3, 5, 10), ("sub/extra.json", 3, 3, 10, 10),
    ]  # fmt: skip


def test_wd14_from_a_hub_id_downloads_with_progress(tmp_path, monkeypatch):
    hub = FakeHub.from_folder(monkeypatch, tmp_path / "cache", build_tiny_tagger(tmp_path / "origin"))
    hub.files["README.md"] = b"not needed"
    seen: list[tuple] = []
    tagger = cap.load_captioner("wd14", "someone/tiny-tagger", general_threshold=0.9, progress=lambda *a: seen.append(a))
    assert tagger.caption([Image.new("RGB", (30, 20))]) == ["my char, long hair, ^_^"]
    assert hub.fetched == ["model.onnx", "selected_tags.csv"]
    assert [(f, n, c) for f, n, c, got, _ in seen if got == 0] == [("model.onnx", 1, 2), ("selected_tags.csv", 2, 2)]

    def stop(*_a) -> None:
        raise cap.CaptioningCancelled("stop")

    with pytest.raises(cap.CaptioningCancelled):  # a cancel is not reported as a failed download
        cap.resolve_source("someone/tiny-tagger", ("model.onnx",), progress=stop)
    hub.fail = OSError("connection refused")
    with pytest.raises(cap.CaptionerError, match="Could not download someone/tiny-tagger: connection refused"):
        cap.resolve_source("someone/tiny-tagger", ("model.onnx",))
    hub.fail = None
    del hub.files["selected_tags.csv"]
    with pytest.raises(cap.CaptionerError, match="no files matching"):
        cap.resolve_source("someone/tiny-tagger", ("selected_tags.csv",))
    hub.snapshot = tmp_path / "other_cache" / "snapshots" / "4567"  # nothing cached from before
    with pytest.raises(cap.CaptionerError, match="has no selected_tags.csv"):
        cap.resolve_source("someone/tiny-tagger", ("model.onnx", "selected_tags.csv"), patterns=["*.onnx"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.fetched.clear()
    with pytest.raises(cap.CaptionerError, match="offline"):
        cap.resolve_source("someone/tiny-tagger", ("model.onnx",))
    assert hub.fetched == []
