"""Aspect-ratio buckets: which (width, height) each training image is resized and cropped to.

Pure functions, shared by the dataset page (to show the buckets) and the engine (to train with them).
The rule is kohya's: every bucket side is a multiple of ``step`` within ``[min_side, max_side]``
and a bucket's area is as close to ``resolution²`` as the step allows without exceeding it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

Bucket = tuple[int, int]  # (width, height)


def make_buckets(resolution: int, min_side: int = 256, max_side: int = 1024, step: int = 64) -> list[Bucket]:
    """All buckets for a training resolution, sorted by aspect ratio (tall first, wide last).

    Args:
        resolution: side of the square whose area each bucket approximates.
        min_side, max_side: inclusive bounds of a bucket's side.
        step: bucket sides are multiples of this.
    """
    if step <= 0 or resolution < step:
        raise ValueError(f"`step` must be positive and at most `resolution` (got step={step}, resolution={resolution})")
    if min_side > max_side:
        raise ValueError(f"`min_side` ({min_side}) must not exceed `max_side` ({max_side})")
    max_area = (resolution // step) ** 2  # in units of step²
    side = int(math.isqrt(max_area)) * step
    buckets: set[Bucket] = {(side, side)}
    lo = max(step, -(-min_side // step) * step)  # min_side rounded up to a multiple of step
    width = lo
    while width <= max_side:
        height = min(max_side // step * step, (max_area // (width // step)) * step)
        if height >= min_side:
            buckets.add((width, height))
            buckets.add((height, width))
        width += step
    return sorted(buckets, key=lambda b: (b[0] / b[1], b[0]))


def assign_bucket(width: int, height: int, buckets: Iterable[Bucket]) -> Bucket:
    """The bucket whose aspect ratio is nearest to the image's (compared on a log scale).

    Ties go to the larger-area bucket, then the first in ``buckets`` order.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    target = math.log(width / height)
    best: Bucket | None = None
    best_key: tuple[float, int] | None = None
    for b in buckets:
        key = (round(abs(math.log(b[0] / b[1]) - target), 12), -b[0] * b[1])
        if best_key is None or key < best_key:
            best, best_key = b, key
    if best is None:
        raise ValueError("no buckets to choose from")
    return best


def bucket_counts(sizes: Iterable[tuple[int, int]], buckets: list[Bucket]) -> dict[Bucket, int]:
    """How many images (``(width, height)`` each) land in each bucket; only non-empty buckets."""
    counts: Counter[Bucket] = Counter(assign_bucket(w, h, buckets) for w, h in sizes)
    return {b: counts[b] for b in buckets if counts[b]}
