"""Comparing stored runs: which settings differ, and their curves on one x axis.

Pure functions over the dicts and lists the run store returns, so the Runs page only shows
what is decided here (and a test can check it without Qt).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: x axes an overlay can be aligned on: label -> metric column
ALIGNMENTS: dict[str, str] = {"step": "step", "images seen": "images"}

#: how a run was launched, not how it trains (a resumed run stores the state it resumed from): left out
#: of a diff unless asked
IDENTITY_FIELDS = frozenset({"schema_version", "schedule.resume_from"})


@dataclass(frozen=True)
class ConfigChange:
    """One setting that differs between two runs (``None``: the setting is absent from that run)."""

    path: str
    a: Any
    b: Any


def flatten(config: dict[str, Any]) -> dict[str, Any]:
    """``{"network": {"rank": 16}}`` -> ``{"network.rank": 16}``; lists and tables inside a setting stay whole."""
    out: dict[str, Any] = {}
    for section, values in config.items():
        if isinstance(values, dict):
            for key, value in values.items():
                out[f"{section}.{key}"] = value
        else:
            out[section] = values
    return out


def config_diff(a: dict[str, Any], b: dict[str, Any], *, include_identity: bool = False) -> list[ConfigChange]:
    """The settings whose values differ between two configs (as ``TrainingConfig.to_dict()`` gives them),
    in ``a``'s order, then the ones only ``b`` has. Whole numbers and floats of equal value are equal."""
    fa, fb = flatten(a), flatten(b)
    out = []
    for path in [*fa, *(k for k in fb if k not in fa)]:
        if path in IDENTITY_FIELDS and not include_identity:
            continue
        va, vb = fa.get(path), fb.get(path)
        if not _same(va, vb):
            out.append(ConfigChange(path, va, vb))
    return out


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, bool) or isinstance(y, bool):
        return x is y or x == y and type(x) is type(y)
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
    return x == y


def aligned(series: dict[str, Sequence[Any]], metric: str, by: str) -> tuple[list[float], list[float]]:
    """(x, y) of ``metric`` against the column ``by`` (``"step"`` or ``"images"``), leaving out the points
    where either is missing, so runs of different batch sizes line up by how many images they saw."""
    xs, ys = series.get(by, []), series.get(metric, [])
    x_out, y_out = [], []
    for x, y in zip(xs, ys):
        if x is None or y is None:
            continue
        fx, fy = float(x), float(y)
        if math.isfinite(fx) and math.isfinite(fy):
            x_out.append(fx)
            y_out.append(fy)
    return x_out, y_out


def format_value(value: Any) -> str:
    """A setting's value as the diff table shows it."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and "path" in v for v in value):
            return ", ".join(f"{v['path']} ×{v.get('repeats', 1)}" for v in value)
        return ", ".join(format_value(v) for v in value) or "(none)"
    if value == "":
        return "(empty)"
    return str(value)
