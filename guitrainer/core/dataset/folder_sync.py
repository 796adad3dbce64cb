"""The Dataset page's images and the config's folders kept in step, both ways, without Qt.

The page holds the imported images (:class:`~guitrainer.core.dataset.scan.DatasetItem`, in import order);
the config names their folders with repeats (``dataset.folders``) and the images of those folders that
training leaves out (``dataset.exclude``, normalized paths). Images added or removed on the page change the
config (:func:`folders_of`, :func:`left_out_on_removal`, :func:`with_left_out`); a config loaded or edited
elsewhere changes the page (:func:`reconcile`). These functions decide; the page applies what they return.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from guitrainer.base.paths import path_key
from guitrainer.config import DatasetFolder
from guitrainer.core.dataset.report import CollectRequest
from guitrainer.core.dataset.scan import DatasetItem


def folders_of(items: Iterable[DatasetItem]) -> list[tuple[str, int]]:
    """``(folder, repeats)`` of every folder that holds one of ``items``: in the order the first image of each
    was imported, with that image's repeats (what ``dataset.folders`` becomes)."""
    seen: dict[Path, int] = {}
    for it in items:
        seen.setdefault(it.folder, it.repeats)
    return [(str(folder), repeats) for folder, repeats in seen.items()]


def images_per_folder(items: Iterable[DatasetItem]) -> dict[str, int]:
    """How many of ``items`` each folder holds (the folders table's Images column)."""
    counts: dict[str, int] = {}
    for it in items:
        counts[str(it.folder)] = counts.get(str(it.folder), 0) + 1
    return counts


def left_out_on_removal(removed: Iterable[DatasetItem], remaining: Iterable[DatasetItem]) -> list[str]:
    """The images taken off the page that ``dataset.exclude`` must name (normalized paths).

    Only those whose folder still holds images: that folder stays in ``dataset.folders``, and reading it again
    (the next start, a preset loaded) would bring them back. A folder whose last image went leaves
    ``dataset.folders`` instead, and its images need no entry.
    """
    kept_folders = {it.folder for it in remaining}
    return [path_key(it.image_path) for it in removed if it.folder in kept_folders]


def with_left_out(excluded: Sequence[str], paths: Iterable[str]) -> list[str]:
    """``dataset.exclude`` with ``paths`` added: its entries first, as they were, then the new ones sorted."""
    return list(excluded) + sorted(set(paths) - set(excluded))


@dataclass(frozen=True)
class Reconciliation:
    """What brings the page's images in line with the config (see :func:`reconcile`)."""

    gone: list[DatasetItem]  # images to take off the page: their folder left the config, or they are left out
    repeats: dict[str, int]  # each configured folder's repeats: the images kept take their folder's
    to_read: list[CollectRequest]  # configured folders to read (not recursive, less the left-out images)

    def repeats_of(self, item: DatasetItem) -> int:
        """The repeats ``item`` trains with from now on (its own when its folder is not configured)."""
        return self.repeats.get(str(item.folder), item.repeats)


def reconcile(
    items: Sequence[DatasetItem], folders: Sequence[DatasetFolder], excluded: Iterable[str], *, rescan: bool = False
) -> Reconciliation:
    """The page shows ``items``; the config now names ``folders`` and leaves out ``excluded`` (a preset or a
    file was loaded, or another editor changed them). What makes the page show exactly those folders' images?

    - An image goes when its folder is not in ``folders`` (a folder's ``~`` is expanded first), or when it
      is left out (paths compared normalized, so any spelling of the same file matches).
    - The images that stay take their folder's repeats.
    - A folder of ``folders`` that no image on the page comes from is read, without its subfolders (as
      training reads it), with its repeats and without the left-out images. ``rescan`` reads every
      folder again, also those shown: for images an edit of ``dataset.exclude`` brought back (the page's
      scan skips the images it already has).
    """
    wanted = {str(Path(f.path).expanduser()): f.repeats for f in folders}
    shown = set() if rescan else {folder for folder, _ in folders_of(items)}
    left_out = frozenset(path_key(p) for p in excluded)
    gone = [it for it in items if str(it.folder) not in wanted or path_key(it.image_path) in left_out]
    to_read = [
        CollectRequest((Path(folder),), recursive=False, repeats=repeats, exclude=left_out)
        for folder, repeats in wanted.items()
        if folder not in shown
    ]
    return Reconciliation(gone, wanted, to_read)
