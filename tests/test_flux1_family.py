"""The rest of Flux's seam: which layers fp8 storage leaves alone, the file's
metadata, sampling through FluxPipeline, and the estimator's table for full-size FLUX.1 dev."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import config_with

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.flux1 import FAMILY
from guitrainer.engine.families.flux1.loading import denoiser_of


def test_metadata_under_sd_scripts_names():
    transformer = SimpleNamespace(config=SimpleNamespace(guidance_embeds=True))  # only its config is read
    model = SimpleNamespace(denoiser=transformer)
    meta = FAMILY.metadata(config_with(flow__guidance_scale=1.0), model)
    assert meta["ss_base_model_version"] == "flux1"
    assert meta["modelspec.architecture"] == "flux-1-dev/lora"
    assert meta["modelspec.implementation"] == "https://github.com/black-forest-labs/flux"
    assert (meta["ss_timestep_sampling"], meta["ss_discrete_flow_shift"], meta["ss_model_prediction_type"]) == (
        "shift", "3.1582", "raw")
    assert (meta["ss_guidance_scale"], meta["ss_weighting_scheme"], meta["ss_apply_t5_attn_mask"]) == ("1.0", "none", "False")
    assert meta["ss_sigmoid_scale"] == "1.0" and meta["ss_network_module"] == "networks.lora_flux"
    transformer.config.guidance_embeds = False
    chosen = config_with(flow__timestep_sampling="flux_shift", flow__discrete_flow_shift=1.0)
    meta = FAMILY.metadata(chosen, model)
    assert meta["modelspec.architecture"] == "flux-1-schnell/lora"
    assert (meta["ss_timestep_sampling"], meta["ss_discrete_flow_shift"]) == ("flux_shift", "1.0")


def test_metadata_without_a_model_reads_dev_or_schnell_from_the_base_models_files(tmp_path):
    """The export passes no model: the transformer file's header (guidance_in) or the folder's config says."""
    from safetensors.torch import save_file

    dev, schnell = tmp_path / "dev.safetensors", tmp_path / "schnell.safetensors"
    fingerprint = {"double_blocks.0.img_attn.norm.key_norm.scale": torch.ones(2), "img_in.weight": torch.zeros(2, 64)}
    save_file(fingerprint | {"guidance_in.in_layer.bias": torch.zeros(2)}, str(dev))
    save_file(fingerprint, str(schnell))
    folder = tmp_path / "folder" / "transformer"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"guidance_embeds": false}')
    for base, arch in ((dev, "dev"), (schnell, "schnell"), (folder.parent, "schnell"), ("black-forest-labs/FLUX.1-dev", "dev")):
        meta = FAMILY.metadata(config_with(model__base=str(base)), None)
        assert meta["modelspec.architecture"] == f"flux-1-{arch}/lora", base


@pytest.mark.slow
def test_fp8_storage_keeps_the_embedders_final_layer_and_norms_in_the_compute_dtype():
    from helpers import tiny_flux

    from guitrainer.engine.network.layer_casting import cast_layerwise

    transformer = tiny_flux.build(seed=0).transformer
    cast_layerwise(transformer, torch.float8_e4m3fn, torch.float32, FAMILY.storage_skip_patterns)
    dtypes = {n: m.weight.dtype for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    kept = {n for n, d in dtypes.items() if d == torch.float32}
    assert kept == {
        "x_embedder", "context_embedder", "proj_out", "norm_out.linear",
        *(f"time_text_embed.{e}.linear_{i}" for e in ("timestep_embedder", "guidance_embedder", "text_embedder") for i in (1, 2)),
    }
    assert dtypes["transformer_blocks.0.norm1.linear"] == torch.float8_e4m3fn  # the modulation is stored in fp8 too
    assert dtypes["single_transformer_blocks.1.proj_out"] == torch.float8_e4m3fn
    assert transformer.transformer_blocks[0].attn.norm_q.weight.dtype == torch.float32


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from helpers import tiny_flux

    return FAMILY.load_folder(tiny_flux.save_diffusers(tiny_flux.build(seed=8), tmp_path_factory.mktemp("flux")))


@pytest.mark.slow
def test_samples_come_from_flux_pipeline_with_the_trained_t5_length_and_leave_the_training_scheduler_alone(model):
    lengths: list[int] = []
    t5 = model.text_encoders[1]
    hook = t5.register_forward_pre_hook(lambda _m, args, kwargs: lengths.append(kwargs.get("input_ids", args[0] if args else None).shape[1]), with_kwargs=True)
    before = copy.deepcopy(model.noise_scheduler.__dict__.get("timesteps"))
    pipe = FAMILY.pipeline(model, "default")
    assert FAMILY.size_multiple(model) == 4  # the tiny VAE downscales 2x (two blocks), times the 2x2 packing
    prompt = SamplePrompt("a photo of sks", "", 32, 32, 2, 3.5, 0)

    def sample(seed: int) -> np.ndarray:
        return np.asarray(FAMILY.sample(pipe, model, prompt, 32, 32, torch.Generator().manual_seed(seed)))

    first, again, other = sample(0), sample(0), sample(1)
    hook.remove()
    assert first.shape == (32, 32, 3)
    assert (first == again).all() and not (first == other).all()
    assert set(lengths) == {512}  # dev's T5 length, as in training
    assert pipe.transformer is denoiser_of(model) and pipe.scheduler is not model.noise_scheduler
    assert torch.equal(torch.as_tensor(model.noise_scheduler.__dict__.get("timesteps")), torch.as_tensor(before))


@pytest.mark.slow
def test_the_estimators_table_for_full_size_flux_dev():
    from guitrainer.engine.families.flux1.spec import flux_spec

    spec = flux_spec()
    assert spec.transformer == 11_901_408_320  # 23.8 GB in bf16, flux1-dev.safetensors' size
    assert spec.text_encoders == (123_060_480, 4_762_310_656)  # CLIP-L (as SD 1.5's), T5-XXL's encoder
    assert spec.vae_encoder + spec.vae_decoder == 83_819_683 and spec.vae_channels == 128
    assert spec.blocks == (19, 38) and spec.joint_attention_dim == 4096
    assert spec.outside_blocks == 64_124_992  # embedders + final layer: what fp8 storage keeps in bf16
    attention = {(i, o, c, f, t) for i, o, c, f, t in spec.lora["attention"]}
    # double blocks: to_q/k/v + to_out see the image tokens (one per 2x2 latent pixels), the add_* the text;
    # single blocks: q, k, v see both
    assert attention == {(3072, 3072, 19 * 4, 0.25, 0), (3072, 3072, 19 * 4, 0.0, 1), (3072, 3072, 38 * 3, 0.25, 1)}
    full = dict(((i, o, f, t), c) for i, o, c, f, t in spec.lora["attention_ff_proj"])
    assert full[(3072, 18432, 0.0, 0)] == 38  # img_mod / txt_mod: one vector per image
    assert full[(3072, 9216, 0.0, 0)] == 38  # single blocks' modulation
    assert full[(15360, 3072, 0.25, 1)] == 38  # linear2 (proj_out): input [attention 3072 | mlp 12288]
    # per rank: 19 x (8 x 6144 attention + 2 x 15360 x 2 MLPs + 2 x 21504 modulation)
    #         + 38 x (3 x 6144 q/k/v + 15360 proj_mlp + 18432 proj_out + 12288 modulation)
    assert spec.lora_params_per_rank("attention_ff_proj") == 19 * (8 * 6144 + 4 * 15360 + 2 * 21504) + 38 * (
        3 * 6144 + 15360 + 18432 + 12288)
    assert spec.text_encoder_lora["attention"][1] == ()  # T5 frozen
    assert spec.lora_params_per_rank("attention", text_encoder=True) - spec.lora_params_per_rank("attention") == (
        12 * (4 * 1536 + 2 * 3840))


@pytest.mark.slow
def test_the_shipped_spec_is_the_one_computed_from_the_architecture():
    from guitrainer.core.families.flux1 import FACTS
    from guitrainer.core.memory import specs
    from guitrainer.engine.families.flux1.spec import as_model_spec, flux_spec

    assert FACTS.spec == as_model_spec(flux_spec()) == specs.spec_of("flux1")
    assert FACTS.spec.lora_params_per_rank("attention_ff_proj") == flux_spec().lora_params_per_rank("attention_ff_proj")
