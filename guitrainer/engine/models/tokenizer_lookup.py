"""Finding a tokenizer that a family's files do not include (Qwen3's for Z-Image, Qwen2.5's for Qwen-Image):
a tokenizer folder beside the model files or in the config folder, then the Hugging Face cache of the repositories
that ship it, always offline; otherwise a :class:`ModelLoadError` that gives the one command that downloads it.

A folder is taken only when its tokenizer reads and passes the family's own check (its vocabulary, its template's
special tokens); a damaged or foreign one is logged and the search goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guitrainer.base.errors import first_line
from guitrainer.engine.models.types import ModelLoadError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenizerSource:
    """Where one family's tokenizer is looked for, and what makes it the right one."""

    name: str  # "Qwen3", as the messages say it
    family: str  # "Z-Image"
    folders: tuple[str, ...]  # folder names beside the model files / in the config folder
    repos: tuple[tuple[str, str], ...]  # (hub repository, its tokenizer's subfolder) in the cache
    command: str  # the download command the error gives
    accepts: Callable[[Any], bool]  # the family's check of a tokenizer that read
    missing: str  # what a rejected folder lacks, for the log


def tokenizer_in(folder: Path, source: TokenizerSource) -> Any | None:
    """The tokenizer in ``folder`` if it reads and ``source`` accepts it, else None (logged)."""
    from transformers import AutoTokenizer

    if not folder.is_dir() or not any((folder / f).is_file() for f in ("tokenizer.json", "vocab.json")):
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - a damaged or foreign tokenizer folder raises anything: look on
        log.warning("%s holds a tokenizer that cannot be read: %s", folder, first_line(e))
        return None
    if not source.accepts(tokenizer):
        log.warning("%s holds a tokenizer without %s", folder, source.missing)
        return None
    return tokenizer


def find_tokenizer(near: Sequence[Path], config_dir: Path, source: TokenizerSource) -> Any:
    """The tokenizer beside ``near`` (files or folders), in ``config_dir``, or in the cache; else ModelLoadError."""
    from huggingface_hub import try_to_load_from_cache

    places = [*(p.parent if p.is_file() else p for p in near), config_dir]
    for place in dict.fromkeys(places):
        for name in source.folders:
            found = tokenizer_in(place / name, source)
            if found is not None:
                return found
    for repo, subfolder in source.repos:
        cached = try_to_load_from_cache(repo, f"{subfolder}/tokenizer_config.json" if subfolder else "tokenizer_config.json")
        if isinstance(cached, str):
            found = tokenizer_in(Path(cached).parent, source)
            if found is not None:
                return found
    raise ModelLoadError(
        f"the {source.name} tokenizer is missing: {source.family}'s files do not include it and it is not in a "
        f"tokenizer/ folder beside them, nor in the Hugging Face cache. Download it once (a few MB) with:  "
        f"{source.command}",
        (f"run: {source.command}", f"or put {source.name}'s tokenizer folder, named tokenizer, beside the model files"),
    )
