"""Latent and text-embedding caches: in memory, and on disk under ``cache_dir()/latents`` and ``/text``.

An entry's key names everything its value depends on, so a stale entry is never used:

* latents: model identity (weights' path + sizes/mtimes), the VAE's identity when ``model.vae`` replaced the
  base's own, image (resolved path, size, mtime), bucket, resize + crop, flip, VAE dtype and stored dtype (a
  cache made under fp16 is never used under bf16);
* text: model identity, caption, family, dtype.

Disk entries are ``<hash>.safetensors`` files written atomically (:mod:`guitrainer.base.fileio`), so a
restart reuses them and a crash never leaves half a file. A changed image has another key: its old
entry is simply no longer looked up.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.errors import first_line
from guitrainer.base.fileio import atomic_write_with
from guitrainer.engine.families import registry
from guitrainer.engine.families.base import Family, TextConditioning

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
        #: says once that the disk cache failed and the run goes on in memory (a run's Feedback.warn sets it)
        self.warn: Callable[[str], None] = log.warning

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
        except Exception as e:  # noqa: BLE001 - a cache that cannot be written never stops training
            self._disk_ok = False  # keep going in memory only
            self.warn(disk_cache_message(self.folder, e))


def disk_cache_message(folder: Path | None, error: BaseException) -> str:
    """What a cache write that failed means for the run, naming the folder: it goes on with the cache in memory."""
    code = error.errno if isinstance(error, OSError) else 0  # the atomic write turns every OS failure into one
    why = {errno.ENOSPC: "the disk is full", errno.EROFS: "the disk is read-only",
           errno.EACCES: "no permission to write there", errno.EPERM: "no permission to write there"}.get(
        code, f"it cannot be written ({first_line(error, 160)})")
    return (f"The cache folder {folder} could not be written: {why}. Training goes on with the cache in memory for "
            "this run (nothing is lost; the next run encodes again). To not write caches at all, turn off Keep caches "
            "on disk (precision.cache_to_disk = false); to keep them, free some space there.")


class LatentCache(TensorCache):
    """VAE latents (already scaled) per image variant."""

    def __init__(
        self, folder: Path | None, model_identity: str, vae_dtype: torch.dtype, dtype: torch.dtype, vae_identity: str = ""
    ):
        """``vae_identity`` names the VAE when ``model.vae`` replaced the base's own (its latents differ)."""
        super().__init__(folder)
        self.prefix = [CACHE_VERSION, "latent", model_identity, dtype_name(vae_dtype), dtype_name(dtype)]
        if vae_identity:  # only then: the base's own VAE keeps the keys it always had (no cache made stale)
            self.prefix.append(["vae", vae_identity])

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


# --------------------------------------------------------------------------- one run's caches

#: (item index, flipped) -> cached latent
LatentTable = dict[tuple[int, bool], torch.Tensor]


class RunCaches:
    """The latents and text embeddings of one run (memory + disk), and the frozen modules parked meanwhile.

    ``session`` is the run's :class:`~guitrainer.engine.session.Session`, ``feedback`` its
    :class:`~guitrainer.engine.feedback.Feedback`.
    """

    def __init__(self, session: Any, feedback: Any) -> None:
        self.session = session
        self.feedback = feedback
        self.parked: list[torch.nn.Module] = []  # frozen modules moved to the CPU after caching
        self.latents: LatentTable = {}
        self.class_latents: LatentTable = {}
        self.validation_latents: LatentTable = {}  # the validation images' (engine/validation.py)
        self.latent_store: LatentCache | None = None
        self.text_store: TextCache | None = None
        self._text_mem: dict[str, TextConditioning] = {}
        self.family: Family = registry.family(session.model.family)

    def prepare(self) -> None:
        """Cache what the settings ask for (latents, then text embeddings) and prune the disk caches."""
        s, fb = self.session, self.feedback
        p = s.config.precision
        if p.cache_latents:
            self.cache_latents()
        fb.stop_if_asked("setting up", every_process=True)
        self.prune()
        cache_text = bool(p.cache_text_encoder_outputs and not s.train_te)
        if cache_text and s.config.dataset.shuffle_captions:
            cache_text = False
            fb.status("text embeddings are not cached: shuffled captions differ on every step")
        if cache_text:
            self.cache_text()
            fb.stop_if_asked("caching text embeddings", every_process=True)

    def folder(self, kind: str) -> Path | None:
        from guitrainer.base.paths import cache_dir

        s = self.session
        if not s.config.precision.cache_to_disk:
            return None  # memory only: nothing written
        return cache_dir() / kind / s.model.identity if s.model.identity else None

    def prune(self) -> None:
        """Keep the disk caches under budget, least recently used first; never what this run uses."""
        if not self.session.main:
            return
        from guitrainer.core import cache_store

        try:
            cache_store.prune(cache_store.DEFAULT_BUDGET_BYTES, keep_since=self.session.setup_started)
        except OSError as e:  # a cache that cannot be tidied never stops training
            log.warning("cache pruning failed: %s", e)

    # ------------------------------------------------------------------ parking
    def park(self, module: torch.nn.Module) -> None:
        """Move a frozen module off the GPU once its outputs are cached (sampling brings it back)."""
        if self.session.device.type == "cuda":
            module.to("cpu")
            self.parked.append(module)
            torch.cuda.empty_cache()

    def unpark(self) -> list[torch.nn.Module]:
        moved, self.parked = self.parked, []
        for module in moved:
            module.to(self.session.device)
        return moved

    # ------------------------------------------------------------------ latents
    def cache_latents(self) -> None:
        """Encode every image variant once (memory + disk cache); the VAE then leaves the GPU.

        The latent is ``mean + std * eps`` with ``eps`` from a generator seeded by the image variant
        (:meth:`LatentCache.noise_seed`: file name, crop, flip), so an entry does not depend on which other
        images were cached or where the dataset lives, and no global RNG is used. Class images are cached
        the same way (into ``class_latents``), in the same store.
        """
        s = self.session
        vae = s.model.vae
        store = LatentCache(self.folder("latents"), s.model.identity or "anonymous", vae.dtype, s.dtype,
                            getattr(s.model, "vae_identity", ""))
        store.warn = self.feedback.warn  # a full disk is said where the run's warnings go
        self.latent_store = store
        flips = (False, True) if s.config.dataset.flip_augment else (False,)
        jobs = [(s.dataset, self.latents)]
        if s.class_dataset is not None:
            jobs.append((s.class_dataset, self.class_latents))
        if getattr(s, "validation_dataset", None) is not None:
            jobs.append((s.validation_dataset, self.validation_latents))
        todo: list[tuple[Any, LatentTable, int, bool, str]] = []
        reused = 0
        for ds, target in jobs:
            for idx, item in enumerate(ds.items):
                for flip in flips:
                    key = store.key(item.image, ds.geometry(idx), flip)
                    hit = store.get(key)
                    if hit is None:
                        todo.append((ds, target, idx, flip, key))
                    else:
                        target[(idx, flip)] = hit["latent"].to(s.device)
                        reused += 1
        self.feedback.status(f"caching latents: {len(todo)} to encode, {reused} reused")
        t0 = time.perf_counter()
        with torch.no_grad():
            for n, (ds, target, idx, flip, key) in enumerate(todo, 1):
                self.feedback.stop_if_asked(f"caching latents ({n - 1} of {len(todo)} encoded and kept for the next run)")
                target[(idx, flip)] = self._encode_latent(ds, idx, flip, key)
                if n % 50 == 0 and n < len(todo):
                    self.feedback.status(f"caching latents: {n}/{len(todo)}")
        if todo:
            dt = time.perf_counter() - t0
            log.info("cached %d latents in %.1f s (%.3f s each)", len(todo), dt, dt / len(todo))
        for ds, _ in jobs:
            ds._pixel_cache.clear()  # the pixels are not needed any more
        self.park(vae)

    def _encode_latent(self, ds: Any, idx: int, flip: bool, key: str) -> torch.Tensor:
        s = self.session
        store = self.latent_store
        assert store is not None
        vae = s.model.vae
        px = ds.pixels(idx, flip).unsqueeze(0).to(s.device, vae.dtype)
        mean, std = self.family.latent_distribution(vae, px)
        g = torch.Generator(device="cpu").manual_seed(store.noise_seed(ds.items[idx].image, ds.geometry(idx), flip))
        eps = torch.randn(mean.shape, generator=g).to(s.device, mean.dtype)
        lat = self.family.to_model_latents(vae, mean + std * eps)[0].to(s.dtype)
        store.put(key, {"latent": lat})
        return lat

    def latents_of(self, batch: dict[str, Any], cached: LatentTable | None = None) -> torch.Tensor:
        """The batch's latents: from ``cached`` (default: the training images' cache) or the VAE."""
        s = self.session
        cached = self.latents if cached is None else cached
        if cached:
            flips = batch.get("flips") or [False] * len(batch["indices"])
            return torch.stack([cached[(i, f)] for i, f in zip(batch["indices"], flips)])
        vae = s.model.vae
        with torch.no_grad():
            px = batch["pixels"].to(s.device, vae.dtype)
            mean, std = self.family.latent_distribution(vae, px)
            lat = self.family.to_model_latents(vae, mean + std * torch.randn_like(mean))
        return lat.to(s.dtype)

    # ------------------------------------------------------------------ text
    def cache_text(self) -> None:
        """Encode every caption once (frozen text encoders); the encoders then leave the GPU."""
        s = self.session
        self.text_store = TextCache(self.folder("text"), s.model.identity or "anonymous", s.model.family, s.dtype)
        self.text_store.warn = self.feedback.warn
        ds = s.dataset
        captions = dict.fromkeys(ds.fixed_caption(i) for i in range(len(ds.items)))
        if s.config.dataset.caption_dropout > 0:
            captions[""] = None
        for extra in (s.class_dataset, getattr(s, "validation_dataset", None)):
            if extra is not None:
                captions.update(dict.fromkeys(extra.fixed_caption(i) for i in range(len(extra.items))))
        self.feedback.status(f"caching text embeddings of {len(captions)} captions")
        for n, c in enumerate(captions):
            self.feedback.stop_if_asked(f"caching text embeddings ({n} of {len(captions)} encoded)")
            self.text_entry(c)
        for te in s.model.text_encoders:
            self.park(te)

    def text_entry(self, caption: str) -> TextConditioning:
        """A caption's conditioning (each tensor without the batch axis) from the text cache, encoding it on a miss."""
        entry = self._text_mem.get(caption)
        if entry is not None:
            return entry
        s = self.session
        assert self.text_store is not None
        key = self.text_store.key(caption)
        value = self.text_store.get(key)
        if value is None:
            self.unpark()
            with torch.no_grad():
                encoded = self.encode_text_uncached([caption])
            value = {name: t[0] for name, t in encoded.items()}
            self.text_store.put(key, value)
        found = {name: t.to(s.device, s.dtype if t.is_floating_point() else t.dtype) for name, t in value.items()}
        self._text_mem[caption] = found
        return found

    def encode_text(self, captions: list[str]) -> TextConditioning:
        """The denoiser's conditioning for a batch of captions (cached, or from the text encoders)."""
        if self.text_store is not None:
            entries = [self.text_entry(c) for c in captions]
            return {name: torch.stack([e[name] for e in entries]) for name in entries[0]}
        with contextlib.nullcontext() if self.session.train_te else torch.no_grad():
            return self.encode_text_uncached(captions)

    def encode_text_uncached(self, captions: list[str]) -> TextConditioning:
        s = self.session
        return self.family.encode_text(s.model, s.text_encoders, captions, s.device)
