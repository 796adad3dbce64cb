"""A tiny Flux loads through the real loading code the three ways users keep it — a diffusers folder, one
ComfyUI-layout file, split files — with the same weights each time; and what goes wrong is said plainly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.flux1 import FAMILY
from guitrainer.engine.families.flux1.loading import T5_TOKENIZER_COMMAND, denoiser_of
from guitrainer.engine.models.types import LoadedModel, ModelLoadError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny():
    from helpers import tiny_flux

    return tiny_flux.build(seed=1)


@pytest.fixture(scope="module")
def config_dir(tiny, tmp_path_factory):
    from helpers import tiny_flux

    return tiny_flux.tiny_config_dir(tiny, tmp_path_factory.mktemp("flux_configs"))


def _same_weights(model: LoadedModel, tiny) -> None:
    pairs = [(denoiser_of(model), tiny.transformer), (model.vae, tiny.vae), (model.text_encoders[0], tiny.clip),
             (model.text_encoders[1], tiny.t5)]
    for loaded, built in pairs:
        got, want = loaded.state_dict(), built.state_dict()
        assert set(got) == set(want), type(built).__name__
        for k in want:
            assert torch.equal(got[k], want[k]), k
        assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    assert model.family == "flux1" and model.extra["variant"] == "dev"
    assert model.tokenizers[1]("a photo of sks").input_ids == tiny.t5_tokenizer("a photo of sks").input_ids
    assert model.tokenizers[0]("a photo").input_ids == [49406, 320, 1125, 49407]
    assert type(model.noise_scheduler).__name__ == "FlowMatchEulerDiscreteScheduler"


def test_a_diffusers_folder(tiny, tmp_path):
    from helpers import tiny_flux

    folder = tiny_flux.save_diffusers(tiny, tmp_path / "flux")
    model = FAMILY.load_folder(folder)
    _same_weights(model, tiny)
    assert model.source == "folder" and model.identity
    assert model.noise_scheduler.config.use_dynamic_shifting  # dev's scheduler


def test_a_diffusers_folder_of_another_pipeline_is_refused(tiny, tmp_path):
    from helpers import tiny_flux

    folder = tiny_flux.save_diffusers(tiny, tmp_path / "fill")
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps(index | {"_class_name": "FluxFillPipeline"}))
    with pytest.raises(ModelLoadError, match="FluxFillPipeline model, not FLUX.1"):
        FAMILY.load_folder(folder)


def test_one_comfyui_checkpoint(tiny, config_dir, tmp_path):
    from helpers import tiny_flux

    path = tiny_flux.save_comfy_checkpoint(tiny, tmp_path / "flux1-tiny-checkpoint.safetensors")
    model = FAMILY.load_single_file(path, load_file(str(path)), config_dir=config_dir)
    _same_weights(model, tiny)
    assert model.source == "single_file"


def test_split_files_in_any_order(tiny, config_dir, tmp_path):
    from helpers import tiny_flux

    files = tiny_flux.save_split(tiny, tmp_path / "split")
    parts = ModelParts(files["transformer"], (files["clip_l"], files["t5"]), files["vae"])
    model = FAMILY.load_parts(parts, config_dir=config_dir)
    _same_weights(model, tiny)
    assert model.source == "split_files"
    bf16 = FAMILY.load_parts(parts, config_dir=config_dir, dtype=torch.bfloat16)
    assert {p.dtype for p in denoiser_of(bf16).parameters()} == {torch.bfloat16}


def test_a_transformer_file_in_diffusers_names_is_a_split_part_too(tiny, config_dir, tmp_path):
    from helpers import tiny_flux

    files = tiny_flux.save_split(tiny, tmp_path / "split")
    named = tmp_path / "diffusion_pytorch_model.safetensors"
    save_file({k: v.contiguous() for k, v in tiny.transformer.state_dict().items()}, str(named))
    model = FAMILY.load_parts(ModelParts(named, (files["t5"], files["clip_l"]), files["vae"]), config_dir=config_dir)
    _same_weights(model, tiny)


def test_the_transformer_file_alone_names_the_three_files_it_needs(tiny, config_dir, tmp_path):
    from helpers import tiny_flux

    files = tiny_flux.save_split(tiny, tmp_path / "split")
    path = files["transformer"]
    with pytest.raises(ModelLoadError) as e:
        FAMILY.load_single_file(path, load_file(str(path)), config_dir=config_dir)
    for needed in ("T5-XXL", "CLIP-L", "VAE", "t5xxl_fp16.safetensors", "clip_l.safetensors", "ae.safetensors"):
        assert needed in str(e.value)
    with pytest.raises(ModelLoadError, match=r"Missing: the CLIP-L text encoder \(clip_l.safetensors\)"):
        FAMILY.load_parts(ModelParts(path, (files["t5"],), files["vae"]), config_dir=config_dir)
    with pytest.raises(ModelLoadError, match="ae.safetensors is the VAE file, not the Flux transformer"):
        FAMILY.load_parts(ModelParts(files["vae"], (files["t5"], files["clip_l"]), path), config_dir=config_dir)


def test_schnell_gets_its_own_scheduler_and_t5_length(config_dir, tmp_path):
    from helpers import tiny_flux

    schnell = tiny_flux.build(seed=2, dev=False)
    files = tiny_flux.save_split(schnell, tmp_path / "schnell")
    model = FAMILY.load_parts(
        ModelParts(files["transformer"], (files["t5"], files["clip_l"]), files["vae"]),
        config_dir=tiny_flux.tiny_config_dir(schnell, tmp_path / "schnell_configs"),
    )
    assert model.extra["variant"] == "schnell" and not denoiser_of(model).config.guidance_embeds
    assert not model.noise_scheduler.config.use_dynamic_shifting and model.noise_scheduler.config.shift == 1.0
    text = FAMILY.encode_text(model, model.text_encoders, ["a photo"], torch.device("cpu"))
    assert text["t5"].shape[1] == 256


def test_the_t5_tokenizer_is_found_beside_the_files_or_its_download_command_given(tiny, tmp_path):
    from helpers import tiny_flux

    bare = tiny_flux.tiny_config_dir(tiny, tmp_path / "configs", with_t5_tokenizer=False)
    files = tiny_flux.save_split(tiny, tmp_path / "split")
    parts = ModelParts(files["transformer"], (files["t5"], files["clip_l"]), files["vae"])
    with pytest.raises(ModelLoadError) as e:
        FAMILY.load_parts(parts, config_dir=bare)
    assert T5_TOKENIZER_COMMAND in str(e.value) and e.value.advice
    tiny.t5_tokenizer.save_pretrained(str(files["t5"].parent / "tokenizer_2"))
    model = FAMILY.load_parts(parts, config_dir=bare)
    assert model.tokenizers[1]("a dog").input_ids == tiny.t5_tokenizer("a dog").input_ids


def test_files_that_are_not_what_they_claim_say_so(tiny, config_dir, tmp_path):
    from helpers import tiny_flux

    files = tiny_flux.save_split(tiny, tmp_path / "split")
    t5 = load_file(str(files["t5"]))
    save_file(t5 | {"encoder.block.0.layer.0.SelfAttention.q.scale_weight": torch.ones(1)}, str(files["t5"]))
    parts = ModelParts(files["transformer"], (files["t5"], files["clip_l"]), files["vae"])
    with pytest.raises(ModelLoadError, match="scaled fp8"):
        FAMILY.load_parts(parts, config_dir=config_dir)
    t5.pop("encoder.block.1.layer.0.SelfAttention.k.weight")
    save_file(t5, str(files["t5"]))
    with pytest.raises(ModelLoadError, match=r"the T5-XXL text encoder does not match its architecture \(missing"):
        FAMILY.load_parts(parts, config_dir=config_dir)
    with pytest.raises(ModelLoadError, match="does not exist"):
        FAMILY.load_parts(ModelParts(Path(tmp_path / "nope.safetensors")), config_dir=config_dir)
