"""Dataset logic without Qt or torch: find images, inspect them, read and write captions, edit tags.

Import rules (what :func:`scan` does with the paths it is given):

- A folder is searched fully (all subfolders). Each image belongs to the folder that directly holds
  it; its repeats come from the nearest kohya-style ``N_name`` folder between the image and the
  dropped folder (inclusive), else 1. :func:`scan_folders` reads configured folders *non-recursively*
  with their configured repeats, which is what training uses.
- Accepted: ``.png .jpg .jpeg .webp .bmp``. Caption files and hidden files are skipped silently,
  anything else is reported as rejected with a reason. An accepted file that Pillow cannot read is
  still imported, with a flag, so the user sees it.
- The same file reached twice (same resolved path, or ``os.path.samefile``: hard links) is imported
  once and reported as a duplicate.

Captions (:mod:`guitrainer.core.dataset.captions`) and tag operations (:mod:`guitrainer.core.dataset.tags`) have their own
modules; their names are re-exported here.
"""

from __future__ import annotations

import enum
import errno
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guitrainer.base import safe_open
from guitrainer.base.constants import IMAGE_EXTENSIONS
from guitrainer.base.errors import first_line
from guitrainer.base.paths import expand, path_key
from guitrainer.base.units import format_bytes
from guitrainer.config.fields import repeats_from_name
from guitrainer.core.dataset.buckets import Bucket, assign_bucket, bucket_counts, make_buckets
from guitrainer.core.dataset.captions import (  # re-exported: the caption helpers lived here before
    CaptionChange,
    CaptionEdit,
    CaptionEncodingError,
    CaptionFileError,
    CaptionText,
    apply_tag_operation,
    caption_path_for,
    decode_caption,
    encode_caption,
    plan_edit,
    read_caption,
    restore_bytes,
    save_caption,
    write_caption,
)
from guitrainer.core.dataset.tags import (  # re-exported: the tag operations lived here before
    RenameTag,
    add_trigger,
    dedupe_tags,
    find_replace,
    join_tags,
    remove_tag,
    rename_tag,
    sort_tags,
    split_tags,
    tag_filter_after,
    tag_frequency,
)

__all__ = [  # the module's own names and the caption / tag names re-exported from their new homes
    "Candidate",
    "CaptionChange",
    "CaptionEdit",
    "CaptionEncodingError",
    "CaptionFileError",
    "CaptionText",
    "Collected",
    "DatasetItem",
    "DatasetSummary",
    "FLAG_DESCRIPTIONS",
    "Flag",
    "IMAGE_EXTENSIONS",
    "ImageInfo",
    "RenameTag",
    "LARGE_PIXELS",
    "LARGE_SIDE",
    "RESOLUTION_BINS",
    "ScanResult",
    "add_trigger",
    "apply_tag_operation",
    "caption_path_for",
    "collect",
    "decode_caption",
    "encode_caption",
    "dedupe_tags",
    "file_key",
    "find_replace",
    "flag_descriptions",
    "inspect_image",
    "iter_items",
    "join_tags",
    "load_item",
    "plan_edit",
    "probe_image",
    "read_caption",
    "remove_tag",
    "rename_tag",
    "resolution_bin",
    "restore_bytes",
    "scan",
    "scan_folders",
    "size_flags",
    "save_caption",
    "sort_tags",
    "split_tags",
    "tag_filter_after",
    "summarize",
    "tag_frequency",
    "write_caption",
]

log = logging.getLogger(__name__)

LARGE_SIDE = 4096
LARGE_PIXELS = 40_000_000
# Sidecars that live beside training images and are not worth a "rejected" line.
_QUIET_EXTENSIONS = frozenset({".txt", ".caption", ".json", ".npz", ".toml", ".db", ".ini"})


class Flag(str, enum.Enum):  # noqa: UP042 - str mix-in: a flag compares equal to its text
    """Something about an image (or its caption) the user should know before training."""

    UNREADABLE = "unreadable"
    TRUNCATED = "truncated"
    EMPTY = "empty"
    SMALL = "small"
    LARGE = "large"
    CMYK = "cmyk"
    HIGH_BIT_DEPTH = "16bit"
    ALPHA = "alpha"
    PALETTE = "palette"
    EXIF_ROTATED = "rotated"
    CAPTION_NOT_UTF8 = "caption_encoding"
    CAPTION_UNREADABLE = "caption_unreadable"

    @property
    def description(self) -> str:
        return FLAG_DESCRIPTIONS[self]

    @property
    def severe(self) -> bool:
        """True when training will fail or silently skip the image."""
        return self in (Flag.UNREADABLE, Flag.TRUNCATED, Flag.EMPTY)


FLAG_DESCRIPTIONS: dict[Flag, str] = {
    Flag.UNREADABLE: "Cannot be read as an image",
    Flag.TRUNCATED: "File is cut short (incomplete download or copy)",
    Flag.EMPTY: "File is empty (0 bytes)",
    Flag.SMALL: "Smaller than the training resolution: it will be upscaled and look soft",
    Flag.LARGE: f"Very large (over {LARGE_SIDE} px or {LARGE_PIXELS // 1_000_000} MP): slow to load",
    Flag.CMYK: "CMYK colours: converted to RGB, colours may shift",
    Flag.HIGH_BIT_DEPTH: "16 bits per channel: reduced to 8 bits",
    Flag.ALPHA: "Has transparency: transparent areas become a flat colour",
    Flag.PALETTE: "Palette image (e.g. GIF-style colours)",
    Flag.EXIF_ROTATED: "Rotated by its EXIF tag: trained upright, as shown here",
    Flag.CAPTION_NOT_UTF8: "Caption is not UTF-8 (an older encoding, read correctly); bulk tag operations "
    "leave it alone",
    Flag.CAPTION_UNREADABLE: "The caption path is not a readable file (a folder, a pipe, a broken link)",
}



# --------------------------------------------------------------------------- images


@dataclass(frozen=True)
class ImageInfo:
    """What a cheap look at an image file tells: upright size (after EXIF rotation) and flags."""

    width: int = 0
    height: int = 0
    flags: frozenset[Flag] = frozenset()
    orientation: int = 1
    problem: str = ""  # why it cannot be read (with Flag.UNREADABLE): "no permission to read it", "is a HEIC image ..."


def _tail_ok(path: Path, fmt: str, size: int) -> bool:
    """Does the file end where its format says it should? (catches truncated downloads cheaply)"""
    try:
        with open(path, "rb") as fh:
            if fmt == "JPEG":
                fh.seek(max(0, size - 64))
                return b"\xff\xd9" in fh.read()
            if fmt == "PNG":
                fh.seek(max(0, size - 12))
                return fh.read().startswith(b"\x00\x00\x00\x00IEND")
            if fmt == "WEBP":
                head = fh.read(8)
                return len(head) == 8 and int.from_bytes(head[4:8], "little") + 8 <= size
    except OSError:
        return False
    return True


def _png_bit_depth(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            head = fh.read(26)
        if head[12:16] == b"IHDR":
            return head[24]
    except OSError:
        pass
    return 8


def probe_image(path: str | Path, resolution: int = 512) -> ImageInfo:
    """Size and flags of one image from its header (no full decode). An image that cannot be read has
    :attr:`Flag.UNREADABLE` and :attr:`ImageInfo.problem` says why (no permission, another format under an image's
    name, metadata over Pillow's limit, a named pipe)."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    try:
        size = safe_open.require(p, "file").size  # a named pipe or a device is never opened
    except safe_open.PathError as e:
        return ImageInfo(flags=frozenset({Flag.UNREADABLE}), problem=e.reason)
    if size == 0:
        return ImageInfo(flags=frozenset({Flag.EMPTY}))
    flags: set[Flag] = set()
    try:  # opened through safe_open too: a pipe put there since the look above cannot block the scan
        with safe_open.open_file(p) as fh, Image.open(fh) as im:
            w, h = im.size
            fmt = im.format or ""
            mode = im.mode
            orientation = 1
            try:
                orientation = int(im.getexif().get(0x0112, 1) or 1)
            except Exception:  # a broken EXIF block must not hide the image
                log.debug("unreadable EXIF in %s", p, exc_info=True)
            if mode == "CMYK":
                flags.add(Flag.CMYK)
            if mode in ("I;16", "I;16B", "I;16L", "I", "F") or (fmt == "PNG" and _png_bit_depth(p) == 16):
                flags.add(Flag.HIGH_BIT_DEPTH)
            if mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
                flags.add(Flag.ALPHA)
            if mode in ("P", "PA"):
                flags.add(Flag.PALETTE)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        log.debug("cannot read %s: %s", p, e)
        return ImageInfo(flags=frozenset({Flag.UNREADABLE}), problem=unreadable_reason(p, e))
    if not _tail_ok(p, fmt, size):
        flags.add(Flag.TRUNCATED)
    if orientation in (5, 6, 7, 8):
        w, h = h, w
    if orientation in range(2, 9):
        flags.add(Flag.EXIF_ROTATED)
    flags |= size_flags(w, h, resolution)
    return ImageInfo(w, h, frozenset(flags), orientation)


#: first bytes of formats Pillow does not read, found under an image's name: (offset, bytes, what it is)
_FOREIGN_FORMATS: tuple[tuple[int, bytes, str], ...] = (
    *((4, b"ftyp" + brand, "a HEIC / HEIF image (an iPhone or Android photo)")
      for brand in (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")),
    *((4, b"ftyp" + brand, "an AVIF image") for brand in (b"avif", b"avis")),
    (0, b"\xff\x0a", "a JPEG XL image"),
    (0, b"\x00\x00\x00\x0cJXL \r\n\x87\n", "a JPEG XL image"),
    (0, b"%PDF", "a PDF document"),
    (0, b"PK\x03\x04", "a ZIP archive"),
    (0, b"<!doctype html", "a web page (HTML), saved instead of the image"),
    (0, b"<html", "a web page (HTML), saved instead of the image"),
    (0, b"<svg", "an SVG drawing"),
    (0, b"<?xml", "an XML file (an SVG drawing?)"),
)


def unreadable_reason(path: Path, error: BaseException) -> str:
    """Why Pillow could not read ``path``, in plain words (the end of a sentence about the image)."""
    from PIL import Image, PngImagePlugin

    text = str(error)
    if isinstance(error, PermissionError) or getattr(error, "errno", 0) in (errno.EACCES, errno.EPERM):
        return "cannot be read: no permission to read it (check the file's permissions)"
    if isinstance(error, safe_open.PathError):  # a pipe or a device put there meanwhile, a link loop, ...
        return error.reason
    if isinstance(error, Image.DecompressionBombError):
        return f"is larger than Pillow opens ({Image.MAX_IMAGE_PIXELS or 0:,} pixels: its decompression-bomb limit)"
    if "MAX_TEXT_CHUNK" in text or "text chunks" in text:
        limit = format_bytes(PngImagePlugin.MAX_TEXT_CHUNK)
        return (f"has PNG metadata (a text chunk: a workflow or generation settings) larger than Pillow reads ({limit}): "
                "save the image again without its metadata")
    foreign = _foreign_format(path)
    if foreign:
        return (f"is {foreign} with a {path.suffix or 'missing'} extension: Pillow cannot read it; convert it to PNG or "
                "JPEG")
    if "cannot identify image file" in text:
        return "is not an image Pillow can read (its first bytes match no image format)"
    return f"cannot be read as an image ({first_line(error, 160)})"


def _foreign_format(path: Path) -> str:
    """What a file really is when its first bytes say another format (:data:`_FOREIGN_FORMATS`), else ""."""
    try:
        with safe_open.open_file(path) as fh:
            head = fh.read(32)
    except OSError:
        return ""
    low = head.lstrip().lower()
    for offset, magic, what in _FOREIGN_FORMATS:
        if head[offset:offset + len(magic)] == magic or (offset == 0 and low.startswith(magic)):
            return what
    return ""


def size_flags(width: int, height: int, resolution: int) -> set[Flag]:
    """SMALL / LARGE for an upright size (SMALL: fewer pixels than the training square)."""
    out: set[Flag] = set()
    if width and height and width * height < resolution * resolution:
        out.add(Flag.SMALL)
    if max(width, height) > LARGE_SIDE or width * height > LARGE_PIXELS:
        out.add(Flag.LARGE)
    return out


def inspect_image(path: str | Path, resolution: int = 512) -> set[Flag]:
    """The flags of one image (cheap: header and the last bytes only)."""
    return set(probe_image(path, resolution).flags)


# --------------------------------------------------------------------------- items and scanning


@dataclass(eq=False)
class DatasetItem:
    """One training image and its caption sidecar."""

    image_path: Path
    caption_path: Path
    caption: str = ""
    repeats: int = 1
    folder: Path = field(default_factory=Path)
    flags: set[Flag] = field(default_factory=set)
    width: int = 0
    height: int = 0
    caption_exists: bool = False
    caption_utf8: bool = True
    caption_encoding: str = "utf-8"  # the caption file's codec (core.captions): a save keeps it
    problem: str = ""  # why the image cannot be read (with Flag.UNREADABLE), as ImageInfo.problem says
    caption_problem: str = ""  # why the caption path cannot be read (with Flag.CAPTION_UNREADABLE)

    @property
    def has_caption(self) -> bool:
        return self.caption_exists and bool(self.caption.strip())

    @property
    def name(self) -> str:
        return self.image_path.name

    def reload_caption(self) -> None:
        """Re-read the caption file (after an undo, an outside edit)."""
        self.set_caption(read_caption(self.caption_path))

    def set_caption(self, c: CaptionText) -> None:
        """Show a caption known to be on disk now (e.g. just written), without reading the file."""
        self.caption, self.caption_exists, self.caption_utf8 = c.text, c.exists, c.was_utf8
        self.caption_encoding = c.encoding
        self.caption_problem = c.problem
        for flag, on in ((Flag.CAPTION_NOT_UTF8, not c.was_utf8), (Flag.CAPTION_UNREADABLE, bool(c.problem))):
            if on:
                self.flags.add(flag)
            else:
                self.flags.discard(flag)


def flag_descriptions(item: DatasetItem, leave_out: Iterable[Flag] = ()) -> list[str]:
    """Each of ``item``'s flags in words, in :class:`Flag` order, with the reason where the scan found one:
    "Cannot be read as an image: photo.jpg is a HEIC / HEIF image …" rather than the flag's bare description."""
    skip = set(leave_out)
    out = []
    for flag in Flag:
        if flag not in item.flags or flag in skip:
            continue
        text = flag.description
        if flag == Flag.UNREADABLE and item.problem:
            text = f"{text}: {item.name} {item.problem}"
        elif flag == Flag.CAPTION_UNREADABLE and item.caption_problem:
            text = f"{text}: {item.caption_problem}"
        out.append(text)
    return out


@dataclass
class Candidate:
    """An image file found by :func:`collect`, not yet inspected."""

    path: Path
    folder: Path
    repeats: int


@dataclass
class ScanResult:
    """Images found, files refused (with the reason) and files already imported."""

    items: list[DatasetItem] = field(default_factory=list)
    rejected: list[tuple[Path, str]] = field(default_factory=list)
    duplicates: list[tuple[Path, str]] = field(default_factory=list)


@dataclass
class Collected:
    candidates: list[Candidate] = field(default_factory=list)
    rejected: list[tuple[Path, str]] = field(default_factory=list)
    duplicates: list[tuple[Path, str]] = field(default_factory=list)


def file_key(path: str | Path) -> tuple[int, int] | str:
    """Identity of a file on disk: (device, inode) where the platform has them, else the resolved path."""
    try:
        st = os.stat(path)
        if st.st_ino:
            return (st.st_dev, st.st_ino)
    except OSError:
        pass
    return os.path.normcase(os.path.realpath(path))


def _is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _reject_reason(path: Path, caption_extension: str) -> str | None:
    """None when the file is silently skipped, else why it is not imported."""
    ext = path.suffix.lower()
    if path.name.startswith(".") or ext in _QUIET_EXTENSIONS or ext == caption_extension.lower():
        return None
    if not ext:
        return "not an image (no file extension)"
    return f"not a supported image ({ext}; use PNG, JPEG, WebP or BMP)"


def collect(
    paths: Iterable[str | Path],
    caption_extension: str = ".txt",
    known: set | None = None,
    *,
    recursive: bool = True,
    repeats: int | None = None,
) -> Collected:
    """Find image files under ``paths`` (fast: directory listing and ``stat`` only).

    Args:
        known: :func:`file_key` of images already in the dataset; matches become duplicates.
        recursive: search subfolders of dropped folders.
        repeats: force this repeat count instead of reading ``N_name`` folder names.
    """
    out = Collected()
    seen: set = set(known or ())

    def add(p: Path, folder: Path, reps: int) -> None:
        key = file_key(p)
        if key in seen:
            out.duplicates.append((p, "already in the dataset" if known and key in known else "the same file twice"))
            return
        seen.add(key)
        out.candidates.append(Candidate(p, folder, reps))

    def walk(folder: Path, reps: int) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name.lower())
        except OSError as e:
            out.rejected.append((folder, f"cannot open folder: {e.strerror or e}"))
            return
        subdirs = []
        for e in entries:
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if not e.name.startswith("."):
                    subdirs.append(Path(e.path))
            elif _is_image_name(e.name):
                add(Path(e.path), folder, reps)
            else:
                reason = _reject_reason(Path(e.path), caption_extension)
                if reason:
                    out.rejected.append((Path(e.path), reason))
        if recursive:
            for sub in subdirs:
                walk(sub, repeats or repeats_from_name(sub.name) or reps)

    for raw in paths:
        p = expand(raw)  # a ``~user`` with no such user stays as written
        try:
            kind = safe_open.require(p, "any").kind
        except safe_open.PathError as e:  # missing, a named pipe, a device, a name too long
            out.rejected.append((p, e.reason))
            continue
        if kind == "folder":
            walk(p, repeats or repeats_from_name(p.name) or 1)
        elif _is_image_name(p.name):
            add(p, p.parent, repeats or repeats_from_name(p.parent.name) or 1)
        else:
            out.rejected.append((p, _reject_reason(p, caption_extension) or "not an image"))
    return out


def load_item(c: Candidate, caption_extension: str = ".txt", resolution: int = 512) -> DatasetItem:
    """Read one candidate's caption and inspect its image."""
    info = probe_image(c.path, resolution)
    cap_path = caption_path_for(c.path, caption_extension)
    item = DatasetItem(
        image_path=c.path,
        caption_path=cap_path,
        repeats=c.repeats,
        folder=c.folder,
        flags=set(info.flags),
        width=info.width,
        height=info.height,
        problem=info.problem,
    )
    item.reload_caption()
    return item


def iter_items(
    candidates: Sequence[Candidate],
    caption_extension: str = ".txt",
    resolution: int = 512,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[DatasetItem]:
    for c in candidates:
        if should_stop and should_stop():
            return
        yield load_item(c, caption_extension, resolution)


def scan(
    paths: Iterable[str | Path],
    caption_extension: str = ".txt",
    resolution: int = 512,
    known: set | None = None,
    *,
    recursive: bool = True,
) -> ScanResult:
    """Find, inspect and read the captions of every image under ``paths`` (see module docstring)."""
    col = collect(paths, caption_extension, known, recursive=recursive)
    items = list(iter_items(col.candidates, caption_extension, resolution))
    return ScanResult(items, col.rejected, col.duplicates)



def scan_folders(
    folders: Iterable[tuple[str | Path, int]],
    caption_extension: str = ".txt",
    resolution: int = 512,
    exclude: Iterable[str | Path] = (),
) -> ScanResult:
    """The images training uses: each ``(folder, repeats)`` read non-recursively, less ``exclude``."""
    result = ScanResult()
    known: set = set()
    left_out = {path_key(p) for p in exclude}
    for folder, reps in folders:
        col = collect([folder], caption_extension, known, recursive=False, repeats=max(1, int(reps)))
        if left_out:
            col.candidates = [c for c in col.candidates if path_key(c.path) not in left_out]
        known |= {file_key(c.path) for c in col.candidates}
        result.items.extend(iter_items(col.candidates, caption_extension, resolution))
        result.rejected.extend(col.rejected)
        result.duplicates.extend(col.duplicates)
    return result


# --------------------------------------------------------------------------- summary


@dataclass
class DatasetSummary:
    image_count: int = 0
    captioned_count: int = 0
    flagged_count: int = 0
    images_with_repeats: int = 0
    resolution_histogram: dict[str, int] = field(default_factory=dict)
    buckets: dict[Bucket, int] = field(default_factory=dict)
    steps_per_epoch: int = 0


RESOLUTION_BINS: tuple[tuple[int, str], ...] = (
    (256, "< 256"),
    (512, "256–511"),
    (768, "512–767"),
    (1024, "768–1023"),
    (1536, "1024–1535"),
    (2048, "1536–2047"),
    (10**9, "≥ 2048"),
)


def resolution_bin(width: int, height: int) -> str:
    """Histogram label of an image by its shorter side."""
    short = min(width, height)
    return next(label for limit, label in RESOLUTION_BINS if short < limit)


def summarize(
    items: Sequence[DatasetItem],
    resolution: int = 512,
    *,
    bucketing: bool = True,
    min_side: int = 256,
    max_side: int = 1024,
    step: int = 64,
    batch_size: int = 1,
) -> DatasetSummary:
    """Counts, resolution histogram, buckets and optimizer steps per epoch (repeats × images / batch).

    With buckets, each bucket fills its own batches (a partial batch still takes a step), as kohya does.
    Unreadable images are not counted in buckets or steps.
    """
    s = DatasetSummary(image_count=len(items))
    s.captioned_count = sum(1 for it in items if it.has_caption)
    s.flagged_count = sum(1 for it in items if it.flags)
    usable = [it for it in items if it.width and it.height and not any(f.severe for f in it.flags)]
    hist: Counter[str] = Counter(resolution_bin(it.width, it.height) for it in usable)
    s.resolution_histogram = {label: hist[label] for _, label in RESOLUTION_BINS if hist[label]}
    s.images_with_repeats = sum(it.repeats for it in usable)
    batch = max(1, batch_size)
    if bucketing and usable:
        buckets = make_buckets(resolution, min_side, max_side, step)
        s.buckets = bucket_counts(((it.width, it.height) for it in usable), buckets)
        per_bucket: Counter[Bucket] = Counter()
        for it in usable:
            per_bucket[assign_bucket(it.width, it.height, buckets)] += it.repeats
        s.steps_per_epoch = sum(math.ceil(n / batch) for n in per_bucket.values())
    else:
        if usable:
            s.buckets = {(resolution, resolution): len(usable)}
        s.steps_per_epoch = math.ceil(s.images_with_repeats / batch)
    return s
