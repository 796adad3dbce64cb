"""A tiny Chroma loads through the real loading code the three ways users keep it — a diffusers folder, one
ComfyUI-layout file, split files — with the same weights each time, is detected from its files, and what goes
wrong is said plainly."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from guitrainer.core.model.checkpoint import classify_keys, detect_model
from guitrainer.core.model.split_files import arrange
from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.chroma import FAMILY
from guitrainer.engine.families.chroma.loading import T5_TOKENIZER_COMMAND
from guitrainer.engine.models.types import LoadedModel, ModelLoadError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny():
    from helpers import tiny_chroma

    return tiny_chroma.build(seed=1)


@pytest.fixture(scope="module")
def config_dir(tiny, tmp_path_factory):
    from helpers import tiny_chroma

    return tiny_chroma.tiny_config_dir(tiny, tmp_path_factory.mktemp("chroma_configs"))


def _same_weights(model: LoadedModel, tiny) -> None:
    for loaded, built in [(model.denoiser, tiny.transformer), (model.vae, tiny.vae), (model.text_encoders[0], tiny.t5)]:
        got, want = loaded.state_dict(), built.state_dict()
        assert set(got) == set(want), type(built).__name__
        for k in want:
            assert torch.equal(got[k], want[k]), k
        assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    assert model.family == "chroma" and len(model.text_encoders) == 1
    assert model.tokenizers[0]("a photo of sks").input_ids == tiny.tokenizer("a photo of sks").input_ids
    assert type(model.noise_scheduler).__name__ == "FlowMatchEulerDiscreteScheduler"


def test_a_diffusers_folder_is_detected_and_loads(tiny, tmp_path):
    from helpers import tiny_chroma

    folder = tiny_chroma.save_diffusers(tiny, tmp_path / "chroma")
    found = detect_model(str(folder))
    assert found.family == "chroma" and found.ok, found.message
    model = FAMILY.load_folder(folder)
    _same_weights(model, tiny)
    assert model.source == "folder"


def test_one_comfy_checkpoint_is_detected_and_loads(tiny, tmp_path, config_dir):
    from helpers import tiny_chroma

    path = tiny_chroma.save_comfy_checkpoint(tiny, tmp_path / "chroma_all_in_one.safetensors")
    found = detect_model(str(path))
    assert found.family == "chroma" and found.ok and found.level == "info", found.message
    from safetensors.torch import load_file

    model = FAMILY.load_single_file(path, load_file(str(path)), config_dir=config_dir)
    _same_weights(model, tiny)
    assert model.source == "single_file"


def test_split_files_in_any_order_are_arranged_and_load(tiny, tmp_path, config_dir):
    from helpers import tiny_chroma

    files = tiny_chroma.save_split(tiny, tmp_path / "split")
    choice = arrange([str(files["vae"]), str(files["t5"]), str(files["transformer"])])
    assert choice.ok and choice.family == "chroma", choice.problems
    assert choice.base == str(files["transformer"]) and choice.vae == str(files["vae"])
    model = FAMILY.load_parts(ModelParts(files["transformer"], (files["t5"],), files["vae"]), config_dir=config_dir)
    _same_weights(model, tiny)
    assert model.source == "split_files"
    bf16 = FAMILY.load_parts(ModelParts(files["transformer"], (files["t5"],), files["vae"]), config_dir=config_dir,
                             dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.denoiser.parameters()} == {torch.bfloat16}


def test_the_transformer_file_alone_is_accepted_with_the_files_to_add_and_a_flux_file_is_still_flux(tiny, tmp_path):
    from helpers import tiny_chroma, tiny_flux

    header = {k: {"shape": list(v.shape)} for k, v in tiny_chroma.bfl_transformer(tiny).items()}
    family, ok, level, message, _ = classify_keys(header, {}, name="Chroma1-HD.safetensors")
    assert (family, ok, level) == ("chroma", True, "warning")
    assert "t5xxl_fp16.safetensors" in message and "ae.safetensors" in message
    flux = {k: {"shape": list(v.shape)} for k, v in tiny_flux.bfl_transformer(tiny_flux.build(seed=0)).items()}
    assert classify_keys(flux, {}, name="flux1-dev.safetensors")[0] == "flux1"
    radiance = {**header, "nerf_image_embedder.embedder.0.weight": {"shape": [4, 4]}}
    family, ok, _, message, _ = classify_keys(radiance, {}, name="radiance.safetensors")
    assert family is None and not ok and "Chroma Radiance" in message


def test_split_file_mistakes_are_named(tiny, tmp_path, config_dir):
    from helpers import tiny_chroma, tiny_flux

    files = tiny_chroma.save_split(tiny, tmp_path / "split")
    missing = arrange([str(files["transformer"]), str(files["vae"])])
    assert not missing.ok and any("T5-XXL" in p and "t5xxl_fp16.safetensors" in p for p in missing.problems)
    import shutil

    other_t5 = shutil.copy(files["t5"], tmp_path / "t5xxl_fp8.safetensors")
    twice = arrange([str(files["transformer"]), str(files["t5"]), str(other_t5), str(files["vae"])])
    assert not twice.ok and any("again" in p for p in twice.problems)
    clip = tmp_path / "clip_l.safetensors"
    save_file(tiny_flux.clip_file(tiny_flux.build(seed=0)), str(clip))
    with_clip = arrange([str(files["transformer"]), str(files["t5"]), str(clip), str(files["vae"])])
    assert with_clip.ok and any("not used" in n for n in with_clip.notes), with_clip.problems
    model = FAMILY.load_parts(ModelParts(files["transformer"], (files["t5"], clip), files["vae"]), config_dir=config_dir)
    assert len(model.text_encoders) == 1
    with pytest.raises(ModelLoadError, match="T5-XXL text encoder is missing"):
        FAMILY.load_parts(ModelParts(files["transformer"], (), files["vae"]), config_dir=config_dir)


def test_without_a_t5_tokenizer_the_error_gives_the_download_command(tiny, tmp_path, monkeypatch):
    from helpers import tiny_chroma

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    files = tiny_chroma.save_split(tiny, tmp_path / "split")
    bare = tiny_chroma.tiny_config_dir(tiny, tmp_path / "configs", with_tokenizer=False)
    with pytest.raises(ModelLoadError) as err:
        FAMILY.load_parts(ModelParts(files["transformer"], (files["t5"],), files["vae"]), config_dir=bare)
    assert T5_TOKENIZER_COMMAND in str(err.value)


def test_the_transformer_file_alone_as_the_base_model_is_refused_naming_the_files_to_add(tiny, tmp_path, config_dir):
    from helpers import tiny_chroma

    state = tiny_chroma.bfl_transformer(tiny)
    with pytest.raises(ModelLoadError) as err:
        FAMILY.load_single_file(tmp_path / "chroma-tiny.safetensors", state, config_dir=config_dir)
    assert "t5xxl_fp16.safetensors" in str(err.value) and "ae.safetensors" in str(err.value)


def test_a_scaled_fp8_file_is_refused_by_name(tiny, tmp_path, config_dir):
    from helpers import tiny_chroma

    files = tiny_chroma.save_split(tiny, tmp_path / "split")
    state = tiny_chroma.bfl_transformer(tiny)
    state["scaled_fp8"] = torch.zeros(0)
    scaled = tmp_path / "scaled_fp8.safetensors"
    save_file(state, str(scaled))
    with pytest.raises(ModelLoadError, match="scaled fp8"):
        FAMILY.load_parts(ModelParts(scaled, (files["t5"],), files["vae"]), config_dir=config_dir)


def test_a_tokenizer_folder_of_another_kind_beside_the_files_is_passed_over(tiny, tmp_path, config_dir):
    """A ComfyUI models folder shared with Z-Image: Qwen's tokenizer in tokenizer/ beside Chroma's files is not T5's;
    the loader looks on (here: the config folder's) instead of failing."""
    from helpers import tiny_chroma, tiny_zimage

    files = tiny_chroma.save_split(tiny, tmp_path / "shared")
    tiny_zimage.tokenizer().save_pretrained(str(tmp_path / "shared" / "tokenizer"))
    model = FAMILY.load_parts(ModelParts(files["transformer"], (files["t5"],), files["vae"]), config_dir=config_dir)
    assert model.tokenizers[0]("a photo of sks").input_ids == tiny.tokenizer("a photo of sks").input_ids
