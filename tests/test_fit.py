"""Fit to this card: the choice fits its own estimate, and no faster combination of the savers fits — checked by a
search of the test's own over every combination, costed from fit_costs' published table; a run that fits is left
alone; the device's rules and this computer's RAM rule choices out; nothing that fits is said so."""

from __future__ import annotations

import itertools

import pytest
from helpers import fake_device

from guitrainer.base.units import GiB
from guitrainer.config import TrainingConfig, field_info
from guitrainer.config.coerce import field_choices
from guitrainer.core.memory import fit_costs as C
from guitrainer.core.memory.estimate import estimate
from guitrainer.core.memory.fit import Card, apply, fit
from guitrainer.core.memory.specs import spec_for

MODELS = {
    "flux1": "black-forest-labs/FLUX.1-dev",
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
    "sd35": "stabilityai/stable-diffusion-3.5-large",
    "sd15": "stable-diffusion-v1-5/stable-diffusion-v1-5",
}


def _config(family: str, **settings) -> TrainingConfig:
    cfg = TrainingConfig()
    cfg.set("model.family", family)
    cfg.set("model.base", MODELS[family])
    cfg.set("dataset.resolution", 1024 if family != "sd15" else 512)
    cfg.set("precision.training", "bf16")
    for path, value in settings.items():
        cfg.set(path.replace("__", "."), value)
    return cfg


def _stored(cfg: TrainingConfig) -> float:
    return {"fp8": 1.0, "int8": 1.0, "nf4": 0.52}.get(cfg.precision.base_weights,
                                                      4.0 if cfg.precision.training == "fp32" else 2.0)


def _step_factor(cfg: TrainingConfig, user: TrainingConfig) -> float:
    """The test's own costing of a config, from the published table (independent of fit's search)."""
    p = cfg.precision
    f = C.CHECKPOINTING.slower if p.gradient_checkpointing else 1.0
    f *= C.BASE_WEIGHTS[p.base_weights].slower
    halvings = 0
    b = user.schedule.batch_size
    while b > cfg.schedule.batch_size:
        b, halvings = max(1, b // 2), halvings + 1
    f *= C.BATCH_HALVED.slower ** halvings
    if p.offload_blocks:
        f *= 1 + C.OFFLOAD_AT_FULL_SHARE * p.offload_blocks * _stored(cfg) / 2
    return f


def _every_fitting_combination(user: TrainingConfig, budget: int):
    """Every combination of the savers the test knows of, that is valid and fits ``budget`` by the estimator."""
    spec = spec_for(user)
    card = Card(budget)
    formats = field_choices(field_info("precision.base_weights"))
    batches = sorted({user.schedule.batch_size, *(max(1, user.schedule.batch_size >> k) for k in range(8))})
    offload = (0.0, 0.25, 0.5, 0.75, 1.0) if spec.offload_blocks else (0.0,)
    for ckpt, latents, text, opt8, fmt, share, batch in itertools.product(
            (False, True), (False, True), (False, True), (False, True), formats, offload, batches):
        if share and not ckpt:
            continue
        if share and fmt in ("int8", "nf4"):
            continue  # bitsandbytes' layers are not streamed from RAM: the config refuses the pair
        cfg = user.copy()
        cfg.set("precision.gradient_checkpointing", ckpt)
        cfg.set("precision.cache_latents", latents or user.precision.cache_latents)
        cfg.set("precision.cache_text_encoder_outputs", text or user.precision.cache_text_encoder_outputs)
        cfg.set("optimizer.name", "AdamW8bit" if opt8 else user.optimizer.name)
        cfg.set("precision.base_weights", fmt)
        cfg.set("precision.offload_blocks", share)
        cfg.set("schedule.batch_size", batch)
        if estimate(cfg, spec, card).total <= budget:
            yield cfg


CASES = [("flux1", 16), ("flux1", 24), ("flux1", 40), ("sdxl", 6), ("sdxl", 8), ("sdxl", 12), ("sd35", 12),
         ("sd35", 16), ("sd35", 24), ("sd15", 4), ("sd15", 24)]


@pytest.mark.parametrize(("family", "gigabytes"), CASES)
def test_the_choice_fits_and_nothing_faster_fits(family, gigabytes):
    user = _config(family, schedule__batch_size=2)
    budget = gigabytes * GiB
    result = fit(user, budget)
    fitting = list(_every_fitting_combination(user, budget))
    if not fitting:
        assert not result.fits and result.summary.startswith("Nothing fits")
        return
    assert result.fits, f"{family} at {gigabytes} GB: the test found {len(fitting)} fitting combinations"
    chosen = apply(user, result.best)
    assert estimate(chosen, spec_for(chosen), Card(budget)).total <= budget
    assert chosen.errors() == [] or {str(e) for e in chosen.errors()} <= {str(e) for e in user.errors()}
    fastest = min(_step_factor(c, user) for c in fitting)
    assert _step_factor(chosen, user) <= fastest + 1e-9, (
        f"{family} at {gigabytes} GB: chose {[c.text for c in result.best.changes]} "
        f"({_step_factor(chosen, user):.3f}) while a {fastest:.3f} combination fits")
    # the effective batch is kept: batch × accumulation never falls below the user's
    assert chosen.schedule.batch_size * chosen.schedule.gradient_accumulation >= 2


def test_a_run_that_fits_is_left_as_it_is():
    user = _config("sd15", precision__gradient_checkpointing=False)
    result = fit(user, 24 * GiB)
    assert result.fits and result.best.changes == ()
    assert result.summary.startswith("Already fits")


def test_a_saver_that_costs_time_is_turned_off_where_the_card_has_room():
    """Checkpointing on (30 % slower) on a card with room for the run without it: Fit turns it off."""
    user = _config("sd15", precision__gradient_checkpointing=True)
    result = fit(user, 24 * GiB)
    assert [(c.path, c.after) for c in result.best.changes] == [("precision.gradient_checkpointing", False)]


def test_nothing_fits_says_so_and_how_close_it_came():
    user = _config("flux1")
    result = fit(user, 2 * GiB)
    assert not result.fits and result.smallest is not None and result.smallest.total > 2 * GiB
    assert "Nothing fits" in result.summary and "resolution" in result.summary


def test_the_alternatives_fit_are_slower_or_costlier_and_differ():
    result = fit(_config("sdxl"), 8 * GiB)
    assert result.fits and result.alternatives
    keys = {(o.config.precision.base_weights, o.config.precision.offload_blocks,
             o.config.precision.gradient_checkpointing, o.config.schedule.batch_size)
            for o in (result.best, *result.alternatives)}
    assert len(keys) == 1 + len(result.alternatives)
    for alt in result.alternatives:
        assert alt.total <= 8 * GiB
        assert (alt.slower, alt.quality) >= (result.best.slower, result.best.quality)


def test_a_card_without_bf16_is_not_given_bf16():
    """On a GTX 1080 (no bf16) an fp32 run is not moved to bf16 AMP to fit: the device's rules apply."""
    device = fake_device("gtx1080")
    user = _config("sd15", precision__training="fp32")
    result = fit(user, 6 * GiB, device)
    assert result.fits
    assert all(not (c.path == "precision.training" and c.after == "bf16") for c in result.best.changes)


def test_this_computers_ram_rules_out_blocks_in_ram():
    """With too little system RAM for pinned blocks, Fit chooses without offload (or says nothing fits)."""
    user = _config("sdxl")
    roomy = fit(user, 4 * GiB)
    tight = fit(user, 4 * GiB, machine_ram=6 * GiB)
    assert roomy.fits and roomy.best.config.precision.offload_blocks > 0
    assert not tight.fits or tight.best.config.precision.offload_blocks < roomy.best.config.precision.offload_blocks


def test_a_card_that_would_fit_but_for_this_computers_ram_says_that():
    user = _config("sd35")
    result = fit(user, 24 * GiB, machine_ram=2 * GiB)
    assert not result.fits and result.ram_limited is not None
    option, need, have = result.ram_limited
    assert option.total <= 24 * GiB and need > have == 2 * GiB
    assert "system RAM" in result.summary and "lower the resolution" not in result.summary
