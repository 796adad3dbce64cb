"""Training data: the images the dataset page shows, captions, kohya repeats, aspect buckets, batches.

* Images are found and inspected by :mod:`guitrainer.core.dataset.scan` (``scan_folders``), so training sees
  exactly what the dataset page shows. Unreadable, truncated or empty files are skipped and listed
  in one warning; a dataset with no usable image is a :class:`DatasetError` before training starts.
* Aspect buckets come from :mod:`guitrainer.core.dataset.buckets` (bounds and step from the config). Each image
  is resized to cover its bucket and **center**-cropped (deterministic, so cached latents stay valid);
  the original size and the crop's top-left corner are kept for SDXL's ``add_time_ids``. Without
  bucketing every image goes to the ``resolution`` x ``resolution`` square the same way.
* Pixels: EXIF orientation applied; transparency composited on white; CMYK, 16-bit, palette and
  grey images converted to RGB.
* :func:`epoch_batches`: every batch holds images of one bucket; the order is fixed by (seed, epoch),
  so a resumed run sees the same batches.
"""

from __future__ import annotations

import contextlib
import logging
import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from guitrainer.base import safe_open
from guitrainer.base.constants import IMAGE_EXTENSIONS
from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.core.dataset import scan as core_ds
from guitrainer.core.dataset.buckets import Bucket, assign_bucket, make_buckets
from guitrainer.core.memory.system_ram import PIXEL_CACHE_BYTES  # the RAM estimate counts what it keeps

log = logging.getLogger(__name__)
T = TypeVar("T")

IMAGE_SUFFIXES = tuple(sorted(IMAGE_EXTENSIONS))
_HIGH_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


class DatasetError(ValueError):
    """No usable training data; the message says what was looked for and where."""


@dataclass(frozen=True)
class TrainItem:
    """One image and its caption (trigger word not yet applied), used ``repeats`` times per epoch.

    ``width`` / ``height`` are the upright size (after EXIF rotation); ``bucket`` is (width, height).
    """

    image: Path
    caption: str
    repeats: int = 1
    width: int = 0
    height: int = 0
    bucket: Bucket = (0, 0)


@dataclass(frozen=True)
class Geometry:
    """How an image becomes its bucket: resized to ``resized`` (w, h), then cropped at (left, top)."""

    original: tuple[int, int]  # (width, height), upright
    resized: tuple[int, int]
    left: int
    top: int
    bucket: Bucket

    def flipped_left(self) -> int:
        """The crop's left edge in the mirrored image."""
        return self.resized[0] - self.bucket[0] - self.left

    def time_ids(self, flip: bool = False) -> list[int]:
        """SDXL's ``add_time_ids``: original (h, w), crop top-left (top, left), target (h, w)."""
        left = self.flipped_left() if flip else self.left
        return [self.original[1], self.original[0], self.top, left, self.bucket[1], self.bucket[0]]


def read_caption(image: Path, extension: str = ".txt") -> str:
    """The caption beside ``image`` (``name<extension>``), or "" when there is none."""
    return core_ds.read_caption(core_ds.caption_path_for(image, extension)).text.strip()


def apply_trigger(caption: str, trigger: str) -> str:
    """Put the trigger word at the front of a caption (once)."""
    trigger = trigger.strip()
    if not trigger:
        return caption
    if caption == trigger or caption.startswith(trigger + ",") or caption.startswith(trigger + " "):
        return caption
    return f"{trigger}, {caption}" if caption else trigger


@contextlib.contextmanager
def _quiet_size_warnings() -> Iterator[None]:
    """Pillow's raw DecompressionBombWarning is not shown: :func:`collect_items` says it in its own words."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _bomb_message(e: BaseException) -> str:
    from PIL import Image

    limit = 2 * (Image.MAX_IMAGE_PIXELS or 0)
    return f"over Pillow's decompression-bomb limit of {limit:,} pixels: refused as unsafe to decode ({e})"


def _check_decode(path: Path, notes: dict[str, list[str]]) -> str | None:
    """None when the whole image decodes, else why not; very large and animated images are noted in ``notes``."""
    from PIL import Image

    try:
        with _quiet_size_warnings(), Image.open(path) as im:
            if Image.MAX_IMAGE_PIXELS and im.size[0] * im.size[1] > Image.MAX_IMAGE_PIXELS:
                notes["large"].append(path.name)
            if getattr(im, "is_animated", False):
                notes["animated"].append(path.name)
            im.load()
    except Image.DecompressionBombError as e:
        return _bomb_message(e)
    except Exception as e:  # noqa: BLE001 - any decoder error means "skip this file"
        return str(e) or type(e).__name__
    return None


def _say_notes(notes: dict[str, list[str]], warn: Callable[[str], None]) -> None:
    from PIL import Image

    def names(found: list[str]) -> str:
        return ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")

    if notes["large"]:
        mp = (Image.MAX_IMAGE_PIXELS or 0) / 1e6
        warn(
            f"{len(notes['large'])} image(s) over {mp:.0f} megapixels ({names(notes['large'])}): used, but slow to "
            "decode and memory-hungry; downscale them to a few megapixels"
        )
    if notes["animated"]:
        warn(f"{len(notes['animated'])} animated image(s) ({names(notes['animated'])}): only the first frame is trained")
    if notes["unused"]:
        warn(
            f"{len(notes['unused'])} file(s) in a format not trained here were left out ({names(notes['unused'])}): "
            f"save them as PNG or JPEG to train on them"
        )


#: image files a dataset folder may hold that training does not read (said, never dropped silently)
UNUSED_IMAGE_SUFFIXES = (".gif", ".tif", ".tiff", ".heic", ".avif")


def _unused_images(folders: list[tuple[Path, int]]) -> list[str]:
    """Image files of the folders in formats training does not read; an animated GIF says so."""
    from PIL import Image

    found: list[str] = []
    for root, _repeats in folders:
        try:
            files = sorted(p for p in root.iterdir() if p.suffix.lower() in UNUSED_IMAGE_SUFFIXES and p.is_file())
        except OSError:
            continue
        for p in files:
            try:
                with Image.open(p) as im:
                    animated = bool(getattr(im, "is_animated", False))
            except Exception:  # noqa: BLE001 - unreadable: named all the same
                animated = False
            found.append(f"{p.name} (animated)" if animated else p.name)
    return found


def bucket_list(dataset_cfg: Any) -> list[Bucket]:
    """The buckets of the config (just the square when bucketing is off)."""
    res = int(dataset_cfg.resolution)
    if not dataset_cfg.bucketing:
        return [(res, res)]
    try:
        return make_buckets(
            res, int(dataset_cfg.min_bucket_resolution), int(dataset_cfg.max_bucket_resolution), int(dataset_cfg.bucket_step)
        )
    except ValueError as e:
        raise DatasetError(f"aspect buckets cannot be made from these settings: {e}") from e


def collect_items(
    dataset_cfg: Any, warn: Callable[[str], None] | None = None, what: str = "training images"
) -> list[TrainItem]:
    """All usable items of ``dataset_cfg.folders``, each with its bucket.

    Unreadable / truncated / empty images are skipped and listed in one ``warn(text)``.
    Raises :class:`DatasetError` for a missing folder or when nothing usable is left; ``what`` names
    the images in that message (e.g. "class images" for the regularization folders).
    """
    folders: list[tuple[Path, int]] = []
    for f in dataset_cfg.folders:
        root = expand(str(f.path))
        why = safe_open.problem(root, "folder")  # never raises: a name too long, a named pipe are said in words
        if why:
            raise DatasetError(f"the image folder “{printable(str(root))}” {why}")
        folders.append((root, max(1, int(f.repeats))))
    with _quiet_size_warnings():
        scan = core_ds.scan_folders(
            folders, dataset_cfg.caption_extension, int(dataset_cfg.resolution), getattr(dataset_cfg, "exclude", ())
        )
    buckets = bucket_list(dataset_cfg)
    items: list[TrainItem] = []
    skipped: list[str] = []
    notes: dict[str, list[str]] = {"large": [], "animated": [], "unused": _unused_images(folders)}
    for it in scan.items:
        severe = sorted(f.description for f in it.flags if f.severe)
        problem = "; ".join(severe) if severe else None
        if problem is None and not (it.width and it.height):
            problem = "size unknown"
        if problem is None:
            problem = _check_decode(it.image_path, notes)
        elif core_ds.Flag.UNREADABLE in it.flags:  # say which: no permission, a HEIC renamed .jpg, a named pipe ...
            problem = it.problem or problem
            if "decompression-bomb" in problem:  # Pillow's size limit: the decode names the numbers
                problem = _check_decode(it.image_path, notes) or problem
        if problem:
            skipped.append(f"{it.image_path} ({problem})")
            continue
        bucket = assign_bucket(it.width, it.height, buckets) if dataset_cfg.bucketing else buckets[0]
        items.append(TrainItem(it.image_path, it.caption.strip(), it.repeats, it.width, it.height, bucket))
    say = warn or log.warning  # said once: the caller's warn logs it too
    if skipped:
        say(f"skipped {len(skipped)} unreadable image{'s' if len(skipped) != 1 else ''}: " + ", ".join(skipped))
    _say_notes(notes, say)
    if not items:
        where = ", ".join(str(f.path) for f in dataset_cfg.folders) or "(no folders set)"
        raise DatasetError(
            f"no usable {what} in {where}; add {'/'.join(IMAGE_SUFFIXES)} files to the dataset folders"
        )
    return items


# --------------------------------------------------------------------------- pixels


def open_rgb(path: str | Path) -> Any:
    """The image upright (EXIF orientation applied) as 8-bit RGB; transparency composited on white."""
    import numpy as np
    from PIL import Image, ImageOps

    with _quiet_size_warnings(), Image.open(path) as src:
        im = ImageOps.exif_transpose(src)
        im.load()
    mode = im.mode
    if mode in _HIGH_BIT_MODES:
        arr = np.asarray(im, dtype=np.float64)
        if mode.startswith("I;16") or arr.max(initial=0) > 255:
            arr = arr / 257.0  # 16-bit range -> 8-bit
        elif mode == "F" and arr.max(initial=0) <= 1.0:
            arr = arr * 255.0
        im = Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "L")
    elif mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    elif mode in _ALPHA_MODES or (mode in ("L", "RGB") and "transparency" in im.info):
        im = im.convert("RGBA")
    if im.mode == "RGBA":
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        white.alpha_composite(im)
        im = white
    return im.convert("RGB") if im.mode != "RGB" else im


def geometry(width: int, height: int, bucket: Bucket) -> Geometry:
    """Resize (width, height) to cover ``bucket`` keeping the aspect, then center-crop to it."""
    bw, bh = bucket
    s = max(bw / width, bh / height)
    rw, rh = max(bw, round(width * s)), max(bh, round(height * s))
    return Geometry((width, height), (rw, rh), (rw - bw) // 2, (rh - bh) // 2, bucket)


def load_image_tensor(path: Path, size: int | Bucket, flip: bool = False) -> torch.Tensor:
    """Image -> resized to cover ``size`` ((w, h) or a square side), center-cropped, CHW float in [-1, 1]."""
    import numpy as np
    from PIL import Image

    bucket = (size, size) if isinstance(size, int) else size
    im = open_rgb(path)
    g = geometry(im.width, im.height, bucket)
    im = im.resize(g.resized, Image.Resampling.BICUBIC)
    im = im.crop((g.left, g.top, g.left + bucket[0], g.top + bucket[1]))
    if flip:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    arr = np.asarray(im, dtype=np.float32)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous() / 127.5 - 1.0


def shuffle_tags(caption: str, keep_tokens: int, rng: random.Random) -> str:
    tags = core_ds.split_tags(caption)
    head, tail = tags[:keep_tokens], tags[keep_tokens:]
    rng.shuffle(tail)
    return ", ".join(head + tail)


class TrainDataset(torch.utils.data.Dataset):
    """Items expanded by their repeats; ``__getitem__`` gives one sample (see :meth:`sample`).

    Random caption / flip choices use Python's global ``random`` (saved and restored on resume).
    """

    def __init__(self, items: Sequence[TrainItem], dataset_cfg: Any):
        self.items = list(items)
        self.cfg = dataset_cfg
        res = int(dataset_cfg.resolution)
        self.buckets: list[Bucket] = [it.bucket if it.bucket[0] else (res, res) for it in self.items]
        self.index: list[int] = [i for i, it in enumerate(self.items) for _ in range(max(1, it.repeats))]
        self._geometry: dict[int, Geometry] = {}
        self._pixel_cache: dict[int, torch.Tensor] = {}
        # keep decoded images in memory only while that stays small
        need = sum(3 * 4 * b[0] * b[1] for b in self.buckets)
        self._cache_pixels = need <= PIXEL_CACHE_BYTES

    def __len__(self) -> int:
        return len(self.index)

    def bucket_of(self, pos: int) -> Bucket:
        """The bucket of dataset position ``pos`` (an index into the repeat-expanded list)."""
        return self.buckets[self.index[pos]]

    def geometry(self, item_idx: int) -> Geometry:
        g = self._geometry.get(item_idx)
        if g is None:
            it = self.items[item_idx]
            w, h = (it.width, it.height) if it.width else open_rgb(it.image).size
            g = self._geometry[item_idx] = geometry(w, h, self.buckets[item_idx])
        return g

    def caption(self, item_idx: int, rng: random.Random | None = None) -> str:
        rng = rng or random  # type: ignore[assignment]
        cfg = self.cfg
        text = self.items[item_idx].caption
        if cfg.shuffle_captions:
            text = shuffle_tags(text, cfg.keep_tokens, rng)  # type: ignore[arg-type]
        if cfg.caption_dropout > 0 and rng.random() < cfg.caption_dropout:
            return ""
        return apply_trigger(text, cfg.trigger_word)

    def fixed_caption(self, item_idx: int) -> str:
        """The caption without shuffling or dropout (what a text cache stores)."""
        return apply_trigger(self.items[item_idx].caption, self.cfg.trigger_word)

    def pixels(self, item_idx: int, flip: bool = False) -> torch.Tensor:
        """The item's image tensor at its bucket size (decoded once and kept, the unflipped one)."""
        t = self._pixel_cache.get(item_idx)
        if t is None:
            t = load_image_tensor(self.items[item_idx].image, self.buckets[item_idx])
            if self._cache_pixels:
                self._pixel_cache[item_idx] = t
        return t.flip(-1) if flip else t

    def item_sample(self, item_idx: int, flip: bool, caption: str, with_pixels: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "caption": caption,
            "index": item_idx,
            "flip": flip,
            "time_ids": torch.tensor(self.geometry(item_idx).time_ids(flip), dtype=torch.float32),
        }
        if with_pixels:
            out["pixels"] = self.pixels(item_idx, flip)
        return out

    def sample(self, pos: int, with_pixels: bool = True) -> dict[str, Any]:
        """``{"pixels", "caption", "index", "flip", "time_ids"}`` of dataset position ``pos``.

        ``with_pixels=False`` skips decoding the image (the latents are cached).
        """
        item_idx = self.index[pos]
        flip = bool(self.cfg.flip_augment) and random.random() < 0.5
        return self.item_sample(item_idx, flip, self.caption(item_idx), with_pixels)

    def __getitem__(self, pos: int) -> dict[str, Any]:
        return self.sample(pos)


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The dataset order of ``epoch``: a permutation fixed by (seed, epoch), independent of every other RNG."""
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=g).tolist()


def batches_of(order: Sequence[int], batch_size: int) -> list[list[int]]:
    """Split an epoch order into batches (the last one may be smaller)."""
    return [list(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]


def epoch_batches(
    buckets: Sequence[Bucket],
    seed: int,
    epoch: int,
    batch_size: int,
    num_processes: int = 1,
    process_index: int = 0,
) -> list[list[int]]:
    """The batches of ``epoch`` for one process: positions ``0..len(buckets)-1``, one bucket per batch.

    ``buckets[pos]`` is the bucket of dataset position ``pos``. The positions are shuffled by
    :func:`epoch_order`, grouped by bucket (each bucket's last batch may be smaller), and the batches
    shuffled by a second generator fixed by (seed, epoch). With one bucket this is exactly
    ``batches_of(epoch_order(...))``. With several processes each gets every ``num_processes``-th
    batch; the list is padded (from its start) so that every process gets as many.
    """
    order = epoch_order(len(buckets), seed, epoch)
    groups: dict[Bucket, list[int]] = {}
    for pos in order:
        groups.setdefault(tuple(buckets[pos]), []).append(pos)  # type: ignore[arg-type]
    batches = [b for group in groups.values() for b in batches_of(group, batch_size)]
    if len(groups) > 1:
        g = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(epoch)) ^ 0x5EED)
        batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
    return shard_batches(batches, num_processes, process_index)


def shard_batches(batches: Sequence[T], num_processes: int = 1, process_index: int = 0) -> list[T]:
    """Process ``process_index``'s share: every ``num_processes``-th batch, after padding the list (from
    its start) so that every process gets as many. Works on anything batch-like (e.g. pairs of an
    instance batch and its class draws, which then stay together)."""
    out = list(batches)
    if num_processes > 1:
        i = 0
        while len(out) % num_processes:
            out.append(out[i])
            i += 1
        out = out[process_index::num_processes]
    return out


def collate(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "captions": [s["caption"] for s in samples],
        "indices": [s["index"] for s in samples],
        "flips": [bool(s.get("flip", False)) for s in samples],
        "time_ids": torch.stack([s["time_ids"] for s in samples]) if "time_ids" in samples[0] else None,
    }
    if "pixels" in samples[0]:
        out["pixels"] = torch.stack([s["pixels"] for s in samples])
    return out
