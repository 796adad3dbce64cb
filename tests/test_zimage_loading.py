"""A tiny Z-Image loads through the real loading code the three ways users keep it — a diffusers folder, one
ComfyUI-layout file, split files — with the same weights each time, is detected from its files, and what goes
wrong is said plainly. The original layout is checked against diffusers' own converter."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from guitrainer.core.model.checkpoint import classify_keys, detect_model
from guitrainer.core.model.split_files import arrange
from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.zimage import FAMILY, convert
from guitrainer.engine.families.zimage.loading import TOKENIZER_COMMAND
from guitrainer.engine.models.types import LoadedModel, ModelLoadError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny():
    from helpers import tiny_zimage

    return tiny_zimage.build(seed=1)


@pytest.fixture(scope="module")
def config_dir(tiny, tmp_path_factory):
    from helpers import tiny_zimage

    return tiny_zimage.tiny_config_dir(tiny, tmp_path_factory.mktemp("zimage_configs"))


def _same_weights(model: LoadedModel, tiny) -> None:
    for loaded, built in [(model.denoiser, tiny.transformer), (model.vae, tiny.vae), (model.text_encoders[0], tiny.qwen3)]:
        got, want = loaded.state_dict(), built.state_dict()
        assert set(got) == set(want), type(built).__name__
        for k in want:
            assert torch.equal(got[k], want[k]), k
        assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    assert model.family == "zimage" and len(model.text_encoders) == 1
    assert model.tokenizers[0]("a photo of sks").input_ids == tiny.tokenizer("a photo of sks").input_ids
    assert model.noise_scheduler.config.shift == 3.0


def test_the_original_layout_is_what_diffusers_converter_reads():
    from diffusers import ZImageTransformer2DModel
    from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers
    from helpers import tiny_zimage

    with torch.device("meta"):  # full width, two layers
        model = ZImageTransformer2DModel(n_layers=2)
    original = convert.diffusers_to_original(model.state_dict(), prefix="model.diffusion_model.")
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in convert_z_image_transformer_checkpoint_to_diffusers(dict(original)).items()} == want
    assert {k: tuple(v.shape) for k, v in convert.original_to_diffusers(original).items()} == want
    tiny = tiny_zimage.build(seed=2)  # and values: the helper's file (diffusers' renames backwards) read by ours
    ours = convert.original_to_diffusers(tiny_zimage.original_transformer(tiny))
    assert all(torch.equal(ours[k], v) for k, v in tiny.transformer.state_dict().items())


def test_a_diffusers_folder_is_detected_and_loads(tiny, tmp_path):
    from helpers import tiny_zimage

    folder = tiny_zimage.save_diffusers(tiny, tmp_path / "zimage")
    found = detect_model(str(folder))
    assert found.family == "zimage" and found.ok, found.message
    model = FAMILY.load_folder(folder)
    _same_weights(model, tiny)
    assert model.source == "folder"


def test_one_comfy_checkpoint_is_detected_and_loads(tiny, tmp_path, config_dir):
    from helpers import tiny_zimage

    path = tiny_zimage.save_comfy_checkpoint(tiny, tmp_path / "z_image_all_in_one.safetensors")
    found = detect_model(str(path))
    assert found.family == "zimage" and found.ok and found.level == "info", found.message
    model = FAMILY.load_single_file(path, load_file(str(path)), config_dir=config_dir)
    _same_weights(model, tiny)


def test_split_files_in_any_order_are_arranged_and_load(tiny, tmp_path, config_dir):
    from helpers import tiny_zimage

    files = tiny_zimage.save_split(tiny, tmp_path / "split")
    choice = arrange([str(files["qwen3"]), str(files["vae"]), str(files["transformer"])])
    assert choice.ok and choice.family == "zimage", choice.problems
    assert choice.base == str(files["transformer"]) and choice.vae == str(files["vae"])
    model = FAMILY.load_parts(ModelParts(files["transformer"], (files["qwen3"],), files["vae"]), config_dir=config_dir)
    _same_weights(model, tiny)
    bf16 = FAMILY.load_parts(ModelParts(files["transformer"], (files["qwen3"],), files["vae"]), config_dir=config_dir,
                             dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.denoiser.parameters()} == {torch.bfloat16}


def test_detection_of_the_transformer_file_and_its_relatives(tiny):
    from helpers import tiny_zimage

    header = {k: {"shape": list(v.shape)} for k, v in tiny_zimage.original_transformer(tiny).items()}
    family, ok, level, message, _ = classify_keys(header, {}, name="z_image_turbo_bf16.safetensors")
    assert (family, ok, level) == ("zimage", True, "warning")
    assert "qwen_3_4b.safetensors" in message and "ae.safetensors" in message
    omni = {**header, "siglip_embedder.1.weight": {"shape": [64, 32]}}
    family, ok, _, message, _ = classify_keys(omni, {}, name="omni.safetensors")
    assert family is None and not ok and "Z-Image Omni" in message
    lumina = {k: v for k, v in header.items() if not k.endswith("pad_token")}  # Lumina 2: a NextDiT without them
    assert classify_keys(lumina, {}, name="lumina2.safetensors")[0] != "zimage"


def test_split_file_mistakes_are_named(tiny, tmp_path, config_dir):
    from helpers import tiny_flux, tiny_zimage

    files = tiny_zimage.save_split(tiny, tmp_path / "split")
    missing = arrange([str(files["transformer"]), str(files["vae"])])
    assert not missing.ok and any("Qwen3-4B" in p and "qwen_3_4b.safetensors" in p for p in missing.problems)
    other = shutil.copy(files["qwen3"], tmp_path / "qwen_3_4b_fp8.safetensors")
    twice = arrange([str(files["transformer"]), str(files["qwen3"]), str(other), str(files["vae"])])
    assert not twice.ok and any("again" in p for p in twice.problems)
    t5 = tmp_path / "t5xxl.safetensors"
    save_file(tiny_flux.t5_file(tiny_flux.build(seed=0)), str(t5))
    with_t5 = arrange([str(files["transformer"]), str(files["qwen3"]), str(t5), str(files["vae"])])
    assert with_t5.ok and any("not used" in n for n in with_t5.notes), with_t5.problems
    with pytest.raises(ModelLoadError, match="Qwen3-4B text encoder is missing"):
        FAMILY.load_parts(ModelParts(files["transformer"], (), files["vae"]), config_dir=config_dir)


def test_without_a_tokenizer_the_error_gives_the_download_command(tiny, tmp_path, monkeypatch):
    from helpers import tiny_zimage

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    files = tiny_zimage.save_split(tiny, tmp_path / "split")
    bare = tiny_zimage.tiny_config_dir(tiny, tmp_path / "configs", with_tokenizer=False)
    with pytest.raises(ModelLoadError) as err:
        FAMILY.load_parts(ModelParts(files["transformer"], (files["qwen3"],), files["vae"]), config_dir=bare)
    assert TOKENIZER_COMMAND in str(err.value)


def test_the_transformer_file_alone_as_the_base_model_is_refused_naming_the_files_to_add(tiny, tmp_path, config_dir):
    from helpers import tiny_zimage

    state = tiny_zimage.original_transformer(tiny)
    with pytest.raises(ModelLoadError) as err:
        FAMILY.load_single_file(tmp_path / "z_image_tiny.safetensors", state, config_dir=config_dir)
    assert "qwen_3_4b.safetensors" in str(err.value) and "ae.safetensors" in str(err.value)


def test_a_scaled_fp8_file_is_refused_by_name(tiny, tmp_path, config_dir):
    from helpers import tiny_zimage

    files = tiny_zimage.save_split(tiny, tmp_path / "split")
    state = tiny_zimage.original_transformer(tiny)
    state["scaled_fp8"] = torch.zeros(0)
    scaled = tmp_path / "scaled_fp8.safetensors"
    save_file(state, str(scaled))
    with pytest.raises(ModelLoadError, match="scaled fp8"):
        FAMILY.load_parts(ModelParts(scaled, (files["qwen3"],), files["vae"]), config_dir=config_dir)
