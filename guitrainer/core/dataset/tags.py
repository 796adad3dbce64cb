"""Tag operations on caption text (comma-separated tags): pure functions, no files."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


def split_tags(text: str) -> list[str]:
    """Comma-separated tags, stripped, empty ones dropped."""
    return [t.strip() for t in text.split(",") if t.strip()]


def join_tags(tags: Iterable[str]) -> str:
    return ", ".join(tags)


def _retag(text: str, new: list[str]) -> str:
    """Keep the text byte for byte when the tags did not change."""
    return text if new == split_tags(text) else join_tags(new)


def add_trigger(text: str, word: str) -> str:
    """Put ``word`` first (moving it there if it is elsewhere)."""
    word = word.strip()
    if not word:
        return text
    tags = split_tags(text)
    return _retag(text, [word] + [t for t in tags if t != word])


def find_replace(text: str, find: str, replace: str, *, regex: bool = False) -> str:
    """Replace in the whole caption text (plain text, or a Python regular expression)."""
    if not find:
        return text
    if regex:
        return re.sub(find, replace, text)
    return text.replace(find, replace)


def remove_tag(text: str, tag: str) -> str:
    tag = tag.strip()
    return _retag(text, [t for t in split_tags(text) if t != tag])


def rename_tag(text: str, old: str, new: str) -> str:
    old, new = old.strip(), new.strip()
    tags = [new if t == old else t for t in split_tags(text)]
    return _retag(text, [t for t in tags if t])


@dataclass(frozen=True)
class RenameTag:
    """The operation "rename tag ``old`` to ``new``" (``new`` "" removes it), as data: a caller that filters by
    ``old`` can follow the rename (:func:`tag_filter_after`)."""

    old: str
    new: str

    def __call__(self, text: str) -> str:
        return rename_tag(text, self.old, self.new)


def tag_filter_after(tag: str, captions: Iterable[str], renamed: tuple[str, str] | None = None) -> tuple[str, str]:
    """The tag filter after captions changed: ``(tag to filter by, what to tell the user)`` ("" when nothing changed).

    A rename of the filtered tag (``renamed`` = (old, new), as applied: an undone rename is (new, old)) takes the
    filter along to the new name; a tag that no caption has any more clears the filter: either way it says so.
    """
    tag = tag.strip()
    if not tag:
        return "", ""
    if renamed is not None and renamed[0].strip() == tag:
        new = renamed[1].strip()
        if new:
            return new, f"The tag filter follows the rename: it shows “{new}” now."
        return "", f"“{tag}” was removed: the tag filter is cleared, all images are shown."
    if any(tag in split_tags(c) for c in captions):
        return tag, ""
    return "", f"No image has the tag “{tag}” any more: the tag filter is cleared, all images are shown."


def sort_tags(text: str, keep_first: int = 0) -> str:
    """Sort tags alphabetically, leaving the first ``keep_first`` (e.g. the trigger word) in place."""
    tags = split_tags(text)
    return _retag(text, tags[:keep_first] + sorted(tags[keep_first:], key=str.casefold))


def dedupe_tags(text: str) -> str:
    """Drop repeated tags, keeping the first of each."""
    return _retag(text, list(dict.fromkeys(split_tags(text))))


def tag_frequency(captions: Iterable[str]) -> list[tuple[str, int]]:
    """Each tag and in how many captions it appears, most frequent first."""
    counts: Counter[str] = Counter()
    for c in captions:
        counts.update(set(split_tags(c)))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].casefold()))
