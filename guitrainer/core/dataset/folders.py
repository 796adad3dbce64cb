"""Image folders on disk: the images each folder gives training.

Found by a directory listing only (no image is opened), as training reads a folder: the images directly in
it, not those in its subfolders. The start check's fuller look (left-out images, duplicates across folders,
why a folder gives nothing) is :func:`guitrainer.core.dataset.folder_check.look_at_folders`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from guitrainer.config import DatasetFolder
from guitrainer.core.dataset import scan as ds


def list_images(folder: str | Path, caption_extension: str = ".txt") -> list[Path]:
    """Images directly in ``folder``, in training's order (a directory listing only; none when it is missing)."""
    return [c.path for c in ds.collect([folder], caption_extension, recursive=False, repeats=1).candidates]


def training_images(folders: Sequence[DatasetFolder], caption_extension: str = ".txt") -> list[tuple[str, int]]:
    """Every image of ``folders`` with its folder's repeats: the ``train_counts`` that
    :func:`guitrainer.core.dataset.regularization.class_usage` takes.

    Each folder is listed on its own, so an image in two folders counts twice and left-out images
    (``dataset.exclude``) count too: what a class-image count is suggested from, not the start check.
    """
    return [(str(p), f.repeats) for f in folders for p in list_images(f.path, caption_extension)]
