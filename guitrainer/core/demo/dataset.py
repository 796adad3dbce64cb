"""The Demo dataset: pictures of the concept the base model does not know, drawn on first use.

Eight pictures of :data:`~guitrainer.core.demo.shapes.CONCEPT` ("a red zorb": a long red bar) at different places,
sizes and backgrounds, and four of shapes the base already knows, captioned as the base was ("a blue
square"), so the LoRA learns the new word without forgetting the old ones. PNGs with ``.txt`` sidecars in
``user_data_dir()/demo_images``, written into a temporary folder and renamed into place; once there the folder
is the user's (edited captions are kept) and is never redrawn.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from guitrainer.base.paths import user_data_dir
from guitrainer.core.demo.shapes import CONCEPT, SIZE, Drawing, draw, random_drawing

#: the file that says the folder is complete (written last)
DONE_MARKER = "demo_images.json"
#: the pictures of shapes the base knows, kept beside the concept's
CONTROLS = (("square", "blue"), ("circle", "green"), ("triangle", "yellow"), ("square", "white"))
CONCEPT_PICTURES = 8
SEED = 31


def demo_dataset_dir() -> Path:
    return user_data_dir() / "demo_images"


def demo_drawings() -> list[tuple[Drawing, str]]:
    """The Demo dataset's pictures and captions, the same on every computer (a fixed seed)."""
    rng = random.Random(SEED)
    items = [(random_drawing(rng, CONCEPT.shape, CONCEPT.color), CONCEPT.prompt) for _ in range(CONCEPT_PICTURES)]
    for shape, color in CONTROLS:
        d = random_drawing(rng, shape, color)
        items.append((d, d.caption))
    return items


def ensure_demo_dataset() -> Path:
    """The Demo dataset's folder, drawn the first time (12 PNGs of :data:`SIZE` px and their captions)."""
    target = demo_dataset_dir()
    if (target / DONE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo_images.", dir=target.parent))
    try:
        for i, (d, caption) in enumerate(demo_drawings()):
            stem = f"{i:02d}_{caption.removeprefix('a ').replace(' ', '_')}"
            draw(d, SIZE).save(tmp / f"{stem}.png")
            (tmp / f"{stem}.txt").write_text(caption, encoding="utf-8")
        (tmp / DONE_MARKER).write_text(json.dumps({"concept": CONCEPT.prompt, "pictures": CONCEPT_PICTURES}))
        if target.exists() and not (target / DONE_MARKER).is_file():
            # a folder left half-written by an older version or a crash: set it aside, never delete it
            os.replace(target, target.with_name(f"demo_images.incomplete.{os.getpid()}"))
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: theirs is as good
            if not (target / DONE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
