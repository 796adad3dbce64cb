"""What a loaded base model is: :class:`LoadedModel`, the identity its caches key on, the error a load raises.

Shared by the loaders (:mod:`~guitrainer.engine.models.loading`, :mod:`~guitrainer.engine.models.hub`,
:mod:`~guitrainer.engine.models.vae`) and by everything that trains with or verifies against a loaded model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ``progress(what, done, total)`` while a model is downloaded
Progress = Callable[[str, int, int], None]


class ModelLoadError(RuntimeError):
    """The base model could not be loaded; the message says what was tried and what to do.

    ``advice`` (optional) replaces the trainer's general model advice where the cause is known.
    """

    def __init__(self, message: str, advice: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.advice = advice


@dataclass
class LoadedModel:
    """The parts of a base model the trainer needs (all on CPU, frozen as loaded), for every family: the denoiser
    (a UNet or a transformer), the VAE, the text encoders with their tokenizers, the noise scheduler.

    ``identity`` names the exact weights (path + sizes/mtimes of the weight files): caches key on it.
    ``vae_identity`` names the VAE's weights when ``model.vae`` replaced the base's own ("" otherwise): the
    latent cache keys on it too. ``source`` is "demo", "folder", "single_file" or "hub".
    """

    denoiser: Any  # the UNet or the transformer
    vae: Any
    text_encoders: list[Any]
    tokenizers: list[Any]
    noise_scheduler: Any
    family: str  # a registered family's name: "demo", "sd15", "sdxl", "flux1", "sd35", …
    path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    identity: str = ""
    source: str = "folder"
    vae_identity: str = ""

    @property
    def text_encoder(self) -> Any:
        return self.text_encoders[0]

    @property
    def tokenizer(self) -> Any:
        return self.tokenizers[0]

    @property
    def prediction_type(self) -> str:
        """The DDPM scheduler's prediction type (the UNet families'; a flow-matching scheduler has none: "epsilon")."""
        return str(self.noise_scheduler.config.get("prediction_type", "epsilon"))


def model_identity(path: str | Path) -> str:
    """A short hash naming exactly these weights: resolved path + (name, size, mtime) of every file under it."""
    p = Path(path)
    parts: list[str] = [str(p.resolve()) if p.exists() else str(path)]
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        parts.append(f"{f.relative_to(p) if f != p else f.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:24]
