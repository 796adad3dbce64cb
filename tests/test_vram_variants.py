"""The VRAM estimator's view of network variants: shipped layer tables equal the models', and the trainable
tensors it counts are exactly the ones the engine injects (issue 21 #3)."""

from __future__ import annotations

import pytest
import torch

from guitrainer.config import TrainingConfig
from guitrainer.core.memory import estimate, network, specs
from guitrainer.engine.memory import model_spec, variant_spec
from guitrainer.engine.network import variants


@pytest.mark.slow
@pytest.mark.parametrize("family", ["demo", "sd15", "sdxl"])
def test_shipped_tables_are_the_models(family):
    assert specs.conv_table(family) == variant_spec.conv_table(family)
    assert specs.text_encoder_mlp_tables(family) == variant_spec.text_encoder_mlp_tables(family)


def _injected_count(family: str, network) -> int:
    unet = model_spec.build_on_meta(family, "unet")
    parts = [p for p in ("text_encoder", "text_encoder_2") if p in model_spec.component_configs(family)]
    tes = [model_spec.build_on_meta(family, p) for p in parts] if network.train_text_encoder else []
    with torch.device("meta"):
        variants.inject_unet(unet, network)
        for te in tes:
            variants.inject_text_encoder(te, network)
    return sum(p.numel() for m in (unet, *tes) for p in variants.trainable_parameters(m))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "rank", "conv_rank", "factor", "te", "layout"), [
    ("locon", 16, 16, -1, False, "column"),
    ("dora", 16, 8, -1, True, "column"),
    ("dora", 16, 8, -1, True, "row"),  # one magnitude per output channel: [out] instead of [in]
    ("loha", 8, 4, -1, True, "column"),
    ("lokr", 16, 8, -1, True, "column"),
    ("lokr", 4, 4, 8, False, "column"),
    ("lokr", 64, 64, 16, True, "column"),  # whole second factors where the rank is large
])
def test_counted_parameters_are_the_injected_ones_on_sd15(kind, rank, conv_rank, factor, te, layout):
    cfg = TrainingConfig()
    cfg.set("model.family", "sd15")
    for key, value in (("type", kind), ("rank", rank), ("conv_rank", conv_rank), ("lokr_factor", factor),
                       ("train_text_encoder", te), ("target_modules", "attention_ff_proj"), ("dora_layout", layout)):
        cfg.set(f"network.{key}", value)
    counted = sum(r * k * c for r, k, c in network.variant_tensor_shapes(specs.spec_of("sd15"), cfg.network))
    assert counted == _injected_count("sd15", cfg.network)
    est = estimate.estimate(cfg)
    assert est.get("lora_weights") >= 4 * counted  # fp32 master weights, in 512-byte blocks


def test_variants_cost_more_than_plain_lora_and_dora_more_than_locon():
    def allocated(kind: str, ckpt: bool) -> int:
        cfg = TrainingConfig()
        cfg.set("model.family", "sd15")
        cfg.set("network.type", kind)
        cfg.set("precision.gradient_checkpointing", ckpt)
        return estimate.estimate(cfg).allocated

    for ckpt in (False, True):
        assert allocated("lora", ckpt) < allocated("locon", ckpt) < allocated("dora", ckpt)
    assert network.factorization(320, -1) == (16, 20) and network.factorization(768, 8) == (8, 96)
