"""Image folders on disk: one spelling per folder, and the images each folder gives training.

Found by a directory listing only (no image is opened), as training reads a folder: the images directly in
it, not those in its subfolders. The start check's fuller look (left-out images, duplicates across folders,
why a folder gives nothing) is :func:`guitrainer.core.dataset.folder_check.look_at_folders`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from guitrainer.base.paths import expand
from guitrainer.core.dataset import scan as ds


class Folder(Protocol):
    """A configured folder: ``dataset.folders`` and ``dataset.regularization_folders`` hold these."""

    path: str
    repeats: int


def folder_key(path: str) -> str:
    """One spelling per folder, to tell whether two paths name the same folder (a class folder that is also a
    training folder, a folder added twice).

    ``$VARS`` and ``~`` are expanded as training expands them, then ``..`` and symlinks are resolved. A path
    that cannot be resolved (a NUL byte in the text, a symlink loop, no home folder) is its own key.
    """
    try:
        return str(expand(path).resolve())
    except (OSError, ValueError, RuntimeError):  # Python 3.11 raises RuntimeError on a symlink loop
        return path


def list_images(folder: str | Path, caption_extension: str = ".txt") -> list[Path]:
    """Images directly in ``folder``, in training's order (a directory listing only; none when it is missing)."""
    return [c.path for c in ds.collect([folder], caption_extension, recursive=False, repeats=1).candidates]


def training_images(folders: Sequence[Folder], caption_extension: str = ".txt") -> list[tuple[str, int]]:
    """Every image of ``folders`` with its folder's repeats: the ``train_counts`` that
    :func:`guitrainer.core.dataset.regularization.class_usage` takes.

    Each folder is listed on its own, so an image in two folders counts twice and left-out images
    (``dataset.exclude``) count too: what a class-image count is suggested from, not the start check.
    """
    return [(str(p), f.repeats) for f in folders for p in list_images(f.path, caption_extension)]
