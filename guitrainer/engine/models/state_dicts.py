"""State dicts as the families' single-file and split-file builders read them: each tensor in the dtype the run
builds the part in (issue 30: nothing is made in fp32 on the CPU first)."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def in_dtype(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` with each floating-point tensor in ``dtype``: one cast per distinct tensor, so a tied one (T5's
    shared embedding) stays one tensor; a tensor already in ``dtype`` is the file's own, not a copy; the others
    are left as they are."""
    done: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if id(value) not in done:
            done[id(value)] = value.to(dtype) if value.is_floating_point() else value
        out[key] = done[id(value)]
    return out
