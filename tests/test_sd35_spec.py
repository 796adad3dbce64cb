"""The estimator's table for full-size SD 3.5 Large and Medium, built on ``meta``; each count is derived by hand
in the test beside the number it checks."""

from __future__ import annotations

import pytest

from guitrainer.core.families import sd35
from guitrainer.core.memory import specs
from guitrainer.engine.families.sd35 import spec

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("version", ["5-large", "5-medium"])
def test_the_tables_core_ships_are_what_meta_builds(version):
    assert spec.parameter_table(version).spec == sd35.SPECS[version]


def test_the_estimator_finds_the_family_table():
    assert specs.spec_of("sd35") is sd35.SPECS["5-large"]


def test_parts_parameter_counts():
    large, medium = spec.parameter_table("5-large"), spec.parameter_table("5-medium")
    assert large.spec.denoiser == 8_056_627_520 and medium.spec.denoiser == 2_243_171_520  # "8.1 B", "2.5 B" with pos_embed
    # the pos_embed grids are buffers: 192² × 2432 and 384² × 1536
    assert large.buffers == 192 * 192 * 2432 and medium.buffers == 384 * 384 * 1536
    # CLIP-L (123,060,480) + its 768² projection; OpenCLIP bigG with projection; T5-XXL's encoder
    assert large.spec.text_encoders == (123_060_480 + 768 * 768, 694_659_840, 4_762_310_656)
    assert large.spec.text_encoder_shapes == ((768, 3072, 12), (1280, 5120, 32), (4096, 10240, 24))
    assert (large.spec.cross_attention_dim, large.spec.vae_channels, large.text_tokens) == (4096, 128, 77 + 256)


def test_lora_tables_count_every_layer_of_each_target_set():
    """Large (38 blocks, h 2432): image stream q/k/v/out 4 × 38 = 152 at 0.25 tokens per latent pixel (2 × 2
    patches); text stream add_q/k/v 3 × 38 + to_add_out 37 (none in the last block) = 151. Medium (24 blocks,
    h 1536): 4 × 24 + attn2's 4 × 13 = 148 image layers, 3 × 24 + 23 = 95 text layers."""
    large, medium = spec.parameter_table("5-large").spec, spec.parameter_table("5-medium").spec
    assert large.denoiser_lora["attention"] == ((2432, 2432, 151, 0.0), (2432, 2432, 152, 0.25))
    assert medium.denoiser_lora["attention"] == ((1536, 1536, 95, 0.0), (1536, 1536, 148, 0.25))
    # + the MLPs (4h wide): ff in every block, ff_context in all but the last
    assert (2432, 9728, 38, 0.25) in large.denoiser_lora["attention_ff"] and (9728, 2432, 37, 0.0) in large.denoiser_lora["attention_ff"]
    # + the modulation: norm1 6h (9h in Medium's 13 dual blocks), norm1_context 6h, the last block's 2h
    proj = medium.denoiser_lora["attention_ff_proj"]
    assert {(1536, 13824, 13, 0.0), (1536, 9216, 11 + 23, 0.0), (1536, 3072, 1, 0.0)} <= set(proj)
    # per unit of rank: Σ count·(in + out); Large attention = 303 layers × 4864
    assert large.lora_params_per_rank("attention") == 303 * (2432 + 2432)
    te = large.text_encoder_lora["attention_ff"]
    assert te[0] == ((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)) and te[2] == ()  # T5 frozen


def test_sd3_medium_has_no_shipped_table():
    with pytest.raises(ValueError, match="no shipped transformer config for SD 3 Medium"):
        spec.parameter_table("medium")
