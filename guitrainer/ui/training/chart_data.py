"""The numbers behind the training charts (numpy only, no Qt): per-step series in doubling buffers,
the EMA of the loss, and the axis-range rules that keep the plots from jumping."""

from __future__ import annotations

import math

import numpy as np

#: every series kept per step, in CSV column order
COLUMNS: tuple[str, ...] = (
    "step",
    "epoch",
    "loss",
    "loss_ema",
    "class_loss",
    "lr",
    "grad_scale",
    "skipped",
    "seconds_per_step",
    "images_per_second",
    "validation_loss",  # held-out images, on validation steps only (empty elsewhere)
)


class MetricBuffer:
    """Named float64 columns that grow by doubling; ``column(name)`` is a view of the filled part."""

    def __init__(self, names: tuple[str, ...] = COLUMNS, capacity: int = 1024):
        self.names = names
        self._capacity = max(16, int(capacity))
        self._n = 0
        self._cols: dict[str, np.ndarray] = {k: np.full(self._capacity, np.nan) for k in names}

    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        return self._capacity

    def append(self, values: dict[str, float]) -> None:
        """Add one row; missing columns are NaN."""
        if self._n == self._capacity:
            self._grow()
        i = self._n
        for name, col in self._cols.items():
            col[i] = values.get(name, np.nan)
        self._n += 1

    def _grow(self) -> None:
        new = self._capacity * 2
        for name, col in self._cols.items():
            bigger = np.full(new, np.nan)
            bigger[: self._n] = col[: self._n]
            self._cols[name] = bigger
        self._capacity = new

    def column(self, name: str) -> np.ndarray:
        return self._cols[name][: self._n]

    def set_column(self, name: str, values: np.ndarray) -> None:
        self._cols[name][: self._n] = values

    def clear(self) -> None:
        self._n = 0
        for col in self._cols.values():
            col.fill(np.nan)


def ema(values: np.ndarray, smoothing: float) -> np.ndarray:
    """Debiased exponential moving average (TensorBoard's): non-finite values are passed over."""
    out = np.full(values.shape, np.nan)
    a = float(smoothing)
    s, k = 0.0, 0
    for i, v in enumerate(values.tolist()):
        if math.isfinite(v):
            s = a * s + (1.0 - a) * v
            k += 1
        if k:
            out[i] = s / (1.0 - a**k) if a > 0 else s
    return out


def sticky_range(current: tuple[float, float], target: tuple[float, float]) -> tuple[float, float] | None:
    """Where an auto-ranged axis should go: None keeps ``current`` while it still frames ``target`` well.

    A new range leaves half the data's span as headroom on the side the data outgrew (10% on the
    other), so a growing series moves the axis now and then instead of at every point.
    """
    a, b = min(target), max(target)
    c, d = min(current), max(current)
    span = b - a
    if span <= 0:  # a flat series: frame it around its value, not pyqtgraph's arbitrary ±0.5
        pad = abs(b) * 0.25 or 0.5
        if c <= a <= d and (d - c) <= 8 * pad:
            return None
        return a - pad, b + pad
    if c <= a and b <= d and span >= 0.3 * (d - c) > 0:
        return None
    lo = 0.5 * span if a < c else 0.1 * span
    hi = 0.5 * span if b > d else 0.1 * span
    return a - lo, b + hi


def bounds(*arrays: np.ndarray, positive: bool = False) -> tuple[float, float] | None:
    """(min, max) of the finite values (positive ones only on a log axis), or None."""
    lo, hi = math.inf, -math.inf
    for a in arrays:
        if not len(a):
            continue
        v = a[np.isfinite(a)]
        if positive:
            v = v[v > 0]
        if v.size:
            lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    return (lo, hi) if lo <= hi else None
