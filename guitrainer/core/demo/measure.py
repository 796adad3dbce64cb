"""What a Demo sample shows, read off its pixels: which shape, how well it matches, and in what colour.

The measure is simple on purpose, so the Guide can say exactly what it is. The pixels far
(:data:`FOREGROUND_DISTANCE`) from the median colour of the picture's border start the drawn thing; the
picture's pixels are then split into two colour groups (2-means from those two starts), so a background that
shades from one colour into another stays background, and the group that is not the border's is the drawn
thing. Its colour is the palette colour nearest the foreground's mean. Its shape is the template
(:func:`~guitrainer.core.demo.shapes.shape_mask`, fitted to the foreground's extent) with the highest
intersection over union (IoU) with the foreground; a sample *shows* a shape and colour when that template is
the one asked for, its IoU is at least :data:`SHOWS_IOU`, and the colour is the one asked for — and most
of the foreground (:data:`SHOWS_COLOR_SHARE`) is nearest that colour, so speckled noise whose mean happens to
land near a palette colour shows nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from PIL import Image

from guitrainer.core.demo.shapes import BASE_SHAPES, CONCEPT, PALETTE, shape_mask

#: RGB distance from the background beyond which a pixel counts as part of the drawn thing
FOREGROUND_DISTANCE = 60.0
#: the IoU a sample's best template needs for the sample to show that shape
SHOWS_IOU = 0.6
#: the share of foreground pixels whose own nearest palette colour is the shape's, for a sample to show it
SHOWS_COLOR_SHARE = 0.6
#: fewer foreground pixels than this (of 4096 at 64 px) is an empty picture
MIN_FOREGROUND = 24
SHAPES: tuple[str, ...] = (*BASE_SHAPES, CONCEPT.shape)


@dataclass(frozen=True)
class Reading:
    """What one picture shows. ``shape`` is None for a picture with nothing drawn on it."""

    shape: str | None
    ious: dict[str, float]
    color: str | None
    background: str
    color_share: float = 0.0

    @property
    def iou(self) -> float:
        return self.ious.get(self.shape, 0.0) if self.shape else 0.0

    def shows(self, shape: str, color: str) -> bool:
        return (self.shape == shape and self.iou >= SHOWS_IOU and self.color == color
                and self.color_share >= SHOWS_COLOR_SHARE)

    def describe(self) -> str:
        """'a red bar (IoU 0.89)', or 'nothing drawn'."""
        if self.shape is None:
            return "nothing drawn"
        return f"a {self.color} {self.shape} (IoU {self.iou:.2f})"


_NAMES = list(PALETTE)
_COLORS = np.asarray([PALETTE[n] for n in _NAMES], dtype=float)


def nearest_color(rgb: np.ndarray) -> str:
    return _NAMES[int(np.argmin(np.linalg.norm(_COLORS - rgb, axis=1)))]


def nearest_indices(pixels: np.ndarray) -> np.ndarray:
    """Per pixel of an (N, 3) array, the index in the palette of its nearest colour."""
    return np.argmin(np.linalg.norm(pixels[:, None, :] - _COLORS[None], axis=2), axis=1)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 0.0


def two_groups(px: np.ndarray, fg: np.ndarray, bg: np.ndarray, rounds: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Split the pixels into two colour groups (2-means), started from the border's median and the pixels far
    from it: a background that shades from one colour to another stays one group. Returns the drawn group's
    mask and the background group's mean colour."""
    flat = px.reshape(-1, 3)
    centres = np.stack([bg, flat[fg.reshape(-1)].mean(axis=0)])
    for _ in range(rounds):
        near_fg = np.linalg.norm(flat - centres[1], axis=1) < np.linalg.norm(flat - centres[0], axis=1)
        if near_fg.all() or not near_fg.any():
            break
        centres = np.stack([flat[~near_fg].mean(axis=0), flat[near_fg].mean(axis=0)])
    if np.linalg.norm(centres[1] - centres[0]) <= FOREGROUND_DISTANCE:  # one colour after all: nothing drawn
        return np.zeros(px.shape[:2], dtype=bool), centres[0]
    return near_fg.reshape(px.shape[:2]), centres[0]


def read_image(image: Image.Image | str | os.PathLike[str]) -> Reading:
    """Read ``image`` (a picture or a PNG's path; any size, read at its own size)."""
    if not isinstance(image, Image.Image):
        with Image.open(image) as img:
            image = img.convert("RGB")
    px = np.asarray(image.convert("RGB"), dtype=float)
    h, w = px.shape[:2]
    border = np.concatenate([px[:2].reshape(-1, 3), px[-2:].reshape(-1, 3), px[:, :2].reshape(-1, 3), px[:, -2:].reshape(-1, 3)])
    bg = np.median(border, axis=0)
    fg = np.linalg.norm(px - bg, axis=2) > FOREGROUND_DISTANCE
    if fg.sum() >= MIN_FOREGROUND:
        fg, bg = two_groups(px, fg, bg)
    background = nearest_color(bg)
    if fg.sum() < MIN_FOREGROUND:
        return Reading(None, {}, None, background)
    color = nearest_color(px[fg].mean(axis=0))
    share = float(np.mean(nearest_indices(px[fg]) == _NAMES.index(color)))
    ys, xs = np.nonzero(fg)
    x0, x1 = np.percentile(xs, [1, 99])
    y0, y1 = np.percentile(ys, [1, 99])
    cx, cy = (x0 + x1 + 1) / 2, (y0 + y1 + 1) / 2
    half = max(x1 - x0 + 1, y1 - y0 + 1) / 2
    side = max(h, w)
    ious: dict[str, float] = {}
    for shape in SHAPES:
        best = 0.0
        for scale in (0.92, 1.0, 1.08):
            mask = shape_mask(shape, cx, cy, half * scale, side)[:h, :w]
            best = max(best, iou(mask, fg))
        ious[shape] = round(best, 4)
    return Reading(max(ious, key=lambda s: ious[s]), ious, color, background, round(share, 4))


def expectation(prompt: str) -> tuple[str, str] | None:
    """The (shape, colour) a Demo prompt asks for: "a red zorb" the concept, "a blue square" a base shape; None
    for a prompt the measure does not know (a user's own wording)."""
    text = prompt.split("--")[0].strip().lower()
    if text == CONCEPT.prompt:
        return CONCEPT.shape, CONCEPT.color
    words = text.split()
    if len(words) == 3 and words[0] == "a" and words[1] in PALETTE and words[2] in SHAPES:
        return words[2], words[1]
    return None
