"""Optimizer state of the recipe optimizers in the VRAM estimator, against real optimizer steps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from guitrainer.config import config_from_dict
from guitrainer.core.memory import estimate, network
from guitrainer.engine.memory.measure import bnb_state_bytes

#: LoRA-like shapes: lora_A [rank, in] and lora_B [out, rank], big and small
SHAPES = [(16, 320), (320, 16), (64, 1280), (1280, 64), (4, 768)]


@pytest.mark.parametrize(("name", "per_param"), [("Prodigy", 16), ("DAdaptAdam", 12), ("AdamWScheduleFree", 8)])
def test_full_state_optimizers_by_hand_and_measured(name, per_param):
    # by hand: 4 / 3 / 2 fp32 tensors of each parameter's size, each rounded to 512-byte blocks
    want = sum(per_param // 4 * (-(-4 * r * c // 512) * 512) for r, c in SHAPES)
    assert network.optimizer_state_bytes(name, SHAPES) == want
    measured = bnb_state_bytes(SimpleNamespace(name=name, lr=1.0, betas=[0.9, 0.999], weight_decay=0.0), SHAPES)
    assert measured == want


def test_came_state_by_hand_and_measured():
    # exp_avg (4 B/param) + two row and two column fp32 vectors + a 0-dim RMS, each in 512-byte blocks
    def blocks(n: int) -> int:
        return -(-n // 512) * 512

    want = sum(blocks(4 * r * c) + 2 * blocks(4 * r) + 2 * blocks(4 * c) + blocks(4) for r, c in SHAPES)
    assert network.optimizer_state_bytes("CAME", SHAPES) == want
    measured = bnb_state_bytes(SimpleNamespace(name="CAME", lr=1e-4, betas=[0.9, 0.999], weight_decay=0.0), SHAPES)
    assert measured == want


def test_estimate_shows_the_state_part_for_each_new_optimizer():
    sizes = {}
    for name in ("AdamW", "Prodigy", "DAdaptAdam", "AdamWScheduleFree", "CAME"):
        cfg = config_from_dict({"model": {"family": "sd15"}, "optimizer": {"name": name}})
        part = next(p for p in estimate.estimate(cfg).parts if p.key == "optimizer")
        assert part.tooltip, name
        sizes[name] = part.bytes
    assert sizes["Prodigy"] == 2 * sizes["AdamW"] and sizes["AdamWScheduleFree"] == sizes["AdamW"]
    assert sizes["DAdaptAdam"] * 2 == sizes["AdamW"] * 3
    assert sizes["CAME"] < sizes["AdamW"] / 1.5
