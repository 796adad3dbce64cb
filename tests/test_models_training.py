"""Real-model paths through the Trainer: a tiny SDXL trains (UNet + both text encoders), samples are
written at the configured steps, and stop/resume stays bit-exact with sampling on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from guitrainer.core.events import Control, NullReporter
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.trainer import Trainer

sys.path.insert(0, str(Path(__file__).parent))
from helpers import demo_cfg
from helpers.doubles import StopAt  # noqa: E402
from tiny_models import build_tiny  # noqa: E402

pytestmark = pytest.mark.slow  # every test here trains a tiny model


def _images(folder: Path) -> Path:
    folder.mkdir()
    for i, size in enumerate(((64, 64), (96, 48), (64, 64), (96, 48))):
        Image.new("RGB", size, (60 * i, 200 - 40 * i, 90)).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a photo of shape {i}")
    return folder


def test_sdxl_trains_text_encoders_and_samples_every_n_steps(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    captured: list[torch.Tensor] = []
    from guitrainer.engine.families import stable_diffusion

    orig = stable_diffusion.added_conditioning

    def spy(pooled, time_ids, resolution, device, dtype):
        out = orig(pooled, time_ids, resolution, device, dtype)
        captured.append(out["time_ids"].clone())
        return out

    monkeypatch.setattr(stable_diffusion, "added_conditioning", spy)
    model = build_tiny(tmp_path / "sdxl", "sdxl")
    cfg = demo_cfg(
        tmp_path / "out",
        model__base=str(model),
        model__family="auto",
        dataset__folders=[str(_images(tmp_path / "data"))],
        dataset__bucketing=True,
        dataset__resolution=96,
        dataset__min_bucket_resolution=64,
        dataset__max_bucket_resolution=192,
        dataset__bucket_step=32,
        network__train_text_encoder=True,
        schedule__max_steps=4,
        schedule__batch_size=2,
        sampling__prompts=["a photo of shape 1"],
        sampling__every_n_steps=2,
        sampling__steps=2,
        sampling__size=64,
    )
    rep = NullReporter()
    tr = Trainer(cfg, rep)
    summary = tr.run()
    assert summary.status == "finished", summary.message
    assert tr.session.model.family == "sdxl" and len(tr.session.model.text_encoders) == 2
    tensors, _meta = read_lora(summary.lora_path)
    for prefix in ("lora_unet_", "lora_te1_", "lora_te2_"):
        assert any(k.startswith(prefix) for k in tensors), prefix
    assert [s.step for s in rep.samples] == [2, 4]
    for s in rep.samples:
        assert Path(s.path).is_file() and Path(s.path).parent == tmp_path / "out" / "samples"
        assert Image.open(s.path).size == (64, 64) and s.prompt == "a photo of shape 1"
    assert Path(rep.samples[0].path).name == "demo_lora_step000002_0.png"
    # add_time_ids come from each batch's images: the 96x48 ones are cropped into a wide bucket
    rows = {tuple(r.tolist()) for t in captured for r in t}
    assert (64.0, 64.0, 0.0, 0.0, 96.0, 96.0) in rows
    assert any(r[:2] == (48.0, 96.0) and r[4] < r[5] for r in rows), rows


def test_stop_and_resume_is_bit_exact_with_sampling_on(tmp_path):
    torch.set_num_threads(1)
    common = {
        "schedule__max_steps": 6,
        "network__dropout": 0.1,
        "dataset__flip_augment": True,
        "sampling__every_n_steps": 2,
        "sampling__steps": 2,
    }
    straight_rep = NullReporter()
    straight = Trainer(demo_cfg(tmp_path / "a", **common), straight_rep).run()
    assert straight.status == "finished"
    assert [s.step for s in straight_rep.samples] == [2, 4, 6]

    control = Control()
    first_rep = StopAt(control, 3)
    first = Trainer(demo_cfg(tmp_path / "b", **common), first_rep, control).run()
    assert first.status == "stopped" and first.steps == 3
    second_rep = NullReporter()
    second = Trainer(demo_cfg(tmp_path / "b", schedule__resume_from=first.state_path, **common), second_rep).run()
    assert second.status == "finished", second.message
    assert [s.loss for s in straight_rep.steps] == [s.loss for s in first_rep.steps + second_rep.steps]
    a, _ = read_lora(straight.lora_path)
    b, _ = read_lora(second.lora_path)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [s.step for s in first_rep.samples + second_rep.samples] == [2, 4, 6]
    # the same LoRA at the same step gives the same picture
    assert Path(straight_rep.samples[-1].path).read_bytes() == Path(second_rep.samples[-1].path).read_bytes()
