"""Every shipped preset named for a card ("… — 24 GB") fits that card by the estimator, CUDA context and allocator
slack included, and its settings are valid: what the preset's name promises, the VRAM meter shows."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from guitrainer.base.units import GiB
from guitrainer.config.presets import PresetStore
from guitrainer.core.memory.estimate import estimate


@dataclass(frozen=True)
class Card:
    total_memory: int


def _sized() -> list[tuple[str, int]]:
    store = PresetStore()
    out = []
    for name in store.names():
        m = re.search(r"— (\d+) GB$", name)
        if m:
            out.append((name, int(m.group(1))))
    return out


@pytest.mark.parametrize(("name", "gigabytes"), _sized())
def test_a_preset_fits_the_card_its_name_promises(name, gigabytes):
    cfg = PresetStore().get(name).config()
    breakdown = estimate(cfg, device=Card(gigabytes * GiB))
    assert breakdown.total <= gigabytes * GiB, (name, [(p.key, p.bytes) for p in breakdown.parts])


def test_the_transformer_presets_are_shipped():
    names = {n for n, _ in _sized()}
    assert {"Flux.1 dev — 24 GB", "Flux.1 dev — 16 GB", "SD 3.5 Medium — 12 GB", "SD 3.5 Large — 24 GB"} <= names
