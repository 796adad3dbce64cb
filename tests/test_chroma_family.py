"""Chroma on the seam, checked against diffusers' ChromaPipeline: the text conditioning and the attention mask are
the pipeline's, the transformer gets σ and the mask the pipeline gives it, samples come from ChromaPipeline; fp8
storage keeps what it should; the metadata is sd-scripts'; the estimator's table is the architecture's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import config_with, tiny_chroma

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.base import Draw
from guitrainer.engine.families.chroma import FAMILY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return FAMILY.load_folder(tiny_chroma.save_diffusers(tiny_chroma.build(seed=8), tmp_path_factory.mktemp("chroma")))


def _pipe(model):
    from diffusers import ChromaPipeline

    return ChromaPipeline(scheduler=model.noise_scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                          tokenizer=model.tokenizers[0], transformer=model.denoiser)


def test_the_conditioning_is_what_chroma_pipeline_computes(model):
    captions = ["a photo of sks", "a red square on a blue dog"]
    ours = FAMILY.encode_text(model, model.text_encoders, captions, torch.device("cpu"))
    embeds, _ids, mask = _pipe(model).encode_prompt(captions, None, device=torch.device("cpu"),
                                                    do_classifier_free_guidance=False, max_sequence_length=512)[:3]
    assert ours["t5"].shape == (2, 512, model.text_encoders[0].config.d_model)
    assert torch.equal(ours["t5"], embeds) and torch.equal(ours["mask"], mask)
    lengths = ours["mask"].sum(dim=1).tolist()  # the real tokens and one padding token
    assert lengths == [len(model.tokenizers[0](c).input_ids) + 1 for c in captions]


def test_the_transformer_gets_sigma_and_each_caption_cut_to_its_tokens_and_one_pad(model):
    """Not the pipeline's float mask (SDPA adds it; diffusers #12116): each caption cut to its real tokens and one
    padding token, as ComfyUI and sd-scripts feed Chroma; a batch of captions of different lengths gives each
    image what it gets alone."""
    cfg = config_with(model__family="chroma")
    seen: list[dict] = []
    latents = torch.randn(2, 16, 8, 8)
    draw = FAMILY.draw(cfg, model, latents, torch.tensor([0.25, 0.75]))
    sigma = torch.tensor([0.25, 0.75]).view(2, 1, 1, 1)
    assert isinstance(draw, Draw) and torch.allclose(draw.noisy, (1 - sigma) * latents + sigma * draw.noise)
    assert torch.allclose(draw.target, draw.noise - latents)  # raw: the velocity
    captions = ["a photo", "a red square on a blue dog sitting"]
    text = FAMILY.encode_text(model, model.text_encoders, captions, torch.device("cpu"))
    hook = model.denoiser.register_forward_pre_hook(lambda _m, _a, kw: seen.append(dict(kw)), with_kwargs=True)
    with torch.no_grad():
        both = FAMILY.predict(cfg, model.denoiser, model, draw, text, {})
    hook.remove()
    want = [len(model.tokenizers[0](c).input_ids) + 1 for c in captions]
    assert sorted(kw["encoder_hidden_states"].shape[1] for kw in seen) == sorted(want)
    assert all(kw.get("attention_mask") is None for kw in seen) and "guidance" not in seen[0]
    assert sorted(kw["timestep"].tolist() for kw in seen) == [[0.25], [0.75]]
    for i in range(2):  # each image alone gives what it got in the batch
        alone = Draw(draw.noise[i:i + 1], draw.timesteps[i:i + 1], draw.noisy[i:i + 1], draw.target[i:i + 1])
        with torch.no_grad():
            one = FAMILY.predict(cfg, model.denoiser, model, alone, {k: v[i:i + 1] for k, v in text.items()}, {})
        torch.testing.assert_close(one, both[i:i + 1], rtol=0, atol=1e-6)
    # the cut is what a bool mask over the padded sequence computes (what ComfyUI's Chroma does), not the float one
    t5, mask = text["t5"][:1], text["mask"][:1].bool()
    tokens = (latents[:1].shape[-1] // 2) ** 2
    joint = torch.cat([mask, torch.ones(1, tokens, dtype=torch.bool)], dim=1)
    from guitrainer.engine.families.flux1 import latents as packing

    with torch.no_grad():
        masked = model.denoiser(hidden_states=packing.pack(draw.noisy[:1]), encoder_hidden_states=t5,
                                timestep=draw.timesteps[:1], img_ids=packing.image_ids(8, 8, "cpu", torch.float32),
                                txt_ids=packing.text_ids(t5.shape[1], "cpu", torch.float32), attention_mask=joint,
                                return_dict=False)[0]
    torch.testing.assert_close(packing.unpack(masked, 8, 8), both[:1], rtol=0, atol=1e-5)


def test_samples_come_from_chroma_pipeline_and_leave_the_training_scheduler_alone(model):
    before = torch.as_tensor(model.noise_scheduler.timesteps).clone() if model.noise_scheduler.timesteps is not None else None
    pipe = FAMILY.pipeline(model, "default")
    assert type(pipe).__name__ == "ChromaPipeline" and pipe.scheduler is not model.noise_scheduler
    assert FAMILY.size_multiple(model) == 4  # the tiny VAE downscales 2x, times the 2x2 packing
    prompt = SamplePrompt("a photo of sks", "", 32, 32, 2, 3.0, 0)

    def sample(seed: int) -> np.ndarray:
        return np.asarray(FAMILY.sample(pipe, model, prompt, 32, 32, torch.Generator().manual_seed(seed)))

    seen: list[torch.Tensor] = []
    hook = model.denoiser.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["encoder_hidden_states"]),
                                                    with_kwargs=True)
    first, again, other = sample(0), sample(0), sample(1)
    hook.remove()
    assert first.shape == (32, 32, 3) and (first == again).all() and not (first == other).all()
    # the prompt cut as in training (its tokens and one pad), and the empty negative prompt likewise
    assert {t.shape[1] for t in seen} == {len(model.tokenizers[0]("a photo of sks").input_ids) + 1,
                                          len(model.tokenizers[0]("").input_ids) + 1}
    after = model.noise_scheduler.timesteps
    assert (before is None and after is None) or torch.equal(torch.as_tensor(after), before)


def test_fp8_storage_keeps_the_embedders_the_approximator_and_the_norms():
    from guitrainer.engine.network.layer_casting import cast_layerwise

    transformer = tiny_chroma.build(seed=0).transformer
    cast_layerwise(transformer, torch.float8_e4m3fn, torch.float32, FAMILY.storage_skip_patterns)
    dtypes = {n: m.weight.dtype for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    kept = {n for n, d in dtypes.items() if d == torch.float32}
    assert kept == {"x_embedder", "context_embedder", "proj_out", "distilled_guidance_layer.in_proj",
                    "distilled_guidance_layer.out_proj",
                    *(f"distilled_guidance_layer.layers.{i}.linear_{j}" for i in (0, 1) for j in (1, 2))}
    assert dtypes["single_transformer_blocks.1.proj_out"] == torch.float8_e4m3fn
    assert dtypes["transformer_blocks.0.attn.to_q"] == torch.float8_e4m3fn


def test_metadata_under_sd_scripts_names():
    meta = FAMILY.metadata(config_with(model__family="chroma"), None)
    assert meta["ss_base_model_version"] == "chroma" and meta["ss_model_type"] == "chroma"
    assert meta["modelspec.architecture"] == "chroma/lora" and meta["ss_network_module"] == "networks.lora_flux"
    assert meta["ss_timestep_sampling"] == "sigmoid" and meta["ss_model_prediction_type"] == "raw"
    assert meta["ss_apply_t5_attn_mask"] == "True" and meta["ss_guidance_scale"] == "0.0"


def test_the_estimators_table_for_full_size_chroma():
    from guitrainer.core.families.chroma import FACTS
    from guitrainer.core.memory import specs
    from guitrainer.engine.families.chroma.spec import as_model_spec

    spec = as_model_spec()
    assert FACTS.spec == spec == specs.spec_of("chroma")
    assert spec.denoiser == 8_899_983_424  # "8.9 B parameters" (lodestones' model card)
    assert spec.text_encoders == (4_762_310_656,)  # T5-XXL's encoder, as Flux's
    assert spec.blocks == ((19, 226_548_224, 0), (38, 113_271_040, 0))  # no modulation Linears in the blocks
    # per rank: 19 x (8 x 6144 attention + 2 x 2 x 15360 MLPs) + 38 x (3 x 6144 q/k/v + 15360 proj_mlp + 18432 proj_out)
    assert spec.lora_params_per_rank("attention_ff") == 19 * (8 * 6144 + 4 * 15360) + 38 * (3 * 6144 + 15360 + 18432)
    assert spec.lora_params_per_rank("attention_ff_proj") == spec.lora_params_per_rank("attention_ff")
