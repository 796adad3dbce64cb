"""SD 3.5 on the seam: the registry's FAMILY, its metadata under sd-scripts' names, the Numerics tab's blocks,
which frozen layers stay in the compute dtype under fp8 storage, and samples through StableDiffusion3Pipeline."""

from __future__ import annotations

import pytest
import torch
from helpers import config_with
from helpers.tiny_sd35 import build_tiny_sd35

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.core.families.sd35 import FACTS
from guitrainer.engine.families.registry import family
from guitrainer.engine.families.sd35 import SD35
from guitrainer.engine.families.sd35.loaded import denoiser_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_sd35(tmp_path_factory.mktemp("tiny_sd35"))


@pytest.fixture
def model(tiny):
    return family("sd35").load_folder(tiny.folder)


def test_the_registry_gives_the_sd35_family():
    fam = family("sd35")
    assert isinstance(fam, SD35) and fam.facts is FACTS and fam.name == "sd35"
    assert fam.block_of("transformer_blocks.12.attn2.to_q") == "joint 12"
    assert fam.block_of("base_model.model.transformer_blocks.3.ff.net.2") == "joint 3"
    assert fam.block_of("context_embedder") is None and fam.block_of("norm_out.linear") is None


def test_the_clips_are_trainable_and_t5_is_not(model):
    fam = family("sd35")
    assert fam.trainable_text_encoders(model) == [0, 1]
    assert fam.text_encoder_targets(model, 2, config_with().network) == ()
    assert torch.equal(fam.timestep_tensor([0.25, 0.5], torch.device("cpu")), torch.tensor([0.25, 0.5]))
    assert fam.validation_timesteps(config_with(), model, 2) == [0.25, 0.75]


def test_metadata_names_the_model_and_the_recipe_as_sd_scripts_does(model, tiny):
    meta = family("sd35").metadata(config_with(), model)
    assert meta == {
        "ss_network_module": "networks.lora_sd3",
        "ss_base_model_version": "5-medium",
        "modelspec.architecture": "stable-diffusion-v3.5-medium/lora",
        "modelspec.implementation": "https://github.com/Stability-AI/sd3.5",
        "ss_weighting_scheme": "logit_normal",
        "ss_logit_mean": "0",
        "ss_logit_std": "1",
        "ss_mode_scale": "1.29",
        "ss_timestep_sampling": "logit_normal",
        "ss_discrete_flow_shift": "3",
        "ss_model_prediction_type": "sigma_scaled",
        "ss_apply_lg_attn_mask": "False",
        "ss_apply_t5_attn_mask": "False",
    }
    # before the model loads, the base model's files say which it is; else SD 3.5 Large
    assert family("sd35").metadata(config_with(model__base=str(tiny.folder)), None)["ss_base_model_version"] == "5-medium"
    assert family("sd35").metadata(config_with(model__base=str(tiny.single_file)), None)["ss_base_model_version"] == "5-medium"
    assert family("sd35").metadata(config_with(model__base="stabilityai/x"), None)["modelspec.architecture"] == "stable-diffusion-v3.5-large/lora"
    other = family("sd35").metadata(
        config_with(flow__timestep_sampling="uniform", flow__discrete_flow_shift=1.0, flow__model_prediction_type="raw"), model
    )
    assert (other["ss_weighting_scheme"], other["ss_timestep_sampling"], other["ss_discrete_flow_shift"],
            other["ss_model_prediction_type"]) == ("none", "uniform", "1", "raw")


def test_fp8_storage_keeps_the_embedders_and_final_layer_in_the_compute_dtype(model):
    from guitrainer.engine.network.layer_casting import cast_layerwise

    transformer = denoiser_of(model)
    cast_layerwise(transformer, torch.float8_e4m3fn, torch.float32, family("sd35").storage_skip_patterns)
    dtypes = {name: m.weight.dtype for name, m in transformer.named_modules() if isinstance(m, torch.nn.Linear | torch.nn.Conv2d)}
    kept = {n for n, d in dtypes.items() if d == torch.float32}
    assert kept == {
        "pos_embed.proj", "context_embedder", "norm_out.linear", "proj_out",
        "time_text_embed.timestep_embedder.linear_1", "time_text_embed.timestep_embedder.linear_2",
        "time_text_embed.text_embedder.linear_1", "time_text_embed.text_embedder.linear_2",
    }
    assert dtypes["transformer_blocks.0.norm1.linear"] == torch.float8_e4m3fn  # the blocks' modulation is stored too
    t5 = model.text_encoders[2]
    cast_layerwise(t5, torch.float8_e4m3fn, torch.float32, family("sd35").storage_skip_patterns)
    assert t5.encoder.block[0].layer[1].DenseReluDense.wo.weight.dtype == torch.float32
    assert t5.encoder.block[0].layer[1].DenseReluDense.wi_0.weight.dtype == torch.float8_e4m3fn
    with torch.no_grad():  # T5's forward casts its input to wo's dtype before wo runs: fp8 there would break it
        assert torch.isfinite(t5(torch.tensor([[4, 5, 1]]))[0]).all()
    out = transformer(torch.randn(1, 16, 8, 8), torch.randn(1, 5, 2304), torch.randn(1, 2048), torch.tensor([500.0]), return_dict=False)[0]
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


@pytest.mark.parametrize("with_t5", [True, False])
def test_samples_come_from_stable_diffusion_3s_pipeline(model, with_t5):
    if not with_t5:
        model.text_encoders, model.tokenizers = model.text_encoders[:2], model.tokenizers[:2]
    fam = family("sd35")
    pipe = fam.pipeline(model)
    assert type(pipe).__name__ == "StableDiffusion3Pipeline" and pipe.transformer is denoiser_of(model)
    assert (pipe.text_encoder_3 is not None) == with_t5 and pipe.scheduler.config.shift == 3.0
    assert fam.size_multiple(model) == 4  # the tiny VAE's 2 levels (×2) times the 2 × 2 patch
    prompt = SamplePrompt("a red circle", "", 16, 16, steps=2, guidance_scale=1.0, seed=0)
    with torch.no_grad():
        image = fam.sample(pipe, model, prompt, 16, 16, torch.Generator().manual_seed(0))
    assert image.size == (16, 16)
