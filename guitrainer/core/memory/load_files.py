"""What a base model's files and the parts built from them hold in system RAM while it loads and is placed, from the
files' headers alone (torch-free, for the estimate): one checkpoint or a split install's files (read whole), or a
diffusers folder (part by part).

The loaders read every file whole first (memory-mapped) and build each part from its tensors in the dtype the run
trains in (``engine/models/loading.py`` ``load_dtypes``). A tensor already in that dtype is not copied: the part's
weight *is* the file's page, resident once read — by the move to the GPU, after the load. Any other floating-point
tensor is cast during the load: its copy and the pages it was cast from are resident together until the load ends
and the files are let go. So two moments compete: the load (the cast tensors' pages and their copies) and the move
(the uncopied tensors' pages and the copies), and the peak is ``copies + max(cast pages, uncopied pages)``. Only
the headers can tell which tensors are which (a Flux.1 dev ``flux1-dev.safetensors`` is bf16, its
``t5xxl_fp16.safetensors`` fp16). Measured by bench/ram_budget.py (``load_flux_bf16_used``).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from pathlib import Path

from guitrainer.config import TrainingConfig

#: bytes per element of each safetensors dtype
SAFETENSORS_WIDTHS = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}
_FLOATS = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")
#: the safetensors dtype of each training precision (what a part is built in)
LOAD_DTYPES = {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}


def files_read_whole(config: TrainingConfig) -> list[Path]:
    """The files a run of ``config`` reads whole: a single checkpoint, or a split install's files (the denoiser's,
    the text encoders', the VAE's); [] for a diffusers folder, a hub id or the demo."""
    base = str(config.model.base).strip()
    if not base.lower().endswith((".safetensors", ".ckpt", ".pt", ".pth")):
        return []
    encoders = [str(t).strip() for t in config.model.text_encoders if str(t).strip()]
    vae = str(config.model.vae or "").strip()
    return [Path(p).expanduser() for p in (base, *encoders, *([vae] if encoders and vae else []))]


def read_whole_bytes(paths: Sequence[Path], training: str) -> int | None:
    """Peak bytes the files ``paths`` and the parts built from them hold while a ``training``-precision run loads
    and places them: the copies (in the training dtype) of the floating-point tensors stored in another dtype, plus
    the larger of those tensors' pages (during the load) and every other tensor's pages (the uncopied weights, read
    by the move); None when a file's header cannot be read (missing, a pickle): the estimate then assumes fp16."""
    tally = _tally(paths, training)
    if tally is None:
        return None
    copies, cast_pages, kept_pages = tally
    return copies + max(cast_pages, kept_pages)


#: a diffusers folder's part folders, in the order the families load them (the denoiser, the VAE, the text encoders)
FOLDER_PARTS = ("unet", "transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3")


def folder_parts(config: TrainingConfig) -> list[list[Path]]:
    """A diffusers folder's weight files, part by part in :data:`FOLDER_PARTS` order; [] when ``model.base`` is not
    a folder, or a part keeps its weights in another format than .safetensors (a ``.bin`` folder: not estimated
    from its files)."""
    base = Path(str(config.model.base).strip()).expanduser()
    if not str(config.model.base).strip() or not base.is_dir():
        return []
    parts: list[list[Path]] = []
    for name in FOLDER_PARTS:
        part = base / name
        if not part.is_dir():
            continue
        files = sorted(part.glob("*.safetensors"))
        if not files:
            return []
        parts.append(files)
    return parts


def folder_bytes(parts: Sequence[Sequence[Path]], training: str) -> int | None:
    """Peak bytes of a diffusers folder's parts (:func:`folder_parts`) loaded one after another: while a part loads,
    the copies of the parts before it, its own copies and the pages they are cast from; after the load, every copy
    and every uncopied tensor's pages (read by the move). None when a header cannot be read."""
    loaded = peak = kept = 0
    for files in parts:
        tally = _tally(files, training)
        if tally is None:
            return None
        copies, cast_pages, kept_pages = tally
        peak = max(peak, loaded + copies + cast_pages)
        loaded += copies
        kept += kept_pages
    return max(peak, loaded + kept)


def _tally(paths: Sequence[Path], training: str) -> tuple[int, int, int] | None:
    """(copies, cast pages, uncopied pages) of the tensors in ``paths`` for a ``training``-precision run."""
    want = LOAD_DTYPES[training]
    width = SAFETENSORS_WIDTHS[want]
    copies = cast_pages = kept_pages = 0
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        table = _dtype_counts(str(path), st.st_size, st.st_mtime_ns)
        if table is None:
            return None
        for dtype, n in table:
            pages = SAFETENSORS_WIDTHS.get(dtype, 0) * n
            if dtype in _FLOATS and dtype != want:
                copies += width * n
                cast_pages += pages
            else:
                kept_pages += pages
    return copies, cast_pages, kept_pages


@functools.lru_cache(maxsize=64)
def _dtype_counts(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, int], ...] | None:
    """(dtype, elements) of a .safetensors file's tensors, summed per dtype; None when it is not one. Cached per
    (path, size, mtime): the meter asks on every settings change."""
    from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header

    if not path.lower().endswith(".safetensors"):
        return None
    try:
        header = read_safetensors_header(path)[0]
    except CheckpointError:
        return None
    counts: dict[str, int] = {}
    for entry in header.values():
        dtype = str(entry.get("dtype", ""))
        counts[dtype] = counts.get(dtype, 0) + math.prod(entry.get("shape", ()))
    return tuple(sorted(counts.items()))
