"""Auto-captioning backends behind one interface, and the loop that writes their captions.

- :class:`BlipCaptioner`: a sentence per image (transformers' BLIP captioning model).
- :class:`WDTagger`: WD14-style booru tags from an ONNX model run by onnxruntime, with its
  ``selected_tags.csv`` (columns ``tag_id,name,category,count``; category 0 general, 4 character,
  9 rating) and separate thresholds for general and character tags.

A model is loaded from a local folder, or from a hub id when online. Heavy imports (torch,
transformers, onnxruntime) happen when a captioner is built, not when this module is imported.
No Qt here: the UI runs :func:`run_captioning` in a worker thread.
"""

from __future__ import annotations

import csv
import errno
import io
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from guitrainer.base import safe_open
from guitrainer.core.dataset.captions import MAX_CAPTION_BYTES
from guitrainer.core.dataset.scan import CaptionChange, caption_path_for, split_tags, write_caption

log = logging.getLogger(__name__)

CaptionMode = Literal["skip", "overwrite", "append"]
CAPTION_MODES: tuple[str, ...] = ("skip", "overwrite", "append")
CaptionerKind = Literal["blip", "wd14"]

# Tags that are faces made of punctuation: their underscores are part of them.
KAOMOJI = frozenset(
    {"0_0", "(o)_(o)", "+_+", "+_-", "._.", "<o>_<o>", "<|>_<|>", "=_=", ">_<", "3_3", "6_9", ">_o", "@_@", "^_^",
     "o_o", "u_u", "x_x", "|_|", "||_||"}
)  # fmt: skip


class CaptionerError(RuntimeError):
    """A captioning model could not be found or loaded; the message says what to do."""


class CaptioningCancelled(CaptionerError):
    """The run was cancelled while its model was still downloading."""


#: ``progress(file, number, count, received, size)``: ``file`` is the ``number``-th (1-based) of ``count``
#: files being fetched, ``received`` of its ``size`` bytes are in (size 0: not known yet). The
#: callback may raise :class:`CaptioningCancelled` to stop the download.
DownloadProgress = Callable[[str, int, int, int, int], None]

#: Weight formats a transformers repo often ships side by side; one copy is enough.
_DUPLICATE_WEIGHTS = (".bin", ".h5", ".msgpack", ".ckpt")
#: largest tags file read (WD14's selected_tags.csv is about 300 KB)
MAX_TAGS_BYTES = 16 * 1024 * 1024


def resolve_source(
    source: str | Path,
    needed: Sequence[str] = (),
    *,
    patterns: Sequence[str] | None = None,
    progress: DownloadProgress | None = None,
) -> Path:
    """A local model folder, or a hub id downloaded when online (HF_HUB_OFFLINE unset).

    ``needed`` files must be in the folder; a download fetches the files matching ``patterns``
    (default: ``needed``), one at a time, reporting each to ``progress``.
    """
    p = Path(os.path.expanduser(str(source)))
    try:
        kind = safe_open.look(p).kind
    except safe_open.PathError as e:  # a name too long, a NUL: never a hub id either
        raise CaptionerError(f"The captioning model {e}. Choose the folder that holds it.") from None
    if kind == "folder":
        missing = [n for n in needed if not (p / n).exists()]
        if missing:
            raise CaptionerError(f"{p} is not a complete captioning model: missing {', '.join(missing)}")
        return p
    text = str(source)
    if kind != "missing" or text.count("/") != 1 or text.startswith((".", "/", "~")):
        raise CaptionerError(f"No model folder at {text}. Choose the folder that holds the captioning model.")
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        raise CaptionerError(f"{text} looks like a hub id, but downloads are off (offline). Download it once, then choose its folder.")
    try:
        folder = download_from_hub(text, list(patterns if patterns is not None else needed), progress)
    except CaptioningCancelled:
        raise
    except Exception as e:  # network, auth, missing repo: all reported the same way
        raise CaptionerError(f"Could not download {text}: {e}") from e
    missing = [n for n in needed if not (folder / n).exists()]
    if missing:
        raise CaptionerError(f"{text} is not a captioning model of this kind: it has no {', '.join(missing)}")
    return folder


def download_from_hub(repo_id: str, patterns: Sequence[str], progress: DownloadProgress | None = None) -> Path:
    """Fetch the files of hub repo ``repo_id`` matching ``patterns`` (all when empty) into the hub cache.

    Files are fetched one at a time so ``progress`` can name each; their bytes are reported through
    the ``tqdm_class`` hook of ``hf_hub_download``, at most ~4 times a second. Returns the snapshot folder.
    """
    import inspect

    from huggingface_hub import hf_hub_download, list_repo_files
    from huggingface_hub.utils import filter_repo_objects

    files = sorted(filter_repo_objects(list_repo_files(repo_id), allow_patterns=list(patterns) or None))
    if any(f.endswith(".safetensors") for f in files):
        files = [f for f in files if not f.endswith(_DUPLICATE_WEIGHTS)]
    if not files:
        raise CaptionerError(f"the repo has no files matching {', '.join(patterns)}")
    count = len(files)
    current: dict[str, Any] = {"name": "", "number": 0}
    kwargs: dict[str, Any] = {}
    if progress is not None and "tqdm_class" in inspect.signature(hf_hub_download).parameters:  # hub >= 0.33
        kwargs["tqdm_class"] = _byte_reporter(lambda got, size: progress(current["name"], current["number"], count, got, size))
    root: Path | None = None
    for number, name in enumerate(files, 1):
        current.update(name=name, number=number)
        if progress is not None:
            progress(name, number, count, 0, 0)
        local = Path(hf_hub_download(repo_id, name, **kwargs))
        root = local.parents[len(Path(name).parts) - 1]
    assert root is not None
    return root


def _byte_reporter(report: Callable[[int, int], None], interval_s: float = 0.25) -> type:
    """A silent tqdm class that calls ``report(received, size)`` as bytes arrive (throttled)."""
    import time

    from tqdm.auto import tqdm

    class _Bytes(tqdm):  # type: ignore[misc,type-arg]
        def __init__(self, *args: Any, **kw: Any) -> None:
            kw.pop("name", None)  # huggingface_hub's own tqdm takes it; plain tqdm refuses it
            kw["disable"] = True  # no terminal bar; a disabled tqdm counts nothing, so count here
            super().__init__(*args, **kw)
            self.received = int(kw.get("initial") or 0)
            self.last_report = 0.0

        def update(self, n: float | None = 1) -> bool | None:
            out = super().update(n)
            self.received += int(n or 0)
            size = int(self.total or 0)
            now = time.monotonic()
            if now - self.last_report >= interval_s or (size and self.received >= size):
                self.last_report = now
                report(self.received, size)
            return out

    return _Bytes


class Captioner(ABC):
    """Turns images into captions. Build with :func:`load_captioner`."""

    kind: str = ""

    @abstractmethod
    def caption(self, images: Sequence[Any]) -> list[str]:
        """One caption per PIL image, same order."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to free by default
        """Free the model (GPU memory)."""


#: What a BLIP download fetches: configs, tokenizer and one copy of the weights.
BLIP_PATTERNS = ("*.json", "*.txt", "*.model", "*.safetensors", "*.bin")


class BlipCaptioner(Captioner):
    """BLIP image captioning (``BlipForConditionalGeneration`` + ``BlipProcessor``)."""

    kind = "blip"

    def __init__(
        self,
        source: str | Path,
        *,
        device: str | None = None,
        gpu_index: int = -1,
        max_new_tokens: int = 40,
        num_beams: int = 3,
        prompt: str = "",
        progress: DownloadProgress | None = None,
    ):
        import torch
        from transformers import BlipForConditionalGeneration, BlipProcessor

        from guitrainer.engine.compute_device import compute_device

        self.device = device or str(compute_device(gpu_index))
        folder = resolve_source(source, ("config.json",), patterns=BLIP_PATTERNS, progress=progress)
        dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        try:
            self.processor = BlipProcessor.from_pretrained(folder)
            self.model = BlipForConditionalGeneration.from_pretrained(folder, dtype=dtype).to(self.device).eval()
        except (OSError, ValueError) as e:
            raise CaptionerError(f"{folder} is not a BLIP captioning model: {e}") from e
        self.dtype = dtype
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.prompt = prompt

    def caption(self, images: Sequence[Any]) -> list[str]:
        import torch

        if not images:
            return []
        kwargs: dict[str, Any] = {"images": list(images), "return_tensors": "pt"}
        if self.prompt:
            kwargs["text"] = [self.prompt] * len(images)
        inputs = self.processor(**kwargs).to(self.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, num_beams=self.num_beams)
        return [t.strip() for t in self.processor.batch_decode(out, skip_special_tokens=True)]

    def close(self) -> None:
        import torch

        del self.model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@dataclass(frozen=True)
class TagInfo:
    name: str
    category: int


def read_tags_csv(path: str | Path) -> list[TagInfo]:
    """``selected_tags.csv``: one row per model output, with ``name`` and ``category`` columns."""
    text = safe_open.read_text(path, limit=MAX_TAGS_BYTES, what="a tags file")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if not rows or "name" not in rows[0] or "category" not in rows[0]:
        raise CaptionerError(f"{path} needs the columns `name` and `category`")
    return [TagInfo(r["name"], int(r["category"])) for r in rows]


class WDTagger(Captioner):
    """WD14-style tagger: ONNX model (NHWC, BGR, 0–255, white-padded square) + selected_tags.csv."""

    kind = "wd14"
    GENERAL, CHARACTER, RATING = 0, 4, 9

    def __init__(
        self,
        source: str | Path,
        *,
        general_threshold: float = 0.35,
        character_threshold: float = 0.85,
        model_file: str = "model.onnx",
        tags_file: str = "selected_tags.csv",
        replace_underscores: bool = True,
        providers: Sequence[str | tuple[str, dict[str, Any]]] | None = None,
        gpu_index: int = -1,
        progress: DownloadProgress | None = None,
    ):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise CaptionerError("The WD14 tagger needs onnxruntime: pip install onnxruntime") from e
        folder = resolve_source(source, (model_file, tags_file), progress=progress)
        self.tags = read_tags_csv(folder / tags_file)
        if providers is None:
            available = ort.get_available_providers()
            # the GPU the Model page chose (precision.gpu_index), as for every other job; else ONNX Runtime's first
            cuda = ("CUDAExecutionProvider", {"device_id": gpu_index}) if gpu_index >= 0 else "CUDAExecutionProvider"
            providers = [cuda if p == "CUDAExecutionProvider" else p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        try:
            self.session = ort.InferenceSession(str(folder / model_file), providers=list(providers))
        except Exception as e:  # onnxruntime raises its own exception types
            raise CaptionerError(f"Cannot load {folder / model_file}: {e}") from e
        inp = self.session.get_inputs()[0]
        self.input_name = inp.name
        self.size = int(inp.shape[1]) if isinstance(inp.shape[1], int) else 448
        n_out = self.session.get_outputs()[0].shape[-1]
        if isinstance(n_out, int) and n_out != len(self.tags):
            raise CaptionerError(f"The model has {n_out} outputs but {tags_file} lists {len(self.tags)} tags")
        self.general_threshold = general_threshold
        self.character_threshold = character_threshold
        self.replace_underscores = replace_underscores

    def _prepare(self, image: Any):
        import numpy as np
        from PIL import Image

        im = image.convert("RGBA")
        canvas = Image.new("RGBA", im.size, (255, 255, 255, 255))
        canvas.alpha_composite(im)
        im = canvas.convert("RGB")
        side = max(im.size)
        square = Image.new("RGB", (side, side), (255, 255, 255))
        square.paste(im, ((side - im.width) // 2, (side - im.height) // 2))
        if side != self.size:
            square = square.resize((self.size, self.size), Image.Resampling.BICUBIC)
        arr = np.asarray(square, dtype=np.float32)
        return arr[:, :, ::-1]  # RGB -> BGR

    def scores(self, images: Sequence[Any]):
        """Raw tag probabilities, shape [len(images), len(tags)]."""
        import numpy as np

        batch = np.stack([self._prepare(im) for im in images]).astype(np.float32)
        return self.session.run(None, {self.input_name: batch})[0]

    def caption(self, images: Sequence[Any]) -> list[str]:
        if not images:
            return []
        out = []
        for probs in self.scores(images):
            chars, general = [], []
            for tag, p in zip(self.tags, probs):
                if tag.category == self.CHARACTER and p >= self.character_threshold:
                    chars.append((float(p), tag.name))
                elif tag.category == self.GENERAL and p >= self.general_threshold:
                    general.append((float(p), tag.name))
            names = [n for _, n in sorted(chars, reverse=True)] + [n for _, n in sorted(general, reverse=True)]
            out.append(", ".join(self._pretty(n) for n in names))
        return out

    def _pretty(self, name: str) -> str:
        if self.replace_underscores and name not in KAOMOJI:
            return name.replace("_", " ")
        return name


def load_captioner(kind: CaptionerKind, source: str | Path, **options: Any) -> Captioner:
    """Build a captioner: ``kind`` is "blip" or "wd14"; options go to its constructor.

    ``progress`` (a :data:`DownloadProgress`) hears about each file when ``source`` is a hub id.
    """
    if kind == "blip":
        return BlipCaptioner(source, **options)
    if kind == "wd14":
        return WDTagger(source, **options)
    raise ValueError(f"`kind` must be 'blip' or 'wd14', got {kind!r}")


def merge_caption(old: str, new: str, mode: CaptionMode) -> str | None:
    """What to write given the existing caption: None means leave the file alone."""
    if mode == "skip":
        return None if old.strip() else new
    if mode == "overwrite":
        return new
    if mode == "append":
        if not old.strip():
            return new
        have = set(split_tags(old))
        extra = [t for t in split_tags(new) if t not in have]
        if not extra:
            return None
        return old.rstrip().rstrip(",").rstrip() + ", " + ", ".join(extra)
    raise ValueError(f"`mode` must be one of {CAPTION_MODES}, got {mode!r}")


@dataclass
class CaptionRunResult:
    """What a captioning run did. ``changes`` makes it one undoable edit."""

    changes: list[CaptionChange] = field(default_factory=list)
    skipped: int = 0
    failed: list[tuple[Path, str]] = field(default_factory=list)
    cancelled: bool = False


def _read_existing(path: Path) -> tuple[bytes | None, str | None]:
    """Old bytes and text; text None when the file is not UTF-8.

    Raises:
        safe_open.PathError: the caption path is not a caption file (a named pipe, a folder, too big).
    """
    try:
        raw = safe_open.read_bytes(path, limit=MAX_CAPTION_BYTES, what="a caption")
    except safe_open.PathError as e:
        if e.errno == errno.ENOENT:
            return None, ""
        raise
    try:
        return raw, raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw, None


def run_captioning(
    captioner: Captioner,
    image_paths: Sequence[str | Path],
    *,
    mode: CaptionMode = "skip",
    caption_extension: str = ".txt",
    batch_size: int = 4,
    should_stop: Callable[[], bool] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_caption: Callable[[Path, str], None] | None = None,
) -> CaptionRunResult:
    """Caption images and write their sidecars (atomically), honouring ``mode`` per image.

    Stops between batches when ``should_stop()`` is true. A caption that is not UTF-8 is only
    replaced in "overwrite" mode.
    """
    from PIL import Image, ImageOps

    result = CaptionRunResult()
    total = len(image_paths)
    done = 0
    paths = [Path(p) for p in image_paths]
    for start in range(0, total, max(1, batch_size)):
        if should_stop and should_stop():
            result.cancelled = True
            break
        batch = paths[start : start + batch_size]
        todo: list[tuple[Path, Path, bytes | None, str | None, Any]] = []
        for img_path in batch:
            cap = caption_path_for(img_path, caption_extension)
            try:
                old_bytes, old_text = _read_existing(cap)
                safe_open.require(img_path, "file")  # a named pipe under an image's name would block Image.open
            except safe_open.PathError as e:
                result.failed.append((img_path, f"cannot be captioned: {e}"))
                continue
            if mode == "skip" and (old_text is None or (old_text or "").strip()):
                result.skipped += 1
                continue
            if mode == "append" and old_text is None:
                result.failed.append((img_path, "caption is not UTF-8; choose Overwrite to replace it"))
                continue
            try:
                with Image.open(img_path) as im:
                    image = ImageOps.exif_transpose(im).convert("RGB")
            except Exception as e:  # unreadable images are reported, not fatal
                result.failed.append((img_path, f"cannot read image: {e}"))
                continue
            todo.append((img_path, cap, old_bytes, old_text, image))
        if todo:
            texts = captioner.caption([t[4] for t in todo])
            for (img_path, cap, old_bytes, old_text, _im), generated in zip(todo, texts):
                new_text = merge_caption(old_text or "", generated, mode)
                if new_text is None or new_text.encode("utf-8") == old_bytes:
                    result.skipped += 1
                    continue
                try:
                    write_caption(cap, new_text)
                except OSError as e:
                    result.failed.append((img_path, str(e)))
                    continue
                result.changes.append(CaptionChange(cap, old_bytes, new_text.encode("utf-8")))
                if on_caption:
                    on_caption(img_path, new_text)
        done += len(batch)
        if on_progress:
            on_progress(done, total)
    return result
