"""A tiny Qwen-Image loads through the real loading code the three ways users keep it — a diffusers folder (its text
encoder saved as transformers 5 saves Qwen2.5-VL, sharded, vision tower and all), one ComfyUI-layout file, split
files (the VAE in Wan's original names) — with the same weights each time, is detected from its files, and what
goes wrong is said plainly."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from guitrainer.core.model.checkpoint import classify_keys, detect_model
from guitrainer.core.model.split_files import arrange
from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.qwenimage import FAMILY
from guitrainer.engine.families.qwenimage.loading import TOKENIZER_COMMAND
from guitrainer.engine.models.types import LoadedModel, ModelLoadError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny():
    from helpers import tiny_qwenimage

    return tiny_qwenimage.build(seed=1)


@pytest.fixture(scope="module")
def config_dir(tiny, tmp_path_factory):
    from helpers import tiny_qwenimage

    return tiny_qwenimage.tiny_config_dir(tiny, tmp_path_factory.mktemp("qwenimage_configs"))


def _same_weights(model: LoadedModel, tiny) -> None:
    for loaded, built in [(model.denoiser, tiny.transformer), (model.vae, tiny.vae), (model.text_encoders[0], tiny.qwen25)]:
        got, want = loaded.state_dict(), built.state_dict()
        assert set(got) == set(want), type(built).__name__
        for k in want:
            assert torch.equal(got[k], want[k]), k
        assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    assert model.family == "qwenimage" and len(model.text_encoders) == 1
    assert model.tokenizers[0]("a photo of sks").input_ids == tiny.tokenizer("a photo of sks").input_ids
    assert model.noise_scheduler.config.use_dynamic_shifting


def test_the_wan_named_vae_file_is_what_diffusers_converter_reads(tiny):
    """The helper writes Wan's names from Wan's module structure; diffusers' converter gives back every weight."""
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
    from helpers import tiny_qwenimage

    back = convert_wan_vae_to_diffusers(tiny_qwenimage.wan_vae_file(tiny))
    want = tiny.vae.state_dict()
    assert set(back) == set(want) and all(torch.equal(back[k], want[k]) for k in want)


def test_a_diffusers_folder_is_detected_and_loads(tiny, tmp_path):
    from helpers import tiny_qwenimage

    folder = tiny_qwenimage.save_diffusers(tiny, tmp_path / "qwenimage")
    found = detect_model(str(folder))
    assert found.family == "qwenimage" and found.ok, found.message
    model = FAMILY.load_folder(folder)
    _same_weights(model, tiny)
    assert model.source == "folder"
    bf16 = FAMILY.load_folder(folder, dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.text_encoders[0].parameters()} == {torch.bfloat16}


def test_one_comfy_checkpoint_is_detected_and_loads(tiny, tmp_path, config_dir):
    from helpers import tiny_qwenimage

    path = tiny_qwenimage.save_comfy_checkpoint(tiny, tmp_path / "qwen_image_all_in_one.safetensors")
    found = detect_model(str(path))
    assert found.family == "qwenimage" and found.ok, found.message
    model = FAMILY.load_single_file(path, load_file(str(path)), config_dir=config_dir)
    _same_weights(model, tiny)


def test_split_files_in_any_order_are_arranged_and_load(tiny, tmp_path, config_dir):
    from helpers import tiny_qwenimage

    files = tiny_qwenimage.save_split(tiny, tmp_path / "split")
    choice = arrange([str(files["vae"]), str(files["qwen25vl"]), str(files["transformer"])])
    assert choice.ok and choice.family == "qwenimage", choice.problems
    assert choice.base == str(files["transformer"]) and choice.vae == str(files["vae"])
    parts = ModelParts(files["transformer"], (files["qwen25vl"],), files["vae"])
    _same_weights(FAMILY.load_parts(parts, config_dir=config_dir), tiny)
    bf16 = FAMILY.load_parts(parts, config_dir=config_dir, dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.denoiser.parameters()} == {torch.bfloat16}


def test_detection_of_the_transformer_file_names_the_files_to_add(tiny):
    from helpers import tiny_qwenimage

    header = {k: {"shape": list(v.shape)} for k, v in tiny_qwenimage.transformer_file(tiny).items()}
    family, ok, level, message, _ = classify_keys(header, {}, name="qwen_image_bf16.safetensors")
    assert (family, ok, level) == ("qwenimage", True, "warning")
    assert "qwen_2.5_vl_7b.safetensors" in message and "qwen_image_vae.safetensors" in message


def test_an_sd3_transformer_is_not_taken_for_qwen_image():
    from diffusers import SD3Transformer2DModel

    with torch.device("meta"):
        sd3 = SD3Transformer2DModel(num_layers=2, attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                    caption_projection_dim=16, pooled_projection_dim=16, sample_size=8)
    header = {f"model.diffusion_model.{k}": {"shape": list(v.shape)} for k, v in sd3.state_dict().items()}
    assert classify_keys(header, {}, name="sd3.safetensors")[0] != "qwenimage"


def test_split_file_mistakes_are_named(tiny, tmp_path, config_dir):
    from helpers import tiny_flux, tiny_qwenimage, tiny_zimage

    files = tiny_qwenimage.save_split(tiny, tmp_path / "split")
    missing = arrange([str(files["transformer"]), str(files["vae"])])
    assert not missing.ok and any("qwen_2.5_vl_7b.safetensors" in p for p in missing.problems), missing.problems
    other = shutil.copy(files["qwen25vl"], tmp_path / "qwen_2.5_vl_7b_fp8.safetensors")
    twice = arrange([str(files["transformer"]), str(files["qwen25vl"]), str(other), str(files["vae"])])
    assert not twice.ok and any("again" in p for p in twice.problems)
    flux_vae = tmp_path / "ae.safetensors"  # Flux's 2-D VAE: Qwen-Image needs its own
    save_file(tiny_flux.ae_file(tiny_flux.build(seed=0)), str(flux_vae))
    wrong_vae = arrange([str(files["transformer"]), str(files["qwen25vl"]), str(flux_vae)])
    assert not wrong_vae.ok and any("2-D" in p and "qwen_image_vae.safetensors" in p for p in wrong_vae.problems)
    qwen3 = tmp_path / "qwen_3_4b.safetensors"  # Z-Image's text encoder is not Qwen2.5
    save_file(tiny_zimage.qwen3_file(tiny_zimage.build(seed=0)), str(qwen3))
    with pytest.raises(ModelLoadError, match="Qwen2.5-VL"):
        FAMILY.load_parts(ModelParts(files["transformer"], (qwen3,), files["vae"]), config_dir=config_dir)


def test_without_a_tokenizer_the_error_gives_the_download_command(tiny, tmp_path, monkeypatch):
    from helpers import tiny_qwenimage

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    files = tiny_qwenimage.save_split(tiny, tmp_path / "split")
    bare = tiny_qwenimage.tiny_config_dir(tiny, tmp_path / "configs", with_tokenizer=False)
    with pytest.raises(ModelLoadError) as err:
        FAMILY.load_parts(ModelParts(files["transformer"], (files["qwen25vl"],), files["vae"]), config_dir=bare)
    assert TOKENIZER_COMMAND in str(err.value) and "Qwen2.5" in str(err.value)


def test_a_tokenizer_without_qwens_special_tokens_is_passed_over(tiny, tmp_path, monkeypatch):
    from helpers import tiny_flux, tiny_qwenimage

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    files = tiny_qwenimage.save_split(tiny, tmp_path / "split")
    bare = tiny_qwenimage.tiny_config_dir(tiny, tmp_path / "configs", with_tokenizer=False)
    tiny_flux.t5_tokenizer().save_pretrained(str(files["transformer"].parent / "tokenizer"))
    with pytest.raises(ModelLoadError, match="tokenizer is missing"):
        FAMILY.load_parts(ModelParts(files["transformer"], (files["qwen25vl"],), files["vae"]), config_dir=bare)


def test_the_transformer_file_alone_as_the_base_model_is_refused_naming_the_files_to_add(tiny, tmp_path, config_dir):
    from helpers import tiny_qwenimage

    with pytest.raises(ModelLoadError) as err:
        FAMILY.load_single_file(tmp_path / "qwen_image_tiny.safetensors", tiny_qwenimage.transformer_file(tiny),
                                config_dir=config_dir)
    assert "qwen_2.5_vl_7b.safetensors" in str(err.value) and "qwen_image_vae.safetensors" in str(err.value)


def test_a_scaled_fp8_file_is_refused_by_name(tiny, tmp_path, config_dir):
    from helpers import tiny_qwenimage

    files = tiny_qwenimage.save_split(tiny, tmp_path / "split")
    state = tiny_qwenimage.transformer_file(tiny)
    state["scaled_fp8"] = torch.zeros(0)
    scaled = tmp_path / "scaled_fp8.safetensors"
    save_file(state, str(scaled))
    with pytest.raises(ModelLoadError, match="scaled fp8"):
        FAMILY.load_parts(ModelParts(scaled, (files["qwen25vl"],), files["vae"]), config_dir=config_dir)
