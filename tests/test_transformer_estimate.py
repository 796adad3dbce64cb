"""The VRAM estimate of the transformer families (Flux.1, SD 3.5), part by part and against the memory tracker.

The parameter counts are worked out by hand from the published architectures (BFL's FLUX.1: 19 double + 38 single
blocks, width 3072, MLP 4x; SD 3.5 Large: 38 joint blocks of width 38 x 64; T5 v1.1 XXL's encoder), not read from
the tables the estimator ships. The tracker points are at reduced depth (a few blocks, full width) and at
resolutions and depths the activation fit never saw (bench/transformer_vram.py fits at 256 / 512 px on other
depths), so each comparison is out of sample.
"""

from __future__ import annotations

import pytest

from guitrainer.config import TrainingConfig
from guitrainer.core.families.registry import facts
from guitrainer.core.memory import estimate

GB = 10**9


def _lin(i: int, o: int) -> int:
    """A Linear with bias."""
    return i * o + o


H, HEAD = 3072, 128
#: the adaLN modulation Linears of a double block (image and text: 6 vectors each) and of a single block (3)
DOUBLE_MODULATION, SINGLE_MODULATION = 2 * (H * 6 * H + 6 * H), H * 3 * H + 3 * H


def flux_by_hand() -> tuple[int, int, int]:
    """(one double block, one single block, everything outside the blocks) of FLUX.1 dev."""
    h, mlp, head = H, 4 * H, HEAD
    stream = _lin(h, 6 * h) + _lin(h, 3 * h) + _lin(h, h) + _lin(h, mlp) + _lin(mlp, h) + 2 * head  # mod, qkv, proj, mlp, q/k norms
    double = 2 * stream  # image and text streams
    single = _lin(h, 3 * h) + _lin(h, 3 * h + mlp) + _lin(h + mlp, h) + 2 * head  # mod, linear1 (qkv + mlp), linear2
    # img_in (64 = 16 channels x 2 x 2), txt_in (T5's 4096), timestep + guidance MLPs (256 -> h -> h), pooled CLIP
    # (768 -> h -> h), the final adaLN (h -> 2h) and projection (h -> 64)
    outside = _lin(64, h) + _lin(4096, h) + 2 * (_lin(256, h) + _lin(h, h)) + _lin(768, h) + _lin(h, h)
    outside += _lin(h, 2 * h) + _lin(h, 64)
    return double, single, outside


def t5_xxl_encoder_by_hand() -> int:
    d, ff, layers, vocab = 4096, 10240, 24, 32128
    per_layer = 4 * d * d + 3 * d * ff + 2 * d  # q k v o (no bias), gated FF wi_0 wi_1 wo, two RMS norms
    return layers * per_layer + 32 * 64 + d + vocab * d  # relative position bias (32 buckets x 64 heads), final norm


def sd35_large_block_by_hand() -> int:
    h, head = 38 * 64, 64
    stream = _lin(h, 6 * h) + 4 * _lin(h, h) + _lin(h, 4 * h) + _lin(4 * h, h) + 2 * head  # adaLN, q k v out, FF, norms
    return 2 * stream  # image and context streams


def config(family: str, res: int = 1024, *, fp8: bool = False, cached: bool = True, ckpt: bool = True) -> TrainingConfig:
    c = TrainingConfig()
    c.model.family = family
    c.dataset.resolution = res
    c.precision.training = "bf16"
    c.precision.cache_latents = True
    c.precision.cache_text_encoder_outputs = cached
    c.precision.gradient_checkpointing = ckpt
    c.precision.base_weights = "fp8" if fp8 else "auto"
    return c


# --------------------------------------------------------------------------- part by part, by hand


def test_flux_parameter_table_matches_the_architecture_by_hand() -> None:
    double, single, outside = flux_by_hand()
    spec = facts("flux1").spec
    assert spec is not None
    assert spec.denoiser == 19 * double + 38 * single + outside
    assert 11.85e9 < spec.denoiser < 11.95e9  # BFL: "12 B"; flux1-dev.safetensors is 23.8 GB of bf16
    assert spec.blocks == ((19, double, DOUBLE_MODULATION), (38, single, SINGLE_MODULATION))
    assert spec.text_encoders[1] == t5_xxl_encoder_by_hand()
    assert 4.7e9 < spec.text_encoders[1] < 4.8e9
    # fp8 storage: every Linear in the blocks; the q/k RMSNorms (4 per double block, 2 per single) and the layers
    # outside the blocks (Flux's skip list: embedders, final layer) stay bf16
    assert spec.fp8_stored[0] == 19 * (double - 4 * HEAD) + 38 * (single - 2 * HEAD)


def test_flux_weights_part_by_part() -> None:
    double, single, outside = flux_by_hand()
    params = 19 * double + 38 * single + outside
    bf16 = estimate.estimate(config("flux1"))
    assert bf16.get("unet") == pytest.approx(2 * params, rel=1e-6)  # 23.8 GB
    assert 23.7 * GB < bf16.get("unet") < 23.9 * GB
    assert bf16.get("text_encoders") == 0  # outputs cached: the encoders leave the GPU
    uncached = estimate.estimate(config("flux1", cached=False))
    clip_l = 123_060_480  # CLIP ViT-L/14's text tower, as SD 1.5's
    assert uncached.get("text_encoders") == pytest.approx(2 * (clip_l + t5_xxl_encoder_by_hand()), rel=1e-6)  # 9.8 GB
    fp8 = estimate.estimate(config("flux1", fp8=True))
    in_fp8 = 19 * (double - 4 * HEAD) + 38 * (single - 2 * HEAD)
    assert fp8.get("unet") == pytest.approx(in_fp8 + 2 * (params - in_fp8), rel=1e-6)  # 11.97 GB
    # with checkpointing one block is recomputed at a time: the largest (a double block) widened back to bf16, but
    # not its modulation Linears (fed the timestep vector, which needs no gradient: autograd keeps no weight)
    assert fp8.get("fp8_widening") == pytest.approx(2 * (double - DOUBLE_MODULATION), rel=1e-6)
    no_ckpt = estimate.estimate(config("flux1", fp8=True, ckpt=False))
    widened = 19 * (double - DOUBLE_MODULATION) + 38 * (single - SINGLE_MODULATION)
    assert no_ckpt.get("fp8_widening") == pytest.approx(2 * widened, rel=1e-6)


def test_sd35_large_weights_part_by_part() -> None:
    block = sd35_large_block_by_hand()
    spec = facts("sd35").spec
    assert spec is not None
    h = 38 * 64
    assert spec.blocks == ((38, block, 2 * (h * 6 * h + 6 * h)),)
    pos_grid = 192 * 192 * h  # the learned position grid (pos_embed_max_size 192), a buffer
    bf16 = estimate.estimate(config("sd35"))
    assert bf16.get("unet") == pytest.approx(2 * (spec.denoiser + pos_grid), rel=1e-6)
    fp8 = estimate.estimate(config("sd35", fp8=True))
    stored = spec.fp8_stored[0]
    assert spec.denoiser - stored < 0.01 * spec.denoiser  # kept in bf16: the embedders, the final layer, the norms
    assert fp8.get("unet") == pytest.approx(stored + 2 * (spec.denoiser - stored + pos_grid), rel=1e-6)


def test_sd35_t5_keeps_its_feed_forward_output_and_embedding_in_bf16_under_fp8() -> None:
    """SD 3.5's fp8 storage leaves T5's ``wo`` (24 x 10240 -> 4096, no bias) in bf16, as its skip list says, and
    every non-Linear parameter (the 32128 x 4096 embedding, 49 RMS norms, the relative-position bias)."""
    spec = facts("sd35").spec
    assert spec is not None
    t5 = t5_xxl_encoder_by_hand()
    kept = 24 * 10240 * 4096 + 32128 * 4096 + 49 * 4096 + 32 * 64
    assert spec.fp8_stored[3] == t5 - kept
    uncached = estimate.estimate(config("sd35", fp8=True, cached=False))
    clips = [n for n in spec.text_encoders[:2]]
    clip_stored = spec.fp8_stored[1:3]
    by_hand = sum(st + 2 * (n - st) for n, st in zip(clips, clip_stored)) + (t5 - kept) + 2 * kept
    assert uncached.get("text_encoders") == pytest.approx(by_hand, rel=1e-6)


def test_activations_grow_with_the_tokens_and_shrink_with_checkpointing() -> None:
    for family in ("flux1", "sd35"):
        small = estimate.estimate(config(family, 512, ckpt=False)).get("activations")
        large = estimate.estimate(config(family, 1024, ckpt=False)).get("activations")
        text = facts(family).text_tokens
        tokens = {res: (res // 16) ** 2 + text for res in (512, 1024)}  # 2 x 2 patches of the 8x latents, plus text
        # in proportion to the tokens, but for a per-block part that does not grow with them (small, negative)
        assert large / small == pytest.approx(tokens[1024] / tokens[512], rel=0.1)
        assert estimate.estimate(config(family, 1024)).get("activations") < large / 5
        by_batch = []
        for batch in (1, 2, 3):
            c = config(family, 1024, ckpt=False)
            c.schedule.batch_size = batch
            by_batch.append(estimate.estimate(c).get("activations"))
        # each sample adds the same; the per-block part (the LoRA's workspace) is there once per step
        assert by_batch[2] - by_batch[1] == pytest.approx(by_batch[1] - by_batch[0], rel=1e-6)
        assert by_batch[1] - by_batch[0] > by_batch[0]


# --------------------------------------------------------------------------- against the memory tracker


def _reduced(family: str, blocks: tuple[int, ...]):  # noqa: ANN202 - a ModelSpec
    if family == "flux1":
        from guitrainer.engine.families.flux1.spec import as_model_spec, flux_spec

        return as_model_spec(flux_spec((blocks[0], blocks[1])))
    from guitrainer.engine.families.sd35.spec import parameter_table

    return parameter_table("5-large", blocks[0]).spec


#: family, blocks, px, fp8, text cached, checkpointing: none of them a fit point. fp8 with checkpointing is measured
#: at (2, 4) blocks: with a single double block its widened copy (the estimate's part) is a third of all the weights
#: and the estimate, which counts it whole at the peak, is 11 % over there (1.32 against 1.19 GiB at (1, 2), 320 px);
#: at full size it is within 2.4 % (bench/RESULTS.md)
POINTS = [
    ("flux1", (2, 3), 384, False, True, True),
    ("flux1", (2, 3), 384, False, True, False),
    ("flux1", (2, 4), 320, True, True, True),
    ("flux1", (1, 1), 256, False, False, True),
    ("sd35", (4,), 384, False, True, False),
    ("sd35", (2,), 320, True, True, True),
    ("sd35", (2,), 256, False, False, True),
]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "blocks", "res", "fp8", "cached", "ckpt"), POINTS)
def test_estimate_within_ten_percent_of_the_tracked_step(
    family: str, blocks: tuple[int, ...], res: int, fp8: bool, cached: bool, ckpt: bool
) -> None:
    from guitrainer.engine.memory.measure import measure_training_step

    c = config(family, res, fp8=fp8, cached=cached, ckpt=ckpt)
    measured = measure_training_step(c, method="fake", blocks=blocks)
    spec = _reduced(family, blocks)
    est = estimate.estimate(c, spec)
    assert measured.frozen_weights <= est.get("unet") + est.get("text_encoders") + 2 * 10**6
    assert est.allocated == pytest.approx(measured.peak, rel=0.10)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "blocks", "res", "ckpt", "batch"),
                         [("flux1", (2, 4), 320, True, 2), ("flux1", (2, 2), 256, False, 3), ("sd35", (4,), 320, True, 2)])
def test_estimate_follows_the_batch(family: str, blocks: tuple[int, ...], res: int, ckpt: bool, batch: int) -> None:
    """The fit is at batch 1; batches of 2 and 3 are measured here."""
    from guitrainer.engine.memory.measure import measure_training_step

    c = config(family, res, ckpt=ckpt)
    c.schedule.batch_size = batch
    measured = measure_training_step(c, method="fake", blocks=blocks)
    assert estimate.estimate(c, _reduced(family, blocks)).allocated == pytest.approx(measured.peak, rel=0.10)


@pytest.mark.slow
def test_tracker_counts_the_text_encoders_only_when_they_stay() -> None:
    """Uncached, the step holds CLIP-L and T5-XXL in bf16 (by hand: 2 bytes x their parameters) beside the
    transformer; cached, only random embeddings of T5's 512 tokens."""
    from guitrainer.engine.memory.measure import measure_training_step

    kept = measure_training_step(config("flux1", 256, cached=False), method="fake", blocks=(1, 1))
    cached = measure_training_step(config("flux1", 256), method="fake", blocks=(1, 1))
    encoders = 2 * (123_060_480 + t5_xxl_encoder_by_hand())
    assert kept.static - cached.static == pytest.approx(encoders, rel=0.002)
