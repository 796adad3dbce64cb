"""Qwen-Image on the seam, checked against diffusers' QwenImagePipeline: the caption features are the pipeline's
(its template, its last hidden state, the template's prefix dropped), the latents are the 3-D VAE's normalised as
the pipeline denormalises them, the transformer gets σ, 2x2 tokens and the pipeline's ``img_shapes``, samples come
from QwenImagePipeline; 4-bit storage keeps what it should; the metadata is musubi-tuner's; the estimator's table
is the architecture's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import config_with, tiny_qwenimage

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.qwenimage import FAMILY
from guitrainer.engine.families.qwenimage.text import cut, drop_count

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tiny_qwenimage.save_diffusers(tiny_qwenimage.build(seed=8), tmp_path_factory.mktemp("qwenimage"))
    return FAMILY.load_folder(folder)


def _pipe(model):
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline(scheduler=model.noise_scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                             tokenizer=model.tokenizers[0], transformer=model.denoiser)
    pipe.prompt_template_encode_start_idx = drop_count(model.tokenizers[0])  # 34 under Qwen2.5's tokenizer
    return pipe


def test_the_caption_features_are_what_qwen_image_pipeline_computes(model):
    captions = ["a photo of sks", "a red square on a blue dog sitting"]
    hidden, mask = cut(FAMILY.encode_text(model, model.text_encoders, captions, torch.device("cpu")))
    theirs, their_mask = _pipe(model).encode_prompt(list(captions), device=torch.device("cpu"))
    assert hidden.shape == theirs.shape and mask is not None and torch.equal(mask, their_mask.bool())
    torch.testing.assert_close(hidden[mask], theirs[their_mask.bool()], rtol=0, atol=1e-6)
    assert drop_count(model.tokenizers[0]) < 34  # the test tokenizer's own count, not Qwen2.5's


def test_latents_are_the_3d_vaes_normalised_as_the_pipeline_decodes_them(model):
    vae = model.vae
    pixels = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        mean, std = FAMILY.latent_distribution(vae, pixels)
        dist = vae.encode(pixels.unsqueeze(2)).latent_dist
    assert mean.shape == (2, 16, 4, 4) and torch.equal(mean, dist.mean[:, :, 0]) and torch.equal(std, dist.std[:, :, 0])
    ours = FAMILY.to_model_latents(vae, mean)
    # QwenImagePipeline's decode: latents / (1 / std) + mean, per channel
    back = ours / (1.0 / torch.tensor(vae.config.latents_std).view(1, 16, 1, 1)) + torch.tensor(vae.config.latents_mean).view(1, 16, 1, 1)
    torch.testing.assert_close(back, mean, rtol=0, atol=1e-6)


def test_the_transformer_gets_sigma_packed_tokens_and_the_pipelines_image_shapes(model):
    cfg = config_with(model__family="qwenimage")
    seen: dict = {}

    def spy(_m, args, kwargs):
        seen.update(kwargs)

    latents = torch.randn(2, 16, 8, 6)
    draw = FAMILY.draw(cfg, model, latents, torch.tensor([0.25, 0.75]))
    assert torch.allclose(draw.target, draw.noise - latents)  # the velocity
    text = FAMILY.encode_text(model, model.text_encoders, ["a photo", "a red square on a blue dog"], torch.device("cpu"))
    hook = model.denoiser.register_forward_pre_hook(spy, with_kwargs=True)
    with torch.no_grad():
        ours = FAMILY.predict(cfg, model.denoiser, model, draw, text, {})
    hook.remove()
    assert torch.equal(seen["timestep"], torch.tensor([0.25, 0.75])) and seen["img_shapes"] == [[(1, 4, 3)]] * 2
    pipe = _pipe(model)
    packed = pipe._pack_latents(draw.noisy, 2, 16, 8, 6)
    assert torch.equal(seen["hidden_states"], packed)
    with torch.no_grad():
        raw = model.denoiser(hidden_states=packed, timestep=torch.tensor([0.25, 0.75]),
                             encoder_hidden_states=seen["encoder_hidden_states"],
                             encoder_hidden_states_mask=seen["encoder_hidden_states_mask"],
                             img_shapes=[[(1, 4, 3)]] * 2, return_dict=False)[0]
    # the pipeline's unpack (8x VAE, latents 8 x 6 = an image of 64 x 48), its frame axis dropped
    torch.testing.assert_close(ours, pipe._unpack_latents(raw, 64, 48, 8)[:, :, 0], rtol=0, atol=0)


def test_samples_come_from_qwen_image_pipeline_and_leave_the_training_scheduler_alone(model):
    pipe = FAMILY.pipeline(model, "default")
    assert type(pipe).__name__ == "QwenImagePipeline" and pipe.scheduler is not model.noise_scheduler
    assert FAMILY.size_multiple(model) == 16

    def sample(seed: int, guidance: float = 4.0) -> np.ndarray:
        prompt = SamplePrompt("a photo of sks", "", 32, 32, 2, guidance, 0)
        return np.asarray(FAMILY.sample(pipe, model, prompt, 32, 32, torch.Generator().manual_seed(seed)))

    first, again, other, plain = sample(0), sample(0), sample(1), sample(0, 1.0)
    assert first.shape == (32, 32, 3) and (first == again).all() and not (first == other).all()
    assert not (first == plain).all()  # guidance 4 makes an unconditional pass; guidance 1 none
    assert model.noise_scheduler.timesteps is None or len(model.noise_scheduler.timesteps) == 1000


def test_four_bit_storage_keeps_the_embedders_and_the_output_layers():
    pytest.importorskip("bitsandbytes")
    from guitrainer.engine.network.quantised_storage import quantise_linears

    transformer = tiny_qwenimage.build(seed=0).transformer
    quantise_linears(transformer, "nf4", torch.bfloat16, FAMILY.storage_skip_patterns)
    kinds = {n: type(m).__name__ for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    kept = {n for n, k in kinds.items() if k != "Linear4bit"}
    assert kept == {"img_in", "txt_in", "proj_out", "norm_out.linear", "time_text_embed.timestep_embedder.linear_1",
                    "time_text_embed.timestep_embedder.linear_2"}
    assert kinds["transformer_blocks.1.attn.to_q"] == "Linear4bit" and kinds["transformer_blocks.0.img_mod.1"] == "Linear4bit"


def test_metadata_under_musubi_tuners_names():
    meta = FAMILY.metadata(config_with(model__family="qwenimage"), None)
    assert meta["ss_base_model_version"] == "qwen_image" and meta["modelspec.architecture"] == "Qwen-Image/lora"
    assert meta["ss_timestep_sampling"] == "shift" and meta["ss_discrete_flow_shift"] == "2.2"


def test_the_estimators_table_for_full_size_qwen_image():
    from guitrainer.core.families.qwenimage import FACTS
    from guitrainer.core.memory import specs
    from guitrainer.engine.families.qwenimage.spec import as_model_spec

    spec = as_model_spec()
    assert FACTS.spec == spec == specs.spec_of("qwenimage")
    # 40.9 GB in bf16 (qwen_image_bf16.safetensors), Qwen2.5-VL-7B's language model without its vision tower
    assert spec.denoiser == 20_430_401_088 and spec.text_encoders == (7_070_619_136,)
    assert spec.blocks == ((60, 339_831_296, 113_283_072),)
    # per rank: 60 blocks x (8 attention x 6144 + 4 MLP x 15360)
    assert spec.lora_params_per_rank("attention_ff") == 60 * (8 * 6144 + 4 * 15360)
