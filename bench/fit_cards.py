"""What "Fit to this card" chooses for full-size Flux.1 dev and SDXL on the cards people have.

For each (preset, card size) the settings are the preset's, but with every memory saver Fit may change set off
(checkpointing, caches, 8-bit AdamW, fp8 storage, offload, batch 1 without accumulation kept as the preset has
it), so the table shows what Fit picks from scratch: the changes, the estimate, its step-time factor, the
alternatives' count. No GPU needed: Fit plans for a CUDA card of that size from the estimator.

    python bench/fit_cards.py
"""

from __future__ import annotations

import sys

from guitrainer.base.units import format_bytes
from guitrainer.config.presets import PresetStore
from guitrainer.core.memory.fit import fit

GB = 1024**3
CASES = (("Flux.1 dev — 24 GB", (8, 12, 16, 24)), ("SDXL character", (6, 8)))
PLAIN = {
    "precision.gradient_checkpointing": False,
    "precision.cache_latents": False,
    "precision.cache_text_encoder_outputs": False,
    "precision.base_weights": "auto",
    "precision.offload_blocks": 0.0,
    "optimizer.name": "AdamW",
}


def plain(config):  # noqa: ANN001, ANN201 - a TrainingConfig
    """``config`` with every saver Fit may choose set off."""
    out = config.copy()
    for path, value in PLAIN.items():
        out.set(path, value)
    return out


def main() -> int:
    store = PresetStore()
    print("| model | card | chosen changes | estimate | step time × | also fits |")
    print("|---|---|---|---|---|---|")
    for preset, cards in CASES:
        base = plain(store.find(preset).config())
        for card in cards:
            result = fit(base, card * GB)
            if result.best is None:
                least = format_bytes(result.smallest.total) if result.smallest else "-"
                print(f"| {preset} | {card} GB | nothing fits (least {least}) | | | |")
                continue
            changes = "; ".join(c.text for c in result.best.changes) or "as it is"
            print(f"| {preset} | {card} GB | {changes} | {format_bytes(result.best.total)} | "
                  f"{result.best.slower:.2f} | {len(result.alternatives)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
