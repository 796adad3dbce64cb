"""``guitrainer-train … --fit-to 12GB`` (or ``--fit-to card``): Fit to this card, headless.

The memory savers are chosen by :func:`guitrainer.core.memory.fit.fit` for a card of that size (GB as cards are
sold: 12 GB = 12 GiB), or for this computer's GPU as it is now (``card``: its free memory, its precision rules).
The changes are printed to stderr, one per line with what each costs, and made before the run (or before
``--check`` prints the config). A run that cannot fit is refused (exit 2), with how close it came.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from guitrainer.base.units import GiB, MiB, format_bytes

if TYPE_CHECKING:
    from guitrainer.config import TrainingConfig

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gb|g|gib|mb|m|mib)?\s*$", re.IGNORECASE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fit's option on the training CLI's parser."""
    parser.add_argument(
        "--fit-to",
        metavar="SIZE|card",
        help="choose the memory savers (checkpointing, caching, 8-bit AdamW, fp8/int8/nf4 frozen weights, blocks in "
        "system RAM, batch with accumulation) that fit a GPU of SIZE (e.g. 12GB, 8GB, 11264MB) or this computer's GPU "
        "('card'), fastest first; the changes are printed and used for the run",
    )


def parse_size(text: str) -> int:
    """Bytes of a card size: "12GB", "12 GB", "12G", "11264MB" (GB and MB as cards are sold: 2³⁰ and 2²⁰)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"--fit-to: {text!r} is not a card size; write it as 12GB, 8GB or 11264MB, or 'card'")
    number, unit = float(m.group(1)), (m.group(2) or "gb").lower()
    size = int(number * (MiB if unit.startswith("m") else GiB))
    if size < 256 * MiB:
        raise ValueError(f"--fit-to: {text!r} is smaller than any card that trains (at least 256MB)")
    return size


def fit_config(cfg: TrainingConfig, target: str) -> tuple[TrainingConfig | None, int]:
    """``cfg`` with the savers Fit chooses for ``target`` made, and the exit status (0; 1 when settings fit the card
    but not this computer's RAM, printed to plan with; 2 when nothing fits or the target cannot be read). Says what
    it did on stderr."""
    from guitrainer.core.memory.fit import apply, card_budget, fit
    from guitrainer.core.memory.system_ram import machine_ram

    device = None
    if target.strip().lower() == "card":
        from guitrainer.core.device import hardware

        device = hardware.probe(cfg.precision.gpu_index)
        budget, said = card_budget(device)
        if budget is None:
            print(f"error: --fit-to card: {said}, e.g. --fit-to 12GB", file=sys.stderr)
            return None, 2
    else:
        try:
            budget = parse_size(target)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return None, 2
        said = f"a card of {format_bytes(budget)}"
    result = fit(cfg, budget, device, machine_ram=machine_ram())
    print(f"fit to {said}: {result.summary}", file=sys.stderr)
    if result.best is None and result.ram_limited is not None:  # fits the card, not this computer's RAM: exit 1
        for change in result.ram_limited[0].changes:
            print(f"  to plan with: {change.path} = {change.after!r} (was {change.before!r}): {change.why}",
                  file=sys.stderr)
        return None, 1
    if result.best is None:
        return None, 2
    for change in result.best.changes:
        print(f"  {change.path} = {change.after!r} (was {change.before!r}): {change.why}", file=sys.stderr)
    for alt in result.alternatives:
        listed = "; ".join(c.text for c in alt.changes) or "as it is"
        print(f"  also fits ({format_bytes(alt.total)}, about {alt.slower:.2f}× the step time without memory savers): {listed}", file=sys.stderr)
    return apply(cfg, result.best), 0
