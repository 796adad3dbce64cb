"""engine.amp_step: the mixed-precision step's parts, each checked against a hand computation."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from guitrainer.engine import amp_step
from guitrainer.engine.families.stable_diffusion import added_conditioning


def _param(values: list[float]) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.tensor(values, dtype=torch.float32))


def test_fp32_has_no_autocast_and_bf16_casts_matmuls():
    assert isinstance(amp_step.autocast("fp32", "cpu", torch.float32), contextlib.nullcontext)
    a = torch.ones(2, 2)
    with amp_step.autocast("bf16", "cpu", torch.bfloat16):
        assert (a @ a).dtype == torch.bfloat16
    assert (a @ a).dtype == torch.float32


def test_grad_scaler_unscales_before_clipping_and_steps_with_the_true_gradient():
    # loss = 3 p0 + 4 p1: gradient (3, 4), norm 5. The scaler multiplies the gradient by its scale;
    # finish_step must unscale before clipping, so the norm is 5 and clipping to 1 gives (0.6, 0.8).
    p = _param([1.0, 1.0])
    opt = torch.optim.SGD([p], lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    loss = 3 * p[0] + 4 * p[1]
    amp_step.backward(loss, scaler)
    assert p.grad is not None and p.grad.tolist() == [3 * 2.0**10, 4 * 2.0**10]  # scaled
    norm, skipped = amp_step.finish_step(opt, [p], scaler, max_grad_norm=1.0)
    assert not skipped and float(norm) == pytest.approx(5.0)
    assert p.detach().tolist() == pytest.approx([1 - 0.6, 1 - 0.8])
    assert p.grad is None  # zeroed (set to None) for the next step


def test_inf_gradient_skips_the_update_and_lowers_the_scale():
    p = _param([1.0, 2.0])
    opt = torch.optim.SGD([p], lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    amp_step.backward((p * torch.tensor([float("inf"), 1.0])).sum(), scaler)
    norm, skipped = amp_step.finish_step(opt, [p], scaler, max_grad_norm=1.0)
    assert skipped and not math.isfinite(float(norm))
    assert p.detach().tolist() == [1.0, 2.0]  # untouched
    assert scaler.get_scale() == 2.0**9  # halved (the default backoff factor)


def test_no_scaler_and_no_clipping_steps_with_the_raw_gradient():
    p = _param([0.0, 0.0])
    opt = torch.optim.SGD([p], lr=0.5)
    amp_step.backward(30 * p[0] + 40 * p[1], None)
    norm, skipped = amp_step.finish_step(opt, [p], None, max_grad_norm=0.0)  # 0: measure, do not clip
    assert not skipped and float(norm) == pytest.approx(50.0)
    assert p.detach().tolist() == pytest.approx([-15.0, -20.0])


class _Scheduler:
    """add_noise = latents + noise (so the noisy input is checkable); v target = noise - latents."""

    class config:  # noqa: N801 - the diffusers attribute name
        num_train_timesteps = 10

    def add_noise(self, latents, noise, t):
        return latents + noise

    def get_velocity(self, latents, noise, t):
        return noise - latents


class _Unet(torch.nn.Module):
    """Predicts zero; records its inputs."""

    def forward(self, noisy, t, hidden, added_cond_kwargs=None):
        self.seen = (noisy, t, hidden, added_cond_kwargs)
        return type("Out", (), {"sample": torch.zeros_like(noisy)})()


def test_noise_draws_follow_the_global_seed_and_the_loss_uses_the_prediction_type():
    latents = torch.full((2, 1, 2, 2), 0.5)
    sched = _Scheduler()
    torch.manual_seed(3)
    noise, t, noisy = amp_step.draw_noise(sched, latents)
    torch.manual_seed(3)
    noise2, t2, _ = amp_step.draw_noise(sched, latents)
    assert torch.equal(noise, noise2) and torch.equal(t, t2) and int(t.min()) >= 0 and int(t.max()) < 10
    assert torch.equal(noisy, latents + noise)
    unet = _Unet()
    hidden = torch.zeros(2, 3, 4)
    eps = amp_step.prediction_loss(unet, sched, "epsilon", latents, (noise, t, noisy), hidden, None)
    v = amp_step.prediction_loss(unet, sched, "v_prediction", latents, (noise, t, noisy), hidden, None)
    # the prediction is 0: the loss is the mean square of the target
    assert float(eps) == pytest.approx(float((noise**2).mean()))
    assert float(v) == pytest.approx(float(((noise - latents) ** 2).mean()))
    assert unet.seen[2] is hidden


def test_sdxl_added_conditioning_defaults_to_the_square_resolution():
    pooled = torch.zeros(2, 8)
    added = added_conditioning(pooled, None, 512, torch.device("cpu"), torch.bfloat16)
    assert added is not None and added["text_embeds"] is pooled
    assert added["time_ids"].dtype == torch.bfloat16
    assert added["time_ids"].tolist() == [[512, 512, 0, 0, 512, 512]] * 2
    assert added_conditioning(None, None, 512, torch.device("cpu"), torch.float32) is None
