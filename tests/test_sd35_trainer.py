"""The tiny SD 3.5 through the real Trainer: split files train the transformer and both CLIPs, sample, and write
kohya's layout with SD 3.5's metadata; a stopped run resumes bit-exactly (fp32 and bf16)."""

from __future__ import annotations

import pytest
import torch
from helpers import demo_cfg
from helpers.doubles import StopAt
from helpers.tiny_sd35 import build_tiny_sd35
from PIL import Image

from guitrainer.core.events import Control, NullReporter
from guitrainer.engine.families.sd35.family import SD35
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_sd35(tmp_path_factory.mktemp("tiny_sd35"))


@pytest.fixture
def tiny_configs(tiny, monkeypatch):
    """Single files and split files take their configs from the tiny folder (the shipped ones are full size)."""
    monkeypatch.setattr(SD35, "default_config_dir", lambda self: tiny.folder)
    return tiny


def _images(folder):
    folder.mkdir()
    for i in range(4):
        Image.new("RGB", (64, 64), (60 * i, 200 - 40 * i, 90)).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a photo of a red circle {i}")
    return folder


def _config(out, data, **settings):
    return demo_cfg(
        out, dataset__folders=[str(data)], dataset__resolution=64, schedule__batch_size=1,
        network__target_modules="attention_ff_proj", **settings,
    )


def test_split_files_train_both_clips_sample_and_write_sd35s_file(tmp_path, tiny_configs):
    torch.set_num_threads(1)
    tiny = tiny_configs
    cfg = _config(
        tmp_path / "out", _images(tmp_path / "data"),
        model__base=str(tiny.transformer_file), model__text_encoders=[str(tiny.clip_l), str(tiny.clip_g), str(tiny.t5)],
        network__train_text_encoder=True, schedule__max_steps=3,
        sampling__prompts=["a red circle"], sampling__every_n_steps=3, sampling__steps=2, sampling__size=64,
    )
    rep = NullReporter()
    trainer = Trainer(cfg, rep)
    summary = trainer.run()
    assert summary.status == "finished", summary.message
    assert trainer.session.model.family == "sd35" and len(trainer.session.model.text_encoders) == 3
    tensors, meta = read_lora(summary.lora_path)
    assert {k.split("_")[1] for k in tensors} == {"unet", "te1", "te2"}  # T5 stays frozen
    assert "lora_unet_joint_blocks_0_x_block_attn2_qkv.lora_up.weight" in tensors
    assert (meta["ss_base_model_version"], meta["modelspec.architecture"], meta["ss_network_module"]) == (
        "5-medium", "stable-diffusion-v3.5-medium/lora", "networks.lora_sd3")
    assert [s.step for s in rep.samples] == [3] and Image.open(rep.samples[0].path).size == (64, 64)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_stop_and_resume_is_bit_exact(tmp_path, tiny, precision):
    torch.set_num_threads(1)
    data = _images(tmp_path / "data")
    common = {"model__base": str(tiny.folder), "schedule__max_steps": 4, "precision__training": precision}
    straight_rep = NullReporter()
    straight = Trainer(_config(tmp_path / "a", data, **common), straight_rep).run()
    assert straight.status == "finished", straight.message
    control = Control()
    first_rep = StopAt(control, 2)
    first = Trainer(_config(tmp_path / "b", data, **common), first_rep, control).run()
    assert first.status == "stopped" and first.steps == 2
    second_rep = NullReporter()
    second = Trainer(_config(tmp_path / "b", data, schedule__resume_from=first.state_path, **common), second_rep).run()
    assert second.status == "finished", second.message
    assert [s.loss for s in straight_rep.steps] == [s.loss for s in first_rep.steps + second_rep.steps]
    a, _ = read_lora(straight.lora_path)
    b, _ = read_lora(second.lora_path)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fp8_frozen_weights_train(tmp_path, tiny, precision):
    """The transformer and the text encoders stored in float8 (T5's ``wo`` and the embedders kept, see
    ``SD35.storage_skip_patterns``), cast up per layer, with cached text outputs and checkpointing."""
    torch.set_num_threads(1)
    cfg = _config(
        tmp_path / "out", _images(tmp_path / "data"), model__base=str(tiny.folder), schedule__max_steps=3,
        precision__training=precision, precision__base_weights="fp8", precision__cache_text_encoder_outputs=True,
        precision__gradient_checkpointing=True,
    )
    rep = NullReporter()
    summary = Trainer(cfg, rep).run()
    assert summary.status == "finished", summary.message
    assert all(torch.isfinite(torch.tensor(s.loss)) for s in rep.steps)
