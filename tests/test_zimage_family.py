"""Z-Image on the seam, checked against diffusers' ZImagePipeline: the caption features are the pipeline's (each
caption its own tokens, through Qwen3's chat template), the transformer gets 1 − σ and its output is negated as the
pipeline does, samples come from ZImagePipeline; fp8 storage keeps what it should; the metadata is musubi-tuner's;
the estimator's table is the architecture's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import config_with, tiny_zimage

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.zimage import FAMILY
from guitrainer.engine.families.zimage.text import captions_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return FAMILY.load_folder(tiny_zimage.save_diffusers(tiny_zimage.build(seed=8), tmp_path_factory.mktemp("zimage")))


def _pipe(model):
    from diffusers import ZImagePipeline

    return ZImagePipeline(scheduler=model.noise_scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                          tokenizer=model.tokenizers[0], transformer=model.denoiser)


def test_the_caption_features_are_what_zimage_pipeline_computes(model):
    captions = ["a photo of sks", "a red square on a blue dog sitting"]
    ours = captions_of(FAMILY.encode_text(model, model.text_encoders, captions, torch.device("cpu")))
    theirs = _pipe(model)._encode_prompt(list(captions), device=torch.device("cpu"))
    assert [t.shape for t in ours] == [t.shape for t in theirs] and ours[0].shape[0] != ours[1].shape[0]
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_the_transformer_gets_one_minus_sigma_and_its_output_is_negated(model):
    cfg = config_with(model__family="zimage")
    seen: dict = {}

    def spy(_m, args, kwargs):
        seen["t"] = args[1].clone()

    latents = torch.randn(2, 16, 8, 8)
    draw = FAMILY.draw(cfg, model, latents, torch.tensor([0.25, 0.75]))
    assert torch.allclose(draw.target, draw.noise - latents)  # the velocity
    text = FAMILY.encode_text(model, model.text_encoders, ["a photo", "a cat"], torch.device("cpu"))
    hook = model.denoiser.register_forward_pre_hook(spy, with_kwargs=True)
    with torch.no_grad():
        ours = FAMILY.predict(cfg, model.denoiser, model, draw, text, {})
    hook.remove()
    assert torch.equal(seen["t"], torch.tensor([0.75, 0.25])) and seen["t"].dtype == torch.float32  # as the pipeline
    with torch.no_grad():
        raw = model.denoiser(list(draw.noisy.unsqueeze(2).unbind(0)), torch.tensor([0.75, 0.25]), captions_of(text),
                             return_dict=False)[0]
    assert torch.equal(ours, -torch.stack(raw).squeeze(2))


def test_samples_come_from_zimage_pipeline_and_leave_the_training_scheduler_alone(model):
    pipe = FAMILY.pipeline(model, "default")
    assert type(pipe).__name__ == "ZImagePipeline" and pipe.scheduler is not model.noise_scheduler
    assert FAMILY.size_multiple(model) == 4
    prompt = SamplePrompt("a photo of sks", "", 32, 32, 2, 0.0, 0)

    def sample(seed: int) -> np.ndarray:
        return np.asarray(FAMILY.sample(pipe, model, prompt, 32, 32, torch.Generator().manual_seed(seed)))

    first, again, other = sample(0), sample(0), sample(1)
    assert first.shape == (32, 32, 3) and (first == again).all() and not (first == other).all()
    assert model.noise_scheduler.timesteps is None or len(model.noise_scheduler.timesteps) == 1000


def test_fp8_storage_keeps_the_embedders_and_the_final_layer():
    from guitrainer.engine.network.layer_casting import cast_layerwise

    transformer = tiny_zimage.build(seed=0).transformer
    cast_layerwise(transformer, torch.float8_e4m3fn, torch.float32, FAMILY.storage_skip_patterns)
    dtypes = {n: m.weight.dtype for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    kept = {n for n, d in dtypes.items() if d == torch.float32}
    assert kept == {"all_x_embedder.2-1", "all_final_layer.2-1.linear", "all_final_layer.2-1.adaLN_modulation.1",
                    "t_embedder.mlp.0", "t_embedder.mlp.2", "cap_embedder.1"}
    assert dtypes["layers.1.attention.to_q"] == torch.float8_e4m3fn and dtypes["layers.0.adaLN_modulation.0"] == torch.float8_e4m3fn


def test_metadata_under_musubi_tuners_names():
    meta = FAMILY.metadata(config_with(model__family="zimage"), None)
    assert meta["ss_base_model_version"] == "z_image" and meta["modelspec.architecture"] == "Z-Image/lora"
    assert meta["ss_timestep_sampling"] == "shift" and meta["ss_discrete_flow_shift"] == "3.0"


def test_the_estimators_table_for_full_size_zimage():
    from guitrainer.core.families.zimage import FACTS
    from guitrainer.core.memory import specs
    from guitrainer.engine.families.zimage.spec import as_model_spec

    spec = as_model_spec()
    assert FACTS.spec == spec == specs.spec_of("zimage")
    assert spec.denoiser == 6_154_908_736 and spec.text_encoders == (4_022_468_096,)  # 12.3 GB and 8.0 GB in bf16
    assert spec.blocks == ((2, 180_910_336, 3_947_520), (2, 176_962_816, 0), (30, 180_910_336, 3_947_520))
    # per rank: 34 blocks x (4 x 7680 attention + 3 x 14080 SwiGLU)
    assert spec.lora_params_per_rank("attention_ff") == 34 * (4 * 7680 + 3 * 14080)


def test_a_turbo_base_model_is_warned_about_and_base_is_not(model):
    from dataclasses import replace

    from guitrainer.engine.families.zimage.family import is_turbo

    said: list[str] = []
    cfg = config_with(model__family="zimage")
    FAMILY.prepare(cfg, replace(model, path="/models/z_image_turbo_bf16.safetensors"), said.append)
    assert len(said) == 1 and "8 steps" in said[0] and "Base" in said[0]
    FAMILY.prepare(cfg, replace(model, path="/models/z_image_bf16.safetensors"), said.append)
    assert len(said) == 1
    assert is_turbo("Tongyi-MAI/Z-Image-Turbo") and not is_turbo("Tongyi-MAI/Z-Image")


def test_a_long_caption_is_cut_at_its_length_from_a_bf16_mask():
    """The text cache keeps the mask in the training dtype; bf16 holds only even numbers above 256."""
    hidden = torch.randn(2, 512, 4, dtype=torch.bfloat16)
    mask = torch.zeros(2, 512, dtype=torch.bfloat16)
    mask[0, :301] = 1  # right padded
    mask[1, 512 - 257:] = 1  # left padded
    first, second = captions_of({"hidden": hidden, "mask": mask})
    assert first.shape[0] == 301 and torch.equal(first, hidden[0, :301])
    assert second.shape[0] == 257 and torch.equal(second, hidden[1, 512 - 257:])
