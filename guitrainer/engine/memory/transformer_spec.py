"""What the transformer families' estimator tables are made of, counted on a model on ``meta``: parameters, and the
LoRA layers of a target set grouped by shape and by the tokens each sees (the estimator's 4-entry rows
``(in, out, count, image tokens per latent pixel)``, 0.0 = the text's). A family's ``spec`` module says which
layers see what (:func:`lora_table`'s ``tokens_per_pixel``) and assembles its
:class:`~guitrainer.core.families.facts.ModelSpec`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import nn

from guitrainer.core.families.facts import LoraTable


def parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def lora_table(model: nn.Module, names: Iterable[str], tokens_per_pixel: Callable[[str], float]) -> LoraTable:
    """The rows of the Linear layers ``names`` (full module names of ``model``), grouped by (in, out, tokens)."""
    groups: dict[tuple[int, int, float], int] = {}
    modules = dict(model.named_modules())
    for name in names:
        m = modules[name]
        key = (m.in_features, m.out_features, tokens_per_pixel(name))
        groups[key] = groups.get(key, 0) + 1
    return tuple(sorted((i, o, c, f) for (i, o, f), c in groups.items()))


def linear_parameters(block: nn.Module, ends: tuple[str, ...]) -> int:
    """Parameters of ``block``'s Linear layers whose names end with one of ``ends`` (its modulation Linears)."""
    return sum(parameters(m) for n, m in block.named_modules() if isinstance(m, nn.Linear) and n.endswith(ends))
