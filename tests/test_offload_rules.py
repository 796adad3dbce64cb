"""The advice on ``precision.offload_blocks`` (core/precision/offload_rules.py), through the advisor: each rule's
condition, and applying a suggestion clears its own finding."""

from __future__ import annotations

import pytest
from helpers import config_with, fake_device

from guitrainer.core.precision import advisor


def codes(device: str, **settings: object) -> dict[str, object]:
    return {a.code: a for a in advisor.advise(fake_device(device), config_with(**settings))}


def test_offload_without_checkpointing_is_an_error_that_its_suggestion_clears():
    found = codes("rtx3060", precision__offload_blocks=0.5, precision__gradient_checkpointing=False)
    advice = found["offload_without_checkpointing"]
    assert advice.level == "error" and "50%" in advice.message
    cfg = config_with(precision__offload_blocks=0.5, precision__gradient_checkpointing=False)
    for path, value in advice.suggestion.items():
        cfg.set(path, value)
    assert "offload_without_checkpointing" not in {a.code for a in advisor.advise(fake_device("rtx3060"), cfg)}


@pytest.mark.parametrize("device, code", [("cpu", "offload_nothing_to_gain"), ("mps", "offload_nothing_to_gain"),
                                          ("arc_a770", "offload_not_on_xpu")])
def test_where_offload_does_nothing_the_advice_says_so(device, code):
    found = codes(device, precision__offload_blocks=0.5, precision__gradient_checkpointing=True)
    assert code in found and found[code].suggestion == {"precision.offload_blocks": 0.0}


@pytest.mark.parametrize("device", ["rtx3060", "rx7900"])
def test_offload_with_checkpointing_on_a_cuda_or_rocm_gpu_needs_no_advice(device):
    found = codes(device, precision__offload_blocks=0.5, precision__gradient_checkpointing=True)
    assert not [c for c in found if c.startswith("offload")]
    assert not [c for c in codes(device) if c.startswith("offload")]  # off: nothing said either
