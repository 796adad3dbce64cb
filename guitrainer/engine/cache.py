"""Latent and text-embedding caches: in memory, and on disk under ``cache_dir()/latents`` and ``/text``.

An entry's key names everything its value depends on, so a stale entry is never used:

* latents: model identity (weights' path + sizes/mtimes), image (resolved path, size, mtime), bucket,
  resize + crop, flip, VAE dtype and stored dtype (a cache made under fp16 is never used under bf16);
* text: model identity, caption, family, dtype.

Disk entries are ``<hash>.safetensors`` files written atomically (:mod:`guitrainer.core.fileio`), so a
restart reuses them and a crash never leaves half a file. A changed image has another key: its old
entry is simply no longer looked up.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from guitrainer.core.fileio import WriteError, atomic_write_with

log = logging.getLogger(__name__)

#: bump when what an entry holds changes (2: a latent's noise is seeded by the image variant, not its key)
CACHE_VERSION = 2


def _digest(parts: list[Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def image_stamp(path: str | Path) -> list[Any]:
    """(resolved path, size, mtime_ns) of an image file: any change to the file changes the stamp."""
    p = Path(path)
    st = p.stat()
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class TensorCache:
    """``key -> {name: tensor}``; kept in memory and, when ``folder`` is set, on disk.

    Counts ``hits`` (memory or disk) and ``misses`` so callers and tests can see what was reused.
    """

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.memory: dict[str, dict[str, torch.Tensor]] = {}
        self.hits = 0
        self.misses = 0
        self.disk_hits = 0
        self._disk_ok = folder is not None

    def _file(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / key[:2] / f"{key}.safetensors"

    def get(self, key: str) -> dict[str, torch.Tensor] | None:
        v = self.memory.get(key)
        if v is None and self._disk_ok:
            f = self._file(key)
            if f.is_file():
                try:
                    from safetensors.torch import load_file

                    v = load_file(str(f))
                    self.memory[key] = v
                    self.disk_hits += 1
                    with contextlib.suppress(OSError):  # mtime = last use: pruning removes the oldest first
                        os.utime(f)
                except Exception as e:  # noqa: BLE001 - a damaged entry is recomputed
                    log.warning("ignoring damaged cache file %s: %s", f, e)
                    v = None
        if v is None:
            self.misses += 1
        else:
            self.hits += 1
        return v

    def put(self, key: str, value: dict[str, torch.Tensor]) -> None:
        value = {k: t.detach().to("cpu").contiguous() for k, t in value.items()}
        self.memory[key] = value
        if not self._disk_ok:
            return
        from safetensors.torch import save_file

        try:
            atomic_write_with(self._file(key), lambda f: save_file(value, str(f)))
        except (WriteError, OSError) as e:
            self._disk_ok = False  # keep going in memory only
            log.warning("latent/text cache not written to disk (%s); caching in memory only", e)


class LatentCache(TensorCache):
    """VAE latents (already scaled) per image variant."""

    def __init__(self, folder: Path | None, model_identity: str, vae_dtype: torch.dtype, dtype: torch.dtype):
        super().__init__(folder)
        self.prefix = [CACHE_VERSION, "latent", model_identity, dtype_name(vae_dtype), dtype_name(dtype)]

    def key(self, image: str | Path, geometry: Any, flip: bool) -> str:
        g = geometry
        return _digest([*self.prefix, image_stamp(image), list(g.bucket), list(g.resized), g.left, g.top, bool(flip)])

    @staticmethod
    def noise_seed(image: str | Path, geometry: Any, flip: bool) -> int:
        """The seed of an entry's sampled noise, fixed by the image variant itself (so a latent does not depend
        on what else was cached): the file *name*, crop and flip. Not its folder, size or mtime, which the
        key holds: a dataset copied or re-created elsewhere samples the same noise, so a run is reproducible."""
        g = geometry
        parts = [CACHE_VERSION, "noise", Path(image).name, list(g.bucket), list(g.resized), g.left, g.top, bool(flip)]
        return int(_digest(parts)[:15], 16)


class TextCache(TensorCache):
    """Text-encoder outputs (``hidden`` and, for SDXL, ``pooled``) per caption."""

    def __init__(self, folder: Path | None, model_identity: str, family: str, dtype: torch.dtype):
        super().__init__(folder)
        self.prefix = [CACHE_VERSION, "text", model_identity, family, dtype_name(dtype)]

    def key(self, caption: str) -> str:
        return _digest([*self.prefix, caption])
