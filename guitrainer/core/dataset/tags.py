"""Tag operations on caption text (comma-separated tags): pure functions, no files."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable


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
