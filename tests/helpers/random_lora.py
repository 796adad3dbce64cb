"""A LoRA's factors filled with small random numbers (the export and reader tests' stand-in for a trained one)."""

from __future__ import annotations

import torch

from guitrainer.engine.network.lora import ADAPTER, lora_layers


def random_lora(model: torch.nn.Module, seed: int, on_meta: bool = False) -> None:
    """Every LoRA layer's A and B of ``model`` drawn from N(0, 0.01²) with ``seed`` (on the CPU first when the model
    is on ``meta``: a full-size architecture with its LoRA materialised alone)."""
    gen = torch.Generator().manual_seed(seed)
    for layer in lora_layers(model).values():
        for sub in (layer.lora_A[ADAPTER], layer.lora_B[ADAPTER]):
            if on_meta:
                sub.to_empty(device="cpu")
            with torch.no_grad():
                sub.weight.copy_(torch.randn(sub.weight.shape, generator=gen) * 0.01)
