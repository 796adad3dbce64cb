"""core.precision.family_rules: a family's published precision facts (Flux.1: released in bf16, overflows fp16 in
its blocks and T5, diffusers PR #9097 / transformers #9295) reach the advice; the UNet families are left alone."""

from __future__ import annotations

from helpers import fake_device

from guitrainer.config import TrainingConfig
from guitrainer.core.precision.advisor import advise


def _codes(device: str, family: str, training: str) -> dict[str, object]:
    cfg = TrainingConfig()
    cfg.model.family, cfg.model.base, cfg.precision.training = family, "x.safetensors", training
    return {a.code: a for a in advise(fake_device(device), cfg)}


def test_fp16_on_flux_with_bf16_at_hand_is_a_warning_that_suggests_bf16():
    found = _codes("rtx4090", "flux1", "fp16")  # Ada: bf16 native (sm_89)
    advice = found["family_fp16_overflows"]
    assert advice.level == "warning" and advice.suggestion == {"precision.training": "bf16"}
    assert "9097" in advice.message


def test_fp16_on_flux_without_bf16_says_what_it_costs_and_suggests_nothing_it_cannot_do():
    found = _codes("t4", "flux1", "fp16")  # Turing: no bf16 (bf16 from sm_80)
    advice = found["family_fp16_no_bf16"]
    assert advice.level == "warning" and advice.suggestion == {}
    assert "skip" in advice.message and "family_fp16_overflows" not in found


def test_fp32_flux_on_a_gpu_names_the_extra_memory():
    advice = _codes("rtx4090", "flux1", "fp32")["family_released_bf16"]
    # 11,901,408,320 parameters x 2 more bytes each = 23.8e9 B = 22.2 GB (binary GB, as format_bytes writes)
    assert "22.2 GB" in advice.message


def test_the_unet_families_get_none_of_it():
    for family in ("sd15", "sdxl", "demo"):
        found = _codes("t4", family, "fp16")
        assert not {c for c in found if c.startswith("family_")}, family
