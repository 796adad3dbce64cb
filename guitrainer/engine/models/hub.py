"""Hub models: downloading the parts of a diffusers repo training needs, and saying in plain words why not.

Messages and advice fit the window and the command line alike (no page names, no "download the file again").
"""

from __future__ import annotations

import os
from pathlib import Path

from guitrainer.base.errors import first_line
from guitrainer.engine.models.types import ModelLoadError, Progress

#: a hub model that could not be reached: words that fit the window and the command line alike
HUB_ADVICE = (
    "check the network connection and the hub id (owner/name, as on huggingface.co)",
    "or use a model already on this computer: a diffusers folder or one .safetensors file",
)


def _hub_failure(repo_id: str, e: BaseException, what: str = "base model") -> ModelLoadError:
    """A failed hub download in plain words (no raw ``[Errno -2]``)."""
    kind = type(e).__name__
    if kind in ("RepositoryNotFoundError", "RevisionNotFoundError"):
        why = "there is no such model on the Hugging Face hub (or it is private)"
    elif kind == "GatedRepoError":
        why = "the model is gated: accept its terms on huggingface.co and log in with `hf auth login`"
    elif kind in ("LocalEntryNotFoundError", "ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout") or isinstance(e, OSError):
        why = "the Hugging Face hub could not be reached (no network connection?)"
    else:
        why = first_line(e, 200) if str(e).strip() else kind
    return ModelLoadError(f"could not download the {what} {repo_id!r}: {why}", HUB_ADVICE)


def is_offline() -> bool:
    """``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set: nothing is downloaded."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get("TRANSFORMERS_OFFLINE", "0") not in ("", "0")


#: files of a diffusers repo the trainer needs (no fp16 / .bin / ema duplicates)
HUB_PATTERNS = [
    "model_index.json",
    "*/config.json",
    "scheduler/scheduler_config.json",
    "tokenizer*/*",
    "unet/diffusion_pytorch_model.safetensors",
    "vae/diffusion_pytorch_model.safetensors",
    "text_encoder*/model.safetensors",
]


def download_model(
    repo_id: str, progress: Progress | None = None, *, patterns: list[str] | None = None, what: str = "base model"
) -> Path:
    """Download the parts of a diffusers hub repo training needs; ``progress(file, done, total)`` per file.

    ``patterns``: the files to fetch (default :data:`HUB_PATTERNS`, a whole pipeline); ``what`` names the repo
    in a failure's message ("base model", "VAE").
    """
    from huggingface_hub import snapshot_download
    from tqdm.auto import tqdm

    class _Bar(tqdm):  # type: ignore[misc,type-arg]
        def update(self, n: float | None = 1) -> bool | None:
            out = super().update(n)
            if progress is not None:
                progress(str(self.desc or repo_id), int(self.n), int(self.total or 0))
            return out

    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns or HUB_PATTERNS, tqdm_class=_Bar))
    except Exception as e:  # noqa: BLE001 - network / auth / missing repo: each said in plain words
        raise _hub_failure(repo_id, e, what) from e
