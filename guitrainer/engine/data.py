"""Training data: scan image folders, captions, kohya repeats; a torch Dataset; a seeded epoch order.

Simple version: every image is resized (short side) and center-cropped to a square of
``dataset.resolution``; aspect buckets come later.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guitrainer.core.paths import expand

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
PIXEL_CACHE_BYTES = 256 * 1024 * 1024


class DatasetError(ValueError):
    """No usable training data; the message says what was looked for and where."""


@dataclass(frozen=True)
class TrainItem:
    """One image and its caption (trigger word not yet applied), used ``repeats`` times per epoch."""

    image: Path
    caption: str
    repeats: int = 1


def read_caption(image: Path, extension: str = ".txt") -> str:
    """The caption beside ``image`` (``name<extension>``), or "" when there is none."""
    ext = extension if extension.startswith(".") else f".{extension}"
    side = image.with_suffix(ext)
    if side.is_file():
        return side.read_text(encoding="utf-8", errors="replace").strip()
    return ""


def scan_folder(folder: str | Path, repeats: int = 1, caption_extension: str = ".txt") -> list[TrainItem]:
    """Images directly in ``folder`` (sorted by name) with their sidecar captions."""
    root = expand(str(folder))
    if not root.is_dir():
        raise DatasetError(f"image folder not found: {root}")
    files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    return [TrainItem(p, read_caption(p, caption_extension), repeats) for p in files]


def apply_trigger(caption: str, trigger: str) -> str:
    """Put the trigger word at the front of a caption (once)."""
    trigger = trigger.strip()
    if not trigger:
        return caption
    if caption == trigger or caption.startswith(trigger + ",") or caption.startswith(trigger + " "):
        return caption
    return f"{trigger}, {caption}" if caption else trigger


def _check_image(path: Path) -> str | None:
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.verify()
        with Image.open(path) as im:
            im.load()
    except Exception as e:  # noqa: BLE001 - any decoder error means "skip this file"
        return f"skipping unreadable image {path}: {e}"
    return None


def collect_items(dataset_cfg: Any, warn: Any = None) -> list[TrainItem]:
    """All usable items of ``dataset_cfg.folders``; corrupt images are skipped with a warning via ``warn(text)``.

    Raises :class:`DatasetError` when nothing usable is left.
    """
    items: list[TrainItem] = []
    for folder in dataset_cfg.folders:
        for item in scan_folder(folder.path, folder.repeats, dataset_cfg.caption_extension):
            problem = _check_image(item.image)
            if problem:
                log.warning(problem)
                if warn:
                    warn(problem)
                continue
            items.append(item)
    if not items:
        where = ", ".join(str(f.path) for f in dataset_cfg.folders) or "(no folders set)"
        raise DatasetError(
            f"no usable training images in {where}; add {'/'.join(IMAGE_EXTENSIONS)} files to the dataset folders"
        )
    return items


def load_image_tensor(path: Path, resolution: int, flip: bool = False) -> torch.Tensor:
    """RGB image -> short side resized to ``resolution``, center-cropped square, CHW float in [-1, 1]."""
    import numpy as np
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im).convert("RGB")
        w, h = im.size
        s = resolution / min(w, h)
        nw, nh = max(resolution, round(w * s)), max(resolution, round(h * s))
        im = im.resize((nw, nh), Image.Resampling.BICUBIC)
        left, top = (nw - resolution) // 2, (nh - resolution) // 2
        im = im.crop((left, top, left + resolution, top + resolution))
        if flip:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        arr = np.asarray(im, dtype=np.float32)
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous() / 127.5 - 1.0


def shuffle_tags(caption: str, keep_tokens: int, rng: random.Random) -> str:
    tags = [t.strip() for t in caption.split(",") if t.strip()]
    head, tail = tags[:keep_tokens], tags[keep_tokens:]
    rng.shuffle(tail)
    return ", ".join(head + tail)


class TrainDataset(torch.utils.data.Dataset):
    """Items expanded by their repeats; ``__getitem__`` gives ``{"pixels", "caption", "index"}``.

    Random caption / flip choices use Python's global ``random`` (saved and restored on resume).
    """

    def __init__(self, items: Sequence[TrainItem], dataset_cfg: Any):
        self.items = list(items)
        self.cfg = dataset_cfg
        self.index: list[int] = [i for i, it in enumerate(self.items) for _ in range(max(1, it.repeats))]
        self._pixel_cache: dict[int, torch.Tensor] = {}
        # keep decoded images in memory only while that stays small
        self._cache_pixels = len(self.items) * 3 * 4 * int(dataset_cfg.resolution) ** 2 <= PIXEL_CACHE_BYTES

    def __len__(self) -> int:
        return len(self.index)

    def caption(self, item_idx: int, rng: random.Random | None = None) -> str:
        rng = rng or random  # type: ignore[assignment]
        cfg = self.cfg
        text = self.items[item_idx].caption
        if cfg.shuffle_captions:
            text = shuffle_tags(text, cfg.keep_tokens, rng)  # type: ignore[arg-type]
        if cfg.caption_dropout > 0 and rng.random() < cfg.caption_dropout:
            return ""
        return apply_trigger(text, cfg.trigger_word)

    def pixels(self, item_idx: int, flip: bool = False) -> torch.Tensor:
        """The item's image tensor (decoded once and kept, the unflipped one)."""
        t = self._pixel_cache.get(item_idx)
        if t is None:
            t = load_image_tensor(self.items[item_idx].image, self.cfg.resolution)
            if self._cache_pixels:
                self._pixel_cache[item_idx] = t
        return t.flip(-1) if flip else t

    def __getitem__(self, i: int) -> dict[str, Any]:
        item_idx = self.index[i]
        flip = bool(self.cfg.flip_augment) and random.random() < 0.5
        return {"pixels": self.pixels(item_idx, flip), "caption": self.caption(item_idx), "index": item_idx}


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The dataset order of ``epoch``: a permutation fixed by (seed, epoch), independent of every other RNG."""
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=g).tolist()


def batches_of(order: Sequence[int], batch_size: int) -> list[list[int]]:
    """Split an epoch order into batches (the last one may be smaller)."""
    return [list(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]


def collate(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "pixels": torch.stack([s["pixels"] for s in samples]),
        "captions": [s["caption"] for s in samples],
        "indices": [s["index"] for s in samples],
    }
