"""Loss weighting, loss types, timesteps and noise (engine/recipes.py) against values worked out by hand.

The noise schedule is Stable Diffusion's: ``betas = linspace(sqrt(0.00085), sqrt(0.012), 1000)²``, so
``ᾱ_0 = 1 - 0.00085 = 0.99915`` and ``snr_0 = 0.99915 / 0.00085 = 1175.47``. Other ᾱ_t are recomputed here
in plain Python from that formula (not through the code under test).
"""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import DDPMScheduler

from guitrainer.config import config_from_dict
from guitrainer.engine import recipes as R


def sd_scheduler(**kw: object) -> DDPMScheduler:
    return DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000, **kw)


def alpha_bar(t: int) -> float:
    """ᾱ_t of SD's scaled-linear schedule, by the formula."""
    lo, hi = math.sqrt(0.00085), math.sqrt(0.012)
    out = 1.0
    for i in range(t + 1):
        out *= 1.0 - (lo + (hi - lo) * i / 999) ** 2
    return out


T = torch.tensor([0, 100, 250, 500, 999])


# --------------------------------------------------------------------------- min-SNR-γ and debiased


def test_min_snr_weights_epsilon_and_v_prediction_by_hand():
    snr = R.snr_at(sd_scheduler(), T)
    assert snr[0].item() == pytest.approx(0.99915 / 0.00085, rel=1e-4)  # 1175.47 (ᾱ is stored in fp32)
    eps = R.min_snr_weights(snr, 5.0, v_prediction=False)
    v = R.min_snr_weights(snr, 5.0, v_prediction=True)
    # t = 0: snr 1175.47 > γ, so eps = 5 / 1175.47 and v = 5 / 1176.47
    assert eps[0].item() == pytest.approx(5 / 1175.4706, rel=1e-4)
    assert v[0].item() == pytest.approx(5 / 1176.4706, rel=1e-4)
    for i, t in enumerate(T.tolist()):
        a = alpha_bar(t)
        s = a / (1 - a)
        assert snr[i].item() == pytest.approx(s, rel=1e-4)
        if s < 5:  # below γ: epsilon weight 1; v weight snr / (snr + 1) = ᾱ
            assert eps[i].item() == pytest.approx(1.0)
            assert v[i].item() == pytest.approx(a, rel=1e-4)
        else:  # above γ: epsilon weight γ / snr; v weight γ / (snr + 1) = γ (1 - ᾱ)
            assert eps[i].item() == pytest.approx(5 * (1 - a) / a, rel=1e-4)
            assert v[i].item() == pytest.approx(5 * (1 - a), rel=1e-4)
    # t = 100: ᾱ = 0.89422, snr 8.454 > 5: weights 0.5914 and 0.5289
    assert eps[1].item() == pytest.approx(0.5914, abs=2e-4)
    assert v[1].item() == pytest.approx(0.5289, abs=2e-4)


def test_min_snr_epsilon_weight_is_one_at_zero_snr():
    snr = torch.tensor([0.0, 0.5])
    assert R.min_snr_weights(snr, 5.0, v_prediction=False).tolist() == [1.0, 1.0]
    assert R.min_snr_weights(snr, 5.0, v_prediction=True).tolist() == pytest.approx([0.0, 0.5 / 1.5])


def test_debiased_estimation_weights_by_hand():
    snr = R.snr_at(sd_scheduler(), T)
    eps = R.debiased_weights(snr, v_prediction=False)
    v = R.debiased_weights(snr, v_prediction=True)
    assert eps[0].item() == pytest.approx(1 / math.sqrt(1000), rel=1e-6)  # snr 1175 capped at 1000
    a500 = alpha_bar(500)
    assert eps[3].item() == pytest.approx(1 / math.sqrt(a500 / (1 - a500)), rel=1e-4)  # 1.6183
    assert eps[3].item() == pytest.approx(1.6183, abs=1e-3)
    assert v[3].item() == pytest.approx(1 - a500, rel=1e-4)  # 1 / (snr + 1) = 1 - ᾱ


def test_weighted_loss_is_the_mean_of_weighted_per_sample_mse():
    sched = sd_scheduler()
    pred = torch.zeros(2, 1, 2, 2)
    target = torch.stack([torch.full((1, 2, 2), 1.0), torch.full((1, 2, 2), 2.0)])  # per-sample MSE 1 and 4
    t = torch.tensor([0, 500])
    recipe = R.Recipe(min_snr_gamma=5.0)
    got = R.diffusion_loss(recipe, pred, target, t, sched, v_prediction=False).item()
    assert got == pytest.approx((1 * 5 / 1175.4706 + 4 * 1.0) / 2, rel=1e-4)
    plain = R.diffusion_loss(R.Recipe(), pred, target, t, sched, v_prediction=False)
    assert plain.item() == pytest.approx(2.5)  # (1 + 4) / 2


# --------------------------------------------------------------------------- timesteps


def test_timesteps_stay_in_the_range_and_an_empty_range_gives_its_end():
    torch.manual_seed(0)
    t = R.sample_timesteps(20000, 200, 400, "cpu")
    assert t.dtype == torch.long and int(t.min()) == 200 and int(t.max()) == 399
    assert R.sample_timesteps(5, 700, 700, "cpu").tolist() == [700] * 5
    recipe = R.Recipe(min_timestep=990, max_timestep=2000)  # capped at the scheduler's 1000 steps
    _, t, _ = R.noise_and_timesteps(recipe, sd_scheduler(), torch.zeros(4000, 1, 1, 1))
    assert int(t.min()) == 990 and int(t.max()) == 999


def test_plain_recipe_draws_what_the_trainer_drew_before():
    latents = torch.randn(3, 4, 8, 8)
    torch.manual_seed(7)
    noise, t, noisy = R.noise_and_timesteps(R.Recipe(), sd_scheduler(), latents)
    torch.manual_seed(7)
    noise0 = torch.randn_like(latents)
    t0 = torch.randint(0, 1000, (3,)).long()
    assert torch.equal(noise, noise0) and torch.equal(t, t0)
    assert torch.equal(noisy, sd_scheduler().add_noise(latents, noise0, t0))


# --------------------------------------------------------------------------- Huber


def test_huber_and_smooth_l1_at_chosen_residuals():
    pred = torch.tensor([[0.0, 0.1, 1.0, -3.0]])
    target = torch.zeros_like(pred)
    c = torch.tensor([0.1])
    huber = R.elementwise_loss(pred, target, "huber", c)[0].tolist()
    # 2c (sqrt(r² + c²) - c): r = 0 -> 0; 0.1 -> 0.2 (0.141421 - 0.1); 1 -> 0.2 (1.004988 - 0.1); 3 -> 0.2 (3.001666 - 0.1)
    assert huber == pytest.approx([0.0, 0.0082843, 0.1809975, 0.5803332], abs=1e-6)
    smooth = R.elementwise_loss(pred, target, "smooth_l1", c)[0].tolist()
    assert smooth == pytest.approx([0.0, 0.0828427, 1.8099751, 5.8033324], abs=1e-6)
    assert R.elementwise_loss(pred, target, "l1")[0].tolist() == pytest.approx([0.0, 0.1, 1.0, 3.0])
    assert R.elementwise_loss(pred, target, "l2")[0].tolist() == pytest.approx([0.0, 0.01, 1.0, 9.0])


def test_huber_threshold_schedules_by_hand():
    sched = sd_scheduler()
    t = torch.tensor([0, 500, 1000 - 1])
    const = R.huber_threshold(R.Recipe(loss_type="huber", huber_schedule="constant", huber_c=0.1, huber_scale=2.0), t, sched)
    assert const.tolist() == pytest.approx([0.2, 0.2, 0.2])
    # exponential: c^(t / T) x scale -> 1 at t = 0, sqrt(0.1) at t = 500, 0.1^0.999 at t = 999
    exp = R.huber_threshold(R.Recipe(loss_type="huber", huber_schedule="exponential", huber_c=0.1), t, sched)
    assert exp.tolist() == pytest.approx([1.0, math.sqrt(0.1), 0.1**0.999], rel=1e-5)
    # snr: (1 - c) / (1 + σ)² + c with σ = sqrt((1 - ᾱ) / ᾱ); at t = 0 σ = sqrt(0.00085 / 0.99915) = 0.029167
    snr = R.huber_threshold(R.Recipe(loss_type="huber", huber_schedule="snr", huber_c=0.1), t, sched)
    assert snr[0].item() == pytest.approx(0.9 / (1 + math.sqrt(0.00085 / 0.99915)) ** 2 + 0.1, rel=1e-5)  # 0.94971
    a = alpha_bar(500)
    assert snr[1].item() == pytest.approx(0.9 / (1 + math.sqrt((1 - a) / a)) ** 2 + 0.1, rel=1e-4)


def test_huber_loss_of_a_batch_uses_each_samples_threshold():
    sched = sd_scheduler()
    pred = torch.stack([torch.full((1, 2, 2), 1.0), torch.full((1, 2, 2), 1.0)])
    t = torch.tensor([0, 500])
    recipe = R.Recipe(loss_type="huber", huber_schedule="exponential", huber_c=0.1)
    got = R.diffusion_loss(recipe, pred, torch.zeros_like(pred), t, sched, v_prediction=False).item()
    c0, c1 = 1.0, math.sqrt(0.1)
    want = (2 * c0 * (math.sqrt(1 + c0**2) - c0) + 2 * c1 * (math.sqrt(1 + c1**2) - c1)) / 2
    assert got == pytest.approx(want, rel=1e-5)


def test_unknown_loss_type_is_named():
    with pytest.raises(ValueError, match="unknown loss type 'l3'"):
        R.elementwise_loss(torch.zeros(1), torch.zeros(1), "l3")


# --------------------------------------------------------------------------- noise


def test_noise_offset_adds_the_offset_variance_to_channel_means():
    torch.manual_seed(1)
    latents = torch.zeros(512, 4, 8, 8)
    noise = torch.randn_like(latents)
    out = R.apply_noise_offset(latents, noise, 0.1)
    assert out.shape == latents.shape and out.dtype == latents.dtype
    # the mean of a channel: mean of 64 N(0, 1) (variance 1/64) plus 0.1 N(0, 1) (variance 0.01)
    assert out.mean(dim=(2, 3)).var().item() == pytest.approx(1 / 64 + 0.01, rel=0.12)
    assert noise.mean(dim=(2, 3)).var().item() == pytest.approx(1 / 64, rel=0.12)
    # the offset is one number per (sample, channel): the noise moved by the same amount everywhere in it
    diff = out - noise
    assert torch.allclose(diff, diff[:, :, :1, :1].expand_as(diff), atol=1e-6)


def test_adaptive_noise_scale_grows_the_offset_with_the_latent_mean():
    torch.manual_seed(2)
    latents = torch.full((512, 4, 8, 8), -2.0)  # |channel mean| = 2
    out = R.apply_noise_offset(latents, torch.zeros_like(latents), 0.1, adaptive_scale=0.05)
    # offset = 0.1 + 0.05 x 2 = 0.2, so the shift has standard deviation 0.2
    assert out[:, :, 0, 0].std().item() == pytest.approx(0.2, rel=0.1)


def _neighbour_correlation(x: torch.Tensor) -> float:
    a, b = x[..., :, :-1].flatten(), x[..., :, 1:].flatten()
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


def test_pyramid_noise_has_unit_std_and_low_frequencies():
    torch.manual_seed(3)
    noise = torch.randn(16, 4, 64, 64)
    out = R.pyramid_noise(noise.clone(), iterations=6, discount=0.8)
    assert out.shape == noise.shape and out.dtype == noise.dtype
    assert out.std().item() == pytest.approx(1.0, abs=1e-5)
    assert abs(out.mean().item()) < 0.1
    assert abs(_neighbour_correlation(noise)) < 0.02  # white noise: neighbours independent
    # levels 1..5 are upsampled by at least 2x, so neighbouring pixels share them; they hold
    # 0.8² + 0.8⁴ + ... of the variance against 2 for the two white parts (noise + level 0)
    assert _neighbour_correlation(out) > 0.2
    # one level (r⁰ = 1: a second white noise at full size): still white
    one = R.pyramid_noise(noise.clone(), iterations=1, discount=0.8)
    assert abs(_neighbour_correlation(one)) < 0.02 and one.std().item() == pytest.approx(1.0, abs=1e-5)


def test_input_perturbation_noise_widens_the_input_not_the_target():
    torch.manual_seed(4)
    sched = sd_scheduler()
    latents = torch.zeros(64, 4, 16, 16)
    t = torch.full((64,), 999)
    noise, _, noisy = R.noise_and_timesteps(R.Recipe(ip_noise_gamma=0.5), sched, latents, t)
    a = alpha_bar(999)
    # x0 = 0: the input is sqrt(1 - ᾱ) (noise + 0.5 ε): std sqrt(1 - ᾱ) sqrt(1.25)
    assert noisy.std().item() == pytest.approx(math.sqrt(1 - a) * math.sqrt(1.25), rel=0.02)
    assert noise.std().item() == pytest.approx(1.0, rel=0.02)


# --------------------------------------------------------------------------- zero terminal SNR


def test_zero_terminal_snr_rescaling():
    sched = sd_scheduler()
    first = sched.alphas_cumprod[0].item()
    R.rescale_zero_terminal_snr(sched)
    assert sched.alphas_cumprod[-1].item() == pytest.approx(0.0, abs=1e-12)
    assert sched.alphas_cumprod[0].item() == pytest.approx(first, rel=1e-6)
    # the same as diffusers' own implementation of the paper's algorithm
    ref = sd_scheduler(rescale_betas_zero_snr=True)
    assert torch.allclose(sched.betas, ref.betas, rtol=1e-3)  # diffusers rescales in fp32, we in fp64
    assert torch.allclose(sched.alphas_cumprod, ref.alphas_cumprod, rtol=1e-3, atol=1e-9)
    # v-prediction at the last step: the target is -x0 and the min-SNR weight is 0 (snr = 0)
    snr = R.snr_at(sched, torch.tensor([999]))
    assert snr.item() == 0.0
    assert R.min_snr_weights(snr, 5.0, v_prediction=True).item() == 0.0


def test_recipe_from_config_reads_the_sections():
    class Section:
        pass

    loss, noise = Section(), Section()
    loss.min_snr_gamma, loss.loss_type = 5.0, "huber"  # type: ignore[attr-defined]
    noise.noise_offset, noise.multires_noise_iterations = 0.05, 6  # type: ignore[attr-defined]

    class Cfg:
        pass

    cfg = Cfg()
    cfg.loss, cfg.noise = loss, noise  # type: ignore[attr-defined]
    r = R.Recipe.from_config(cfg)
    assert (r.min_snr_gamma, r.loss_type, r.noise_offset, r.multires_noise_iterations) == (5.0, "huber", 0.05, 6)
    assert R.Recipe.from_config(object()) == R.Recipe()


# --------------------------------------------------------------------------- metadata

#: the keys sd-scripts' train_network.py writes for these settings (its metadata dict, read there)
SD_SCRIPTS_KEYS = {
    "ss_min_snr_gamma", "ss_debiased_estimation", "ss_loss_type", "ss_huber_schedule", "ss_huber_c", "ss_huber_scale",
    "ss_noise_offset", "ss_noise_offset_random_strength", "ss_adaptive_noise_scale", "ss_multires_noise_iterations",
    "ss_multires_noise_discount", "ss_ip_noise_gamma", "ss_ip_noise_gamma_random_strength", "ss_zero_terminal_snr",
    "ss_lr_warmup_steps", "ss_validation_split", "ss_validation_seed", "ss_validate_every_n_steps",
}


def test_metadata_uses_sd_scripts_names_and_value_forms():
    from guitrainer.config import TrainingConfig

    off = R.recipe_metadata(TrainingConfig())
    assert set(off) == SD_SCRIPTS_KEYS
    # off is None, as sd-scripts writes an unset argument; its defaults otherwise
    assert off["ss_min_snr_gamma"] == "None" and off["ss_noise_offset"] == "None" and off["ss_ip_noise_gamma"] == "None"
    assert off["ss_multires_noise_iterations"] == "None" and off["ss_multires_noise_discount"] == "0.3"
    assert (off["ss_loss_type"], off["ss_huber_schedule"], off["ss_huber_c"]) == ("l2", "snr", "0.1")
    assert off["ss_debiased_estimation"] == "False" and off["ss_lr_warmup_steps"] == "0"
    cfg = config_from_dict(
        {
            "loss": {"min_snr_gamma": 5, "loss_type": "huber", "debiased_estimation": True},
            "noise": {"noise_offset": 0.05, "multires_noise_iterations": 6, "zero_terminal_snr": True},
            "schedule": {"warmup_ratio": 0.05},
            "validation": {"split": 0.1, "every_n_steps": 25},
        }
    )
    on = R.recipe_metadata(cfg)
    assert on["ss_min_snr_gamma"] == "5.0" and on["ss_loss_type"] == "huber" and on["ss_debiased_estimation"] == "True"
    assert on["ss_noise_offset"] == "0.05" and on["ss_multires_noise_iterations"] == "6"
    assert on["ss_zero_terminal_snr"] == "True" and on["ss_lr_warmup_steps"] == "0.05"
    assert (on["ss_validation_split"], on["ss_validate_every_n_steps"], on["ss_validation_seed"]) == ("0.1", "25", "0")


@pytest.mark.slow
def test_demo_run_with_every_recipe_trains_and_writes_the_metadata(tmp_path):
    from helpers import demo_cfg

    from guitrainer.core.events import NullReporter
    from guitrainer.engine.network.lora import read_lora
    from guitrainer.engine.trainer import Trainer

    torch.set_num_threads(1)
    plain, rep = NullReporter(), NullReporter()
    Trainer(demo_cfg(tmp_path / "plain", schedule__max_steps=4), plain).run()
    settings = {
        "loss__min_snr_gamma": 5.0, "loss__loss_type": "huber", "loss__min_timestep": 100, "loss__max_timestep": 900,
        "noise__noise_offset": 0.05, "noise__multires_noise_iterations": 6, "noise__multires_noise_discount": 0.8,
        "noise__ip_noise_gamma": 0.1, "schedule__max_steps": 4,
    }
    summary = Trainer(demo_cfg(tmp_path / "recipes", **settings), rep).run()
    assert summary.status == "finished", summary.message
    losses = [m.loss for m in rep.steps]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    assert losses != [m.loss for m in plain.steps]  # the recipe changed the loss
    _, meta = read_lora(summary.lora_path)
    assert meta["ss_min_snr_gamma"] == "5.0" and meta["ss_loss_type"] == "huber"
    assert meta["ss_noise_offset"] == "0.05" and meta["ss_multires_noise_iterations"] == "6"
    assert meta["ss_multires_noise_discount"] == "0.8" and meta["ss_ip_noise_gamma"] == "0.1"


def test_zero_terminal_snr_samplers_rescale_and_step_from_the_last_timestep():
    from diffusers import DDIMScheduler

    sched = sd_scheduler()
    assert R.sampler_options(sched) == {}
    R.rescale_zero_terminal_snr(sched)
    ddim = DDIMScheduler.from_config(sched.config, **R.sampler_options(sched))
    assert ddim.alphas_cumprod[-1].item() < 1e-6  # diffusers keeps a tiny epsilon; the plain schedule has 0.0047
    ddim.set_timesteps(4)
    assert ddim.timesteps.tolist() == [999, 749, 499, 249]  # trailing: the first step is pure noise


def test_an_empty_timestep_range_at_the_end_stays_inside_the_schedule():
    from guitrainer.engine.validation import fixed_timesteps

    assert R.timestep_range(R.Recipe(min_timestep=1000, max_timestep=1000), 1000) == (999, 999)
    assert R.timestep_range(R.Recipe(min_timestep=500, max_timestep=500), 1000) == (500, 500)
    assert R.timestep_range(R.Recipe(min_timestep=100, max_timestep=900), 1000) == (100, 900)
    _, t, _ = R.noise_and_timesteps(R.Recipe(min_timestep=1000, max_timestep=1000), sd_scheduler(), torch.zeros(3, 1, 2, 2))
    assert t.tolist() == [999, 999, 999]
    assert fixed_timesteps(999, 999) == [999] * 4  # validation at the one timestep trained
