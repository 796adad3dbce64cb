"""Loading a tiny SD 3.5 through the family's own code, offline, from every layout users have: a diffusers
folder, one Stability / ComfyUI checkpoint, and split files — the same weights each time; with T5 optional, and
each missing or wrong part named."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch
from helpers.tiny_sd35 import build_tiny_sd35

from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.sd35 import loading
from guitrainer.engine.families.sd35.loaded import NO_T5_NOTE, denoiser_of
from guitrainer.engine.models.types import ModelLoadError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_sd35(tmp_path_factory.mktemp("tiny_sd35"))


@pytest.fixture(scope="module")
def from_folder(tiny):
    return loading.load_folder(tiny.folder)


def _state(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def _differences(a: torch.nn.Module, b: torch.nn.Module) -> list[str]:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    return [k for k in sa if not torch.equal(sa[k], sb[k])]


def _same_model(a, b) -> None:
    assert _differences(denoiser_of(a), denoiser_of(b)) == []
    assert _differences(a.vae, b.vae) == []
    assert len(a.text_encoders) == len(b.text_encoders)
    for x, y in zip(a.text_encoders, b.text_encoders):
        assert _differences(x, y) == []
    assert a.noise_scheduler.config.shift == b.noise_scheduler.config.shift == 3.0


def test_a_diffusers_folder_loads_frozen_fp32_with_its_three_text_encoders(from_folder):
    m = from_folder
    assert m.family == "sd35" and m.source == "folder" and m.identity
    assert m.extra["variant"] == "5-medium" and m.extra["t5"] == "loaded"  # qk-norm and attn2: 3.5 Medium's structure
    assert [type(t).__name__ for t in m.text_encoders] == ["CLIPTextModelWithProjection", "CLIPTextModelWithProjection", "T5EncoderModel"]
    assert len(m.tokenizers) == 3
    modules = [denoiser_of(m), m.vae, *m.text_encoders]
    assert all(not p.requires_grad and p.dtype == torch.float32 for mod in modules for p in mod.parameters())


def test_one_checkpoint_file_loads_the_same_weights(tiny, from_folder):
    m = loading.load_single_file(tiny.single_file, _state(tiny.single_file), config_dir=tiny.folder)
    assert m.source == "single_file" and m.path == str(tiny.single_file)
    _same_model(from_folder, m)


def test_split_files_load_the_same_weights_in_any_order(tiny, from_folder):
    parts = ModelParts(denoiser=tiny.transformer_file, text_encoders=(tiny.t5, tiny.clip_g, tiny.clip_l))
    m = loading.load_parts(parts, config_dir=tiny.folder)
    assert m.source == "split_files" and m.extra["t5"] == "loaded"
    _same_model(from_folder, m)
    # the VAE as a file of its own (diffusers' LDM-layout converter reads it)
    transformer_only = tiny.transformer_file.parent / "mmdit_only.safetensors"
    from safetensors.torch import save_file

    save_file({k: v for k, v in _state(tiny.transformer_file).items() if k.startswith("model.diffusion_model.")}, str(transformer_only))
    m = loading.load_parts(
        ModelParts(transformer_only, (tiny.clip_l, tiny.clip_g, tiny.t5), vae=tiny.vae), config_dir=tiny.folder
    )
    _same_model(from_folder, m)


def test_without_t5_the_model_loads_and_says_what_that_means(tiny, caplog):
    with caplog.at_level(logging.WARNING, logger="guitrainer.engine.families.sd35.loading"):
        m = loading.load_parts(ModelParts(tiny.transformer_file, (tiny.clip_l, tiny.clip_g)), config_dir=tiny.folder)
    assert len(m.text_encoders) == 2 and len(m.tokenizers) == 2
    assert m.extra["t5"] == "absent" and NO_T5_NOTE in m.extra["notes"]
    assert any("no T5-XXL" in r.getMessage() for r in caplog.records)


def test_a_diffusers_folder_saved_without_t5_loads_without_it(tiny, tmp_path):
    import json

    folder = tmp_path / "no_t5"
    shutil.copytree(tiny.folder, folder, ignore=shutil.ignore_patterns("text_encoder_3", "tokenizer_3"))
    index = json.loads((folder / "model_index.json").read_text())
    index["text_encoder_3"] = index["tokenizer_3"] = [None, None]
    (folder / "model_index.json").write_text(json.dumps(index))
    assert loading.load_folder(folder).extra["t5"] == "absent"


def test_a_checkpoint_without_its_text_encoders_says_which_files_to_add(tiny):
    with pytest.raises(ModelLoadError) as err:
        loading.load_single_file(tiny.transformer_file, _state(tiny.transformer_file), config_dir=tiny.folder)
    assert "CLIP-L is missing (sd3.5_tiny.safetensors has none inside): add clip_l.safetensors" in str(err.value)
    assert "CLIP-G is missing" in str(err.value)
    assert any("as the model's parts" in a for a in err.value.advice)


def test_wrong_parts_are_named_before_anything_loads(tiny, tmp_path):
    second = tmp_path / "clip_l_copy.safetensors"
    shutil.copy(tiny.clip_l, second)
    with pytest.raises(ModelLoadError, match="CLIP-L is given twice: clip_l.safetensors and clip_l_copy.safetensors"):
        loading.load_parts(ModelParts(tiny.transformer_file, (tiny.clip_l, tiny.clip_g, second)), config_dir=tiny.folder)
    with pytest.raises(ModelLoadError, match="sd35_tiny_all.safetensors is a checkpoint holding CLIP-L, CLIP-G, T5-XXL, VAE"):
        loading.load_parts(ModelParts(tiny.transformer_file, (tiny.clip_l, tiny.single_file)), config_dir=tiny.folder)
    with pytest.raises(ModelLoadError, match="sd35_vae.safetensors is a 16-channel VAE"):
        loading.load_parts(ModelParts(tiny.transformer_file, (tiny.clip_l, tiny.vae)), config_dir=tiny.folder)
    with pytest.raises(ModelLoadError, match="is a CLIP-L text encoder, not the SD 3.5 transformer"):
        loading.load_parts(ModelParts(tiny.clip_l, (tiny.clip_g,)), config_dir=tiny.folder)


def _config_dir_without_t5_tokenizer(tiny, tmp_path: Path) -> Path:
    config = tmp_path / "config"
    shutil.copytree(tiny.folder, config, ignore=shutil.ignore_patterns("tokenizer_3", "*.safetensors"))
    return config


def test_t5s_tokenizer_is_found_beside_the_files_or_in_the_hub_cache_else_the_error_says_how_to_get_it(
    tiny, tmp_path, monkeypatch
):
    import huggingface_hub.constants

    cache = tmp_path / "hf_cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    config = _config_dir_without_t5_tokenizer(tiny, tmp_path)
    split = tmp_path / "split"
    split.mkdir()
    for f in (tiny.transformer_file, tiny.clip_l, tiny.clip_g, tiny.t5):
        shutil.copy(f, split / f.name)
    parts = ModelParts(split / tiny.transformer_file.name, tuple(split / f.name for f in (tiny.clip_l, tiny.clip_g, tiny.t5)))

    with pytest.raises(ModelLoadError) as err:
        loading.load_parts(parts, config_dir=config)
    message = str(err.value)
    assert "T5-XXL's tokenizer was not found" in message and str(split / "tokenizer_3") in message
    assert 'hf download stabilityai/stable-diffusion-3.5-large --include "tokenizer_3/*"' in message
    assert "leave the T5 file out to train without T5" in message

    snapshot = cache / "models--google--t5-v1_1-xxl" / "snapshots" / "abc123"
    shutil.copytree(tiny.folder / "tokenizer_3", snapshot)
    (cache / "models--google--t5-v1_1-xxl" / "refs").mkdir()
    (cache / "models--google--t5-v1_1-xxl" / "refs" / "main").write_text("abc123")
    assert loading.load_parts(parts, config_dir=config).extra["t5"] == "loaded"

    shutil.rmtree(cache)
    shutil.copytree(tiny.folder / "tokenizer_3", split / "tokenizer_3")
    m = loading.load_parts(parts, config_dir=config)
    assert m.tokenizers[2]("a photo of a cat").input_ids == [4, 5, 6, 4, 7, 1]  # ▁a ▁photo ▁of ▁a ▁cat </s>


def test_clip_l_from_a_file_is_used_unprojected_as_the_clients_do(tiny):
    """ComfyUI's sd3_clip returns CLIP-L's pooled output unprojected; diffusers' single-file loader sets an
    identity projection: the standalone clip_l file's own projection (absent here) is not used."""
    m = loading.load_parts(ModelParts(tiny.transformer_file, (tiny.clip_l, tiny.clip_g)), config_dir=tiny.folder)
    assert torch.equal(m.text_encoders[0].text_projection.weight, torch.eye(768))
