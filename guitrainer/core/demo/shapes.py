"""The Demo's little world: flat shapes in a few colours on a plain background, drawn the same way for the
base model's training set (``resources/make_demo_base.py``), the Demo dataset and the measure's templates.

The base model knows :data:`BASE_SHAPES` in every :data:`PALETTE` colour, captioned "a blue square"
(the background is not named: the model picks one). The Demo dataset teaches a concept it has never seen,
:data:`CONCEPT` — a long red bar called "a red zorb" — so its samples show something new after a minute's training.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

#: the picture side the base model was trained at, and the Demo trains and samples at
SIZE = 64

#: colour names and their RGB; far enough apart that the nearest name of a drawn colour is never in doubt
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 215, 40),
    "purple": (150, 60, 190),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
#: the shapes the base model knows
BASE_SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
#: a shape and colour pair must differ from its background by at least this (Euclidean RGB distance)
MIN_CONTRAST = 120.0


@dataclass(frozen=True)
class Concept:
    """What the Demo dataset teaches: a shape the base never saw, in one colour, named by a trigger word."""

    trigger: str
    shape: str
    color: str

    @property
    def prompt(self) -> str:
        """Its caption: the trigger word with the colour, a word the base knows ("a red zorb"), as DreamBooth
        captions name the class beside the rare token ("a sks dog"). A trigger alone ("a zorb") is too close
        to the empty prompt in the tiny text encoder: guidance then cancels what the LoRA learned."""
        return f"a {self.color} {self.trigger}"


CONCEPT = Concept(trigger="zorb", shape="bar", color="red")
#: the prompt the Demo samples beside the trigger: a thing the base knows, which the LoRA should leave alone
CONTROL_PROMPT = "a blue square"


@dataclass(frozen=True)
class Drawing:
    """One picture's content: what is drawn where (the centre and half-side in pixels)."""

    shape: str
    color: str
    background: str
    cx: float
    cy: float
    half: float

    @property
    def caption(self) -> str:
        return f"a {self.color} {self.shape}"


def contrast(a: str, b: str) -> float:
    """Euclidean RGB distance between two palette colours."""
    return float(np.linalg.norm(np.subtract(PALETTE[a], PALETTE[b])))


def backgrounds_for(color: str) -> list[str]:
    """The palette colours a ``color`` shape may be drawn on: every other colour at least :data:`MIN_CONTRAST` away."""
    return [b for b in PALETTE if b != color and contrast(color, b) >= MIN_CONTRAST]


def shape_mask(shape: str, cx: float, cy: float, half: float, size: int = SIZE) -> np.ndarray:
    """A boolean ``size`` × ``size`` mask of ``shape`` centred at (``cx``, ``cy``) inside a square of half-side ``half``."""
    img = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(img)
    x0, y0, x1, y1 = cx - half, cy - half, cx + half, cy + half
    if shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=255)
    elif shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=255)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=255)
    elif shape == "bar":  # three times as wide as it is high: no blur makes it a circle, square or triangle
        draw.rectangle((x0, cy - half / 3.0, x1, cy + half / 3.0), fill=255)
    else:
        raise ValueError(f"unknown shape {shape!r}; the Demo draws {', '.join((*BASE_SHAPES, CONCEPT.shape))}")
    return np.asarray(img) > 127


def draw(d: Drawing, size: int = SIZE) -> Image.Image:
    """``d`` as an RGB picture: a flat background and a flat shape (no anti-aliasing: the colours stay exact)."""
    pixels = np.empty((size, size, 3), dtype=np.uint8)
    pixels[:] = PALETTE[d.background]
    pixels[shape_mask(d.shape, d.cx, d.cy, d.half, size)] = PALETTE[d.color]
    return Image.fromarray(pixels, "RGB")


def random_drawing(rng: random.Random, shape: str, color: str, size: int = SIZE) -> Drawing:
    """``shape`` in ``color`` on a random contrasting background, at a random place and size (never cut off)."""
    half = rng.uniform(0.24, 0.34) * size
    margin = half + 2
    cx = rng.uniform(margin, size - margin)
    cy = rng.uniform(margin, size - margin)
    return Drawing(shape, color, rng.choice(backgrounds_for(color)), cx, cy, half)


def base_drawings(rng: random.Random, size: int = SIZE) -> Iterator[Drawing]:
    """An endless stream of what the base model learns: every base shape in every colour, shuffled."""
    while True:
        yield random_drawing(rng, rng.choice(BASE_SHAPES), rng.choice(list(PALETTE)), size)
