"""SD 3.5's text conditioning, objective and LoRA targets on the tiny model: the conditioning equals diffusers'
own ``encode_prompt``, the objective's numbers are worked by hand, and a few optimizer steps through
draw / predict / loss with a peft LoRA on our targets make the loss fall."""

from __future__ import annotations

import pytest
import torch
from helpers import config_with
from helpers.tiny_sd35 import CAPTIONS, build_tiny_sd35

from guitrainer.engine import flow_matching
from guitrainer.engine.families.sd35 import loading, network, objective, text
from guitrainer.engine.families.sd35.loaded import denoiser_of

pytestmark = pytest.mark.slow
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_sd35(tmp_path_factory.mktemp("tiny_sd35"))


@pytest.fixture
def model(tiny):
    return loading.load_folder(tiny.folder)


def _pipeline(model, with_t5: bool):
    from diffusers import StableDiffusion3Pipeline

    return StableDiffusion3Pipeline(
        transformer=denoiser_of(model), scheduler=model.noise_scheduler, vae=model.vae,
        text_encoder=model.text_encoders[0], tokenizer=model.tokenizers[0],
        text_encoder_2=model.text_encoders[1], tokenizer_2=model.tokenizers[1],
        text_encoder_3=model.text_encoders[2] if with_t5 else None, tokenizer_3=model.tokenizers[2] if with_t5 else None,
    )


@torch.no_grad()
def test_the_conditioning_is_what_diffusers_pipeline_encodes(model):
    ours = text.encode(model, model.text_encoders, CAPTIONS, CPU)
    # 77 CLIP tokens + 256 T5 tokens, T5's width (2304 here, 4096 full size); pooled CLIP-L 768 + CLIP-G 1280
    assert ours["hidden"].shape == (2, 77 + 256, 2304) and ours["pooled"].shape == (2, 2048)
    assert torch.all(ours["hidden"][:, :77, 2048:] == 0)  # the CLIPs' 2048 zero-padded to T5's width
    hidden, _, pooled, _ = _pipeline(model, True).encode_prompt(
        CAPTIONS, CAPTIONS, CAPTIONS, device=CPU, do_classifier_free_guidance=False, max_sequence_length=256
    )
    torch.testing.assert_close(ours["hidden"], hidden, rtol=0, atol=0)
    torch.testing.assert_close(ours["pooled"], pooled, rtol=0, atol=0)


@torch.no_grad()
def test_without_t5_zeros_take_its_place_as_in_the_pipeline(model):
    model.text_encoders = model.text_encoders[:2]
    model.tokenizers = model.tokenizers[:2]
    ours = text.encode(model, model.text_encoders, CAPTIONS, CPU)
    assert ours["hidden"].shape == (2, 333, 2304) and torch.all(ours["hidden"][:, 77:] == 0)
    hidden, _, pooled, _ = _pipeline(model, False).encode_prompt(
        CAPTIONS, CAPTIONS, CAPTIONS, device=CPU, do_classifier_free_guidance=False, max_sequence_length=256
    )
    assert torch.equal(ours["hidden"], hidden) and torch.equal(ours["pooled"], pooled)


def test_the_draw_the_loss_and_the_timestep_scale_by_hand(model):
    config = config_with()
    latents = torch.randn(2, 16, 8, 8, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.25, 0.75])
    draw = objective.draw(config, latents, sigma)
    torch.testing.assert_close(draw.noisy[0], 0.75 * latents[0] + 0.25 * draw.noise[0])
    torch.testing.assert_close(draw.noisy[1], 0.25 * latents[1] + 0.75 * draw.noise[1])
    torch.testing.assert_close(draw.target, draw.noise - latents)
    # sigma_scaled (SD 3's default): (x_σ − σ·pred − x0)² = σ²·(pred − v)²; a prediction off by 1 everywhere
    prediction = draw.target + 1.0
    loss = objective.loss(config, prediction, draw, latents)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx((0.25**2 + 0.75**2) / 2, rel=1e-5)
    raw = objective.loss(config_with(flow__model_prediction_type="raw"), prediction, draw, latents)
    assert raw.item() == pytest.approx(1.0, rel=1e-5)

    seen = {}
    transformer = denoiser_of(model)

    def record(_module, args):  # returns None: a pre-hook's return value would replace the arguments
        seen["t"] = args[0].clone()

    handle = transformer.time_text_embed.register_forward_pre_hook(record)
    texts = {"hidden": torch.zeros(2, 10, 2304), "pooled": torch.zeros(2, 2048)}
    with torch.no_grad():
        out = objective.predict(transformer, draw, texts, {})
    handle.remove()
    assert out.shape == latents.shape
    torch.testing.assert_close(seen["t"], torch.tensor([250.0, 750.0]))  # the transformer takes 0–1000


def test_drawn_noise_levels_are_logit_normal_through_shift_3():
    """Median of sigmoid(N(0, 1)) is 0.5; shift 3 maps it to 3·0.5 / (1 + 2·0.5) = 0.75."""
    torch.manual_seed(0)
    draw = objective.draw(config_with(), torch.zeros(4000, 16, 2, 2), None)
    assert draw.timesteps.median().item() == pytest.approx(0.75, abs=0.02)
    torch.manual_seed(0)
    expected = flow_matching.sample_sigmas(objective.settings(config_with()), 4000, image_tokens=1)
    assert torch.equal(draw.timesteps, expected)
    assert objective.validation_timesteps(config_with(), 4) == [0.125, 0.375, 0.625, 0.875]


@pytest.mark.parametrize(("target", "count"), [("attention", 27), ("attention_ff", 37), ("attention_ff_proj", 43)])
def test_each_target_choice_injects_the_layers_it_names(model, target, count):
    """Per block of the tiny model (0: dual, 1: plain, 2: last, pre-only context):
    attention: x q/k/v/out 4 + context q/k/v 3 (+ to_add_out but in the last) + attn2 4 in block 0 = 12, 8, 7 → 27;
    + MLPs: ff 2 each, ff_context 2 but in the last → +10 = 37; + adaLN: norm1 and norm1_context each block → +6 = 43."""
    from peft import LoraConfig

    from guitrainer.engine.network.lora import lora_layers

    cfg = config_with(network__target_modules=target)
    transformer = denoiser_of(model)
    transformer.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=list(network.denoiser_targets(cfg.network))))
    layers = lora_layers(transformer)
    assert len(layers) == count
    assert "transformer_blocks.0.attn2.to_q" in layers and "norm_out.linear" not in layers
    assert network.text_encoder_targets(2, cfg.network) == ()  # T5 stays frozen
    assert len(network.text_encoder_targets(0, cfg.network)) == (4 if target == "attention" else 6)


def test_lycoris_networks_are_refused_for_sd35():
    with pytest.raises(ValueError, match="plain LoRA only"):
        network.denoiser_targets(config_with(network__type="loha").network)


def _inject(model, cfg) -> list[torch.nn.Parameter]:
    from peft import LoraConfig, inject_adapter_in_model

    def lora(targets: tuple[str, ...]) -> LoraConfig:
        return LoraConfig(r=4, lora_alpha=4, init_lora_weights="gaussian", target_modules=list(targets))

    denoiser_of(model).add_adapter(lora(network.denoiser_targets(cfg.network)))
    for i in (0, 1):
        inject_adapter_in_model(lora(network.text_encoder_targets(i, cfg.network)), model.text_encoders[i])
    params = [p for m in (denoiser_of(model), *model.text_encoders) for n, p in m.named_parameters() if "lora_" in n]
    for p in params:
        p.requires_grad_(True)
    return params


def test_a_few_optimizer_steps_make_the_loss_fall(model):
    cfg = config_with(network__target_modules="attention_ff_proj")
    params = _inject(model, cfg)
    optimizer = torch.optim.AdamW(params, lr=3e-3)
    latents = torch.randn(2, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    sigma = torch.tensor([0.3, 0.7])
    losses = []
    for _ in range(4):
        conditioning = text.encode(model, model.text_encoders, CAPTIONS, CPU)
        torch.manual_seed(1)  # the same noise each step: only the LoRA changes
        draw = objective.draw(cfg, latents, sigma)
        loss = objective.loss(cfg, objective.predict(denoiser_of(model), draw, conditioning, {}), draw, latents)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(p.grad is not None for p in params[:4])


def test_bf16_autocast_runs_the_step(model):
    cfg = config_with()
    params = _inject(model, cfg)
    latents = torch.randn(2, 16, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        conditioning = text.encode(model, model.text_encoders, CAPTIONS, CPU)
        draw = objective.draw(cfg, latents, None)
        prediction = objective.predict(denoiser_of(model), draw, conditioning, {})
    loss = objective.loss(cfg, prediction, draw, latents)
    loss.backward()
    assert prediction.dtype == torch.bfloat16 and loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
