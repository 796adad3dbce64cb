"""engine.flow_matching against values worked out by hand from the published formulas."""

from __future__ import annotations

import math

import pytest
import torch

from guitrainer.engine import flow_matching as fm


def test_the_noisy_input_runs_from_the_latents_to_the_noise():
    x0, eps = torch.full((2, 3), 2.0), torch.full((2, 3), -1.0)
    sigma = torch.tensor([0.0, 0.25])
    noisy = fm.noisy_input(x0, eps, sigma)
    assert noisy[0].tolist() == [2.0] * 3  # σ = 0: the clean latents
    assert noisy[1].tolist() == [0.75 * 2.0 - 0.25] * 3  # 1.25
    assert fm.velocity_target(x0, eps).tolist() == [[-3.0] * 3] * 2  # ε − x0


def test_shift_and_the_flux_time_shift():
    s = torch.tensor([0.0, 0.5, 1.0])
    assert fm.shifted(s, 3.0).tolist() == pytest.approx([0.0, 0.75, 1.0])  # 3·0.5 / (1 + 2·0.5)
    assert fm.shifted(s, 1.0) is s
    assert fm.flux_mu(256) == pytest.approx(0.5) and fm.flux_mu(4096) == pytest.approx(1.15)
    # 1024 px Flux: 64 × 64 packed tokens = 4096 → μ = 1.15; σ = 0.5 → e^1.15 / (e^1.15 + 1)
    assert fm.time_shifted(torch.tensor([0.5]), 1.15).item() == pytest.approx(math.exp(1.15) / (math.exp(1.15) + 1))


def test_each_sampling_draws_its_distribution():
    torch.manual_seed(0)
    n = 200_000

    def draw(**kw):
        return fm.sample_sigmas(fm.FlowSettings(**kw), n, image_tokens=4096)

    uniform = draw(timestep_sampling="uniform")
    assert uniform.mean().item() == pytest.approx(0.5, abs=0.01) and uniform.min() >= 0 and uniform.max() <= 1
    # the median of sigmoid(N(0, 1)) is sigmoid(0) = 0.5; shift 3 moves it to 0.75
    assert draw(timestep_sampling="sigmoid").median().item() == pytest.approx(0.5, abs=0.01)
    assert draw(timestep_sampling="shift", shift=3.0).median().item() == pytest.approx(0.75, abs=0.01)
    # logit-normal: the median is sigmoid(mean)
    assert draw(timestep_sampling="logit_normal", logit_mean=1.0).median().item() == pytest.approx(
        1 / (1 + math.exp(-1)), abs=0.01)
    # flux_shift at 4096 tokens: the median is the time-shifted 0.5
    assert draw(timestep_sampling="flux_shift").median().item() == pytest.approx(
        math.exp(1.15) / (math.exp(1.15) + 1), abs=0.01)
    # a range narrows the draw linearly
    narrow = draw(timestep_sampling="uniform", min_sigma=0.2, max_sigma=0.4)
    assert narrow.min().item() >= 0.2 and narrow.max().item() <= 0.4


def test_raw_compares_velocities_and_sigma_scaled_compares_clean_latents():
    x0, eps = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -0.5]])
    sigma = torch.tensor([0.4])
    noisy = fm.noisy_input(x0, eps, sigma)
    perfect = fm.velocity_target(x0, eps)  # the exact velocity: both losses are 0
    for kind in fm.PREDICTION_TYPES:
        assert fm.flow_loss(fm.FlowSettings(model_prediction_type=kind), perfect, noisy, x0, eps, sigma).item() == pytest.approx(0, abs=1e-12)
    # off by 1 everywhere: raw MSE 1; sigma_scaled sees σ·1 = 0.4 off: MSE 0.16 (the velocity loss times σ²)
    off = perfect + 1
    assert fm.flow_loss(fm.FlowSettings(), off, noisy, x0, eps, sigma).item() == pytest.approx(1.0)
    assert fm.flow_loss(fm.FlowSettings(model_prediction_type="sigma_scaled"), off, noisy, x0, eps, sigma).item() == pytest.approx(0.16)


def test_weightings():
    s = torch.tensor([0.5])
    assert fm.loss_weighting("none", s).item() == 1.0
    assert fm.loss_weighting("sigma_sqrt", s).item() == pytest.approx(4.0)
    assert fm.loss_weighting("cosmap", s).item() == pytest.approx(2 / (math.pi * 0.5))


def test_fixed_sigmas_and_bad_settings():
    assert fm.fixed_sigmas(4, fm.FlowSettings()) == [0.125, 0.375, 0.625, 0.875]
    with pytest.raises(ValueError, match="timestep_sampling"):
        fm.FlowSettings(timestep_sampling="sigma")


def test_auto_settings_take_the_familys_defaults_and_explicit_ones_win():
    from guitrainer.config import TrainingConfig

    defaults = {"timestep_sampling": "shift", "discrete_flow_shift": 3.1582, "model_prediction_type": "raw"}
    cfg = TrainingConfig()
    s = fm.settings_for(cfg, defaults)
    assert (s.timestep_sampling, s.shift, s.model_prediction_type, s.weighting_scheme) == ("shift", 3.1582, "raw", "none")
    assert (s.min_sigma, s.max_sigma) == (0.0, 1.0)
    cfg.flow.timestep_sampling, cfg.flow.discrete_flow_shift = "logit_normal", 1.0
    cfg.loss.min_timestep, cfg.loss.max_timestep = 100, 900
    s = fm.settings_for(cfg, defaults)
    assert (s.timestep_sampling, s.shift, s.min_sigma, s.max_sigma) == ("logit_normal", 1.0, 0.1, 0.9)
