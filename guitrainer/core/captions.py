"""Caption sidecar files: where they are, reading and writing them, and undoable edits of many at once.

A caption is ``<image stem><caption_extension>`` beside its image, written atomically (the old file
survives any failure).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from guitrainer.core.fileio import atomic_write_bytes

if TYPE_CHECKING:
    from guitrainer.core.dataset import DatasetItem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaptionText:
    """A caption as read from disk."""

    text: str
    was_utf8: bool = True
    exists: bool = True


def caption_path_for(image_path: str | Path, caption_extension: str = ".txt") -> Path:
    """``photo.png`` -> ``photo.txt`` (the sidecar training reads)."""
    ext = caption_extension if caption_extension.startswith(".") else f".{caption_extension}"
    p = Path(image_path)
    return p.with_name(p.stem + ext)


def read_caption(path: str | Path) -> CaptionText:
    """Read a caption; a missing file reads as empty, a non-UTF-8 one with replacement characters."""
    return decode_caption(_read_bytes(Path(path)))


def decode_caption(raw: bytes | None) -> CaptionText:
    """A caption file's bytes (None: no file) as :func:`read_caption` reads them."""
    if raw is None:
        return CaptionText("", True, exists=False)
    try:
        return CaptionText(raw.decode("utf-8-sig"), True)
    except UnicodeDecodeError:
        return CaptionText(raw.decode("utf-8", errors="replace"), False)


def write_caption(path: str | Path, text: str) -> None:
    """Write a caption as UTF-8, atomically (the old file survives any failure)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def restore_bytes(path: str | Path, data: bytes | None) -> None:
    """Put a caption file back exactly: ``data`` atomically, or remove the file when ``data`` is None."""
    p = Path(path)
    if data is None:
        p.unlink(missing_ok=True)
    else:
        atomic_write_bytes(p, data)


@dataclass(frozen=True)
class CaptionChange:
    """One caption file before and after an edit, as bytes (None: the file did not exist)."""

    caption_path: Path
    old: bytes | None
    new: bytes | None


@dataclass
class CaptionEdit:
    """One undoable change to any number of captions (a bulk tag operation, an autosave)."""

    description: str
    changes: list[CaptionChange] = field(default_factory=list)
    skipped_not_utf8: int = 0

    @property
    def count(self) -> int:
        return len(self.changes)

    def apply(self, progress: Callable[[int], None] | None = None) -> None:
        """Write every new caption (atomically, file by file); if one fails, undo the ones written.

        ``progress(n)`` is called after each file, with the number written so far.
        """
        self._write(self.changes, forward=True, progress=progress)

    def revert(self, progress: Callable[[int], None] | None = None) -> None:
        """Restore every caption exactly as it was before; if one fails, redo the ones restored."""
        self._write(list(reversed(self.changes)), forward=False, progress=progress)

    @staticmethod
    def _write(changes: list[CaptionChange], forward: bool, progress: Callable[[int], None] | None) -> None:
        done: list[CaptionChange] = []
        try:
            for ch in changes:
                restore_bytes(ch.caption_path, ch.new if forward else ch.old)
                done.append(ch)
                if progress is not None:
                    progress(len(done))
        except BaseException:
            for ch in reversed(done):
                try:
                    restore_bytes(ch.caption_path, ch.old if forward else ch.new)
                except OSError:
                    log.exception("could not restore %s", ch.caption_path)
            raise


def plan_edit(items: Iterable[DatasetItem], op: Callable[[str], str], description: str) -> CaptionEdit:
    """Run ``op`` on each item's caption and record the ones it changes (writes nothing).

    Captions that are not UTF-8 are left alone (counted in ``skipped_not_utf8``): a bulk edit
    would replace their unreadable bytes.
    """
    edit = CaptionEdit(description)
    for item in items:
        old_bytes = _read_bytes(item.caption_path)
        if old_bytes is None:
            old_text = ""
        else:
            try:
                old_text = old_bytes.decode("utf-8-sig")
            except UnicodeDecodeError:
                edit.skipped_not_utf8 += 1
                continue
        new_text = op(old_text)
        if new_text == old_text:
            continue
        edit.changes.append(CaptionChange(item.caption_path, old_bytes, new_text.encode("utf-8")))
    return edit


def apply_tag_operation(items: Sequence[DatasetItem], op: Callable[[str], str], description: str) -> CaptionEdit:
    """Plan, write and return one undoable edit; the items' captions are refreshed. ``edit.count`` changed."""
    edit = plan_edit(items, op, description)
    edit.apply()
    changed = {ch.caption_path for ch in edit.changes}
    for item in items:
        if item.caption_path in changed:
            item.reload_caption()
    return edit
