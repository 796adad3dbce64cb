"""Caption sidecar files: where they are, reading and writing them, and undoable edits of many at once.

A caption is ``<image stem><caption_extension>`` beside its image, written atomically (the old file
survives any failure).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from guitrainer import APP_NAME
from guitrainer.base import safe_open
from guitrainer.base.fileio import atomic_write_bytes, numbered_path
from guitrainer.base.names import printable
from guitrainer.core.dataset.tags import RenameTag

if TYPE_CHECKING:
    from guitrainer.core.dataset.scan import DatasetItem

log = logging.getLogger(__name__)


#: byte-order marks, longest first: the encoding they announce (Python codec) and the mark itself
_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
#: what a caption that is neither UTF-8 nor marked is read as, in order: Windows' Western code page (its
#: 0x80-0x9F are € ‘ ’ “ ” …), then Latin-1 (every byte is a character; only cp1252's five holes reach it)
LEGACY_ENCODINGS: tuple[str, ...] = ("cp1252", "latin-1")
#: longest caption file read: a caption is a line or two; a bigger "caption" is some other file
MAX_CAPTION_BYTES = 1 << 20


class CaptionFileError(OSError):
    """A caption path that cannot be read as a caption: a folder, a FIFO, a symlink loop, a name too long."""


class CaptionChangedError(OSError):
    """A caption file no longer holds what an edit (or its undo) expects: another program changed it meanwhile."""

    def __str__(self) -> str:  # the sentence, without OSError's "[Errno N]"
        return str(self.strerror)


class CaptionEncodingError(ValueError):
    """Text holds characters the caption file's encoding cannot store; ``characters`` lists them.

    The UI asks the user whether to convert the file to UTF-8 (:func:`save_caption` with ``encoding="utf-8"``).
    """

    def __init__(self, path: str | Path, encoding: str, characters: str):
        self.path, self.encoding, self.characters = Path(path), encoding, characters
        super().__init__(f"{Path(path).name} is {encoding_label(encoding)}, which cannot store {characters!r}; "
                         "save it as UTF-8 instead")


@dataclass(frozen=True)
class CaptionText:
    """A caption as read from disk.

    Attributes:
        text: the caption, decoded (never with replacement characters for a file whose encoding was told).
        was_utf8: the file is UTF-8 (with or without a BOM), or there is no file.
        exists: a caption file is there.
        encoding: the Python codec the file is written in ("utf-8", "utf-8-sig", "utf-16-le", "cp1252", ...):
            a save keeps it.
        problem: why the path could not be read as a caption ("" when it could), e.g. "is a folder".
    """

    text: str
    was_utf8: bool = True
    exists: bool = True
    encoding: str = "utf-8"
    problem: str = ""


def encoding_label(encoding: str) -> str:
    """A codec as people name it: "utf-8-sig" -> "UTF-8 with a byte-order mark", "cp1252" -> "Windows-1252"."""
    return {
        "utf-8": "UTF-8",
        "utf-8-sig": "UTF-8 with a byte-order mark",
        "utf-16-le": "UTF-16 (little-endian, with a byte-order mark)",
        "utf-16-be": "UTF-16 (big-endian, with a byte-order mark)",
        "cp1252": "Windows-1252",
        "latin-1": "Latin-1 (ISO 8859-1)",
    }.get(encoding, encoding)


def caption_path_for(image_path: str | Path, caption_extension: str = ".txt") -> Path:
    """``photo.png`` -> ``photo.txt`` (the sidecar training reads)."""
    ext = caption_extension if caption_extension.startswith(".") else f".{caption_extension}"
    p = Path(image_path)
    return p.with_name(p.stem + ext)


def read_caption(path: str | Path) -> CaptionText:
    """Read a caption in whatever encoding it can be told to have (see :func:`decode_caption`).

    Never raises and never hangs: a missing file reads as empty; a path that is not a regular file (a folder,
    a FIFO, a device), a symlink loop or a name too long reads as empty with :attr:`CaptionText.problem` set.
    """
    try:
        return decode_caption(caption_bytes(Path(path)))
    except OSError as e:
        return CaptionText("", True, exists=False, problem=str(e) if isinstance(e, CaptionFileError) else _why(e))


def decode_caption(raw: bytes | None) -> CaptionText:
    """A caption file's bytes (None: no file) as :func:`read_caption` reads them.

    Order: a byte-order mark (UTF-8, UTF-16 LE/BE); UTF-16 without a mark when every other byte is NUL
    (ASCII text saved as UTF-16); UTF-8; then :data:`LEGACY_ENCODINGS`. Only a byte sequence none of these can read
    (never, since Latin-1 reads every byte) would show replacement characters.
    """
    if raw is None:
        return CaptionText("", True, exists=False)
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            try:
                text = raw[len(bom):].decode(codec.removesuffix("-sig"))
                return CaptionText(text, codec == "utf-8-sig", encoding=codec)
            except UnicodeDecodeError:
                break
    unmarked = _unmarked_utf16(raw)  # before UTF-8: "r\0e\0d\0" is valid UTF-8, full of NULs
    if unmarked:
        return CaptionText(raw.decode(unmarked), False, encoding=unmarked)
    try:
        return CaptionText(raw.decode("utf-8"), True, encoding="utf-8")
    except UnicodeDecodeError:
        pass
    for codec in LEGACY_ENCODINGS:
        try:
            return CaptionText(raw.decode(codec), False, encoding=codec)
        except UnicodeDecodeError:
            continue
    return CaptionText(raw.decode("utf-8", errors="replace"), False, encoding="utf-8")  # pragma: no cover


def _unmarked_utf16(raw: bytes) -> str:
    """"utf-16-le" / "utf-16-be" for text whose every other byte is NUL (ASCII as UTF-16), else ""."""
    if len(raw) < 4 or len(raw) % 2:
        return ""
    if not any(raw[1::2]) and all(raw[0::2]):
        return "utf-16-le"
    if not any(raw[0::2]) and all(raw[1::2]):
        return "utf-16-be"
    return ""


def encode_caption(text: str, encoding: str = "utf-8", *, path: str | Path = "") -> bytes:
    """``text`` as bytes in ``encoding`` (with its byte-order mark, if it has one).

    Raises:
        CaptionEncodingError: ``encoding`` cannot store some character of ``text``, or ``text`` holds a
            replacement character (U+FFFD) that would stand for lost bytes forever.
    """
    if "\ufffd" in text:
        raise CaptionEncodingError(path, encoding, "\ufffd")
    bom = next((b for b, codec in _BOMS if codec == encoding), b"")
    codec = encoding.removesuffix("-sig")
    try:
        return bom + text.encode(codec)
    except UnicodeEncodeError:
        bad = "".join(dict.fromkeys(ch for ch in text if not _encodable(ch, codec)))
        raise CaptionEncodingError(path, encoding, bad) from None


def _encodable(ch: str, codec: str) -> bool:
    try:
        ch.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


def save_caption(path: str | Path, text: str, *, encoding: str | None = None) -> CaptionText:
    """Write a caption atomically, in the encoding of the file already there (UTF-8 for a new file).

    Every character the user did not change keeps its bytes: a Windows-1252 file stays Windows-1252, a
    UTF-16 file stays UTF-16 with its mark, a UTF-8 file with a BOM keeps it. ``encoding`` forces one
    (``"utf-8"`` converts the file, after the user agreed). Returns what is now on disk.

    Raises:
        CaptionEncodingError: the file's encoding cannot store a character of ``text`` (nothing written).
        OSError: the write failed (the old file is intact).
    """
    p = Path(path)
    if encoding is None:
        current = read_caption(p)
        encoding = current.encoding if current.exists else "utf-8"
    atomic_write_bytes(p, encode_caption(text, encoding, path=p))
    return CaptionText(text, encoding in ("utf-8", "utf-8-sig"), encoding=encoding)


def write_caption(path: str | Path, text: str) -> None:
    """Write a caption atomically as UTF-8 (converting a file in another encoding; every character survives).

    Callers that record the written bytes (undo) rely on them being ``text.encode("utf-8")``. To keep the file's
    own encoding, or to ask before converting, use :func:`save_caption`.

    Raises:
        CaptionEncodingError: ``text`` holds U+FFFD, a replacement character standing for lost bytes.
    """
    save_caption(path, text, encoding="utf-8")


def caption_bytes(path: Path) -> bytes | None:
    """A caption file's bytes; None when there is none. Read through :mod:`guitrainer.base.safe_open`: the file type is
    told before anything is opened, so a FIFO never blocks and a device is never read.

    Raises:
        CaptionFileError: the path is a folder, a FIFO, a device, a symlink loop, too long, too big, or unreadable.
    """
    try:
        return safe_open.read_bytes(path, limit=MAX_CAPTION_BYTES, what="a caption")
    except safe_open.PathError as e:
        if e.errno == errno.ENOENT:
            return None
        raise CaptionFileError(f"caption {printable(path.name)} {e.reason}") from None


@dataclass(frozen=True)
class CaptionStamp:
    """What a caption file held when an editor read it, to tell whether another program changed it since.

    The bytes decide (their size and SHA-256): a modification time alone misses a rewrite within the file
    system's clock tick and flags a ``touch`` that changed nothing. ``mtime_ns`` is kept for messages and logs.
    """

    exists: bool
    size: int = 0
    sha256: str = ""
    mtime_ns: int = 0

    @classmethod
    def of(cls, raw: bytes | None, mtime_ns: int = 0) -> CaptionStamp:
        """The stamp of a file holding ``raw`` (None: no file)."""
        if raw is None:
            return cls(False)
        return cls(True, len(raw), hashlib.sha256(raw).hexdigest(), mtime_ns)

    @classmethod
    def read(cls, path: str | Path) -> tuple[CaptionStamp, bytes | None]:
        """The stamp of the caption file at ``path`` now, and its bytes (None: no file).

        Raises:
            CaptionFileError: as :func:`caption_bytes`.
        """
        p = Path(path)
        raw = caption_bytes(p)
        mtime = 0
        if raw is not None:
            try:
                mtime = p.stat().st_mtime_ns
            except OSError:
                mtime = 0
        return cls.of(raw, mtime), raw

    def matches(self, raw: bytes | None) -> bool:
        """Whether a file now holding ``raw`` (None: gone) is the file this stamp was taken of."""
        if raw is None:
            return not self.exists
        return self.exists and self.size == len(raw) and self.sha256 == hashlib.sha256(raw).hexdigest()


def rescue_captions(texts: Sequence[tuple[Path, str]], folder: Path) -> Path:
    """Write typed captions that could not be saved where they belong into one text file in ``folder`` (the user
    data folder): each caption file's path on a line, its text on the next, then a blank line. Returns the file.

    The last way to keep what the user typed when the app must end without asking (a logout, Ctrl+C in the
    terminal). Raises ``OSError`` when even that cannot be written.
    """
    lines = [f"# Captions typed in {APP_NAME} that could not be saved beside their images; copy them back by hand.", ""]
    for path, text in texts:
        lines += [str(path), text, ""]
    folder.mkdir(parents=True, exist_ok=True)
    target = numbered_path(folder / f"unsaved_captions_{time.strftime('%Y%m%d_%H%M%S')}.txt")
    atomic_write_bytes(target, "\n".join(lines).encode("utf-8"))
    return target


def _why(e: OSError) -> str:
    return e.strerror or str(e)


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
    #: (old, new) when the edit renames a tag (:class:`~guitrainer.core.dataset.tags.RenameTag`): a tag filter follows it
    renamed: tuple[str, str] | None = None

    @property
    def count(self) -> int:
        return len(self.changes)

    def apply(self, progress: Callable[[int], None] | None = None) -> None:
        """Write every new caption (atomically, file by file); if one fails, undo the ones written.

        ``progress(n)`` is called after each file, with the number written so far.

        Raises:
            CaptionChangedError: a file no longer holds what the edit replaces (another program changed it):
                nothing is written.
        """
        self._write(self.changes, forward=True, progress=progress)

    def revert(self, progress: Callable[[int], None] | None = None) -> None:
        """Restore every caption exactly as it was before; if one fails, redo the ones restored.

        Raises:
            CaptionChangedError: a file no longer holds what the edit wrote (another program changed it since):
                nothing is written, so an undo never replaces that change unasked.
        """
        self._write(list(reversed(self.changes)), forward=False, progress=progress)

    @staticmethod
    def _write(changes: list[CaptionChange], forward: bool, progress: Callable[[int], None] | None) -> None:
        for ch in changes:  # first: every file still holds what this step replaces, or nothing is written
            if caption_bytes(ch.caption_path) != (ch.old if forward else ch.new):
                raise CaptionChangedError(
                    errno.ESTALE,
                    f"{printable(ch.caption_path.name)} was changed by another program since; "
                    f"{'redoing' if forward else 'undoing'} would replace that change",
                )
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

    Captions that are not UTF-8 (and paths that are not caption files: a folder, a pipe) are left alone,
    counted in ``skipped_not_utf8``: a bulk edit changes only UTF-8 files; one caption at a time,
    :func:`save_caption` keeps any other encoding.
    """
    edit = CaptionEdit(description, renamed=(op.old, op.new) if isinstance(op, RenameTag) else None)
    for item in items:
        try:
            old_bytes = caption_bytes(item.caption_path)
        except CaptionFileError:
            edit.skipped_not_utf8 += 1
            continue
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
