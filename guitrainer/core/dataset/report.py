"""The dataset's numbers and what an import did, without Qt: the Dataset page only shows them.

- :class:`ImportReport`: what one drop or "Add folder" added, refused and skipped, in plain words;
- :class:`SummaryBuilder`: counts, resolution histogram, buckets, steps per epoch and tag counts of many
  images, computed in slices so the page can spread the work over event-loop turns;
- :func:`summary_html` / :func:`strip_text`: that summary as the page shows it;
- :func:`plan_and_write`: a tag operation over many captions, all or nothing (any thread);
- :func:`without_included`: which left-out images (``dataset.exclude``) an import brings back.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guitrainer.base.paths import path_key
from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.scan import CaptionEdit, DatasetItem

#: ``report(phase, done, total)``: progress of reading ("reading") and writing ("writing") captions
Report = Callable[[str, int, int], None]


def plural(n: int, word: str, many: str = "") -> str:
    """``1 image``, ``2 images`` (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


@dataclass
class ImportReport:
    """What an import did: images queued for the grid, files refused and files already there."""

    added: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    #: folders of loose dropped images that hold more images than were dropped: (folder, how many more).
    #: Those other images go to ``dataset.exclude``, so training uses exactly the images in the grid.
    partial_folders: list[tuple[str, int]] = field(default_factory=list)

    def message(self) -> str:
        parts = [f"Added {plural(self.added, 'image')}."]
        if self.rejected:
            first = self.rejected[0]
            more = f" and {len(self.rejected) - 1} more" if len(self.rejected) > 1 else ""
            parts.append(f"Not imported: {Path(first[0]).name} ({first[1]}){more}.")
        if self.duplicates:
            parts.append(f"{len(self.duplicates)} already in the dataset, skipped.")
        if self.partial_folders:
            folder, more = self.partial_folders[0]
            others = f" (and {len(self.partial_folders) - 1} more folders)" if len(self.partial_folders) > 1 else ""
            parts.append(
                f"Only the images you dropped are trained: the other {plural(more, 'image')} "
                f"in {Path(folder).name}{others} are left out (drop the folder itself to train them all)."
            )
        return " ".join(parts)

    def details(self) -> str:
        lines = [f"{p}: {why}" for p, why in self.rejected] + [f"{p}: {why}" for p, why in self.duplicates]
        return "\n".join(lines[:200]) + (f"\n… {len(lines) - 200} more" if len(lines) > 200 else "")


@dataclass(frozen=True)
class CollectRequest:
    """Paths to look for images in (what :func:`ds.collect` takes)."""

    paths: tuple[Path, ...]
    recursive: bool = True
    repeats: int | None = None
    exclude: frozenset[str] = frozenset()  # ds.normalized paths training leaves out (dataset.exclude)


def summary_html(s: ds.DatasetSummary, batch_size: int, bucketing: bool) -> str:
    """Counts, resolution histogram and buckets with counts, as a small HTML table (the Summary tab)."""

    def bars(rows: list[tuple[str, int]]) -> str:
        peak = max((n for _, n in rows), default=1) or 1
        out = []
        for label, n in rows:
            width = max(2, int(160 * n / peak))
            out.append(
                f"<tr><td style='padding-right:10px'>{label}</td><td align='right' style='padding-right:6px'>{n}</td>"
                f"<td><table cellspacing=0 cellpadding=0><tr><td bgcolor='#4a86c5' width={width} height=9></td>"
                f"</tr></table></td></tr>"
            )
        return "<table cellspacing=2>" + "".join(out) + "</table>"

    hist = bars(list(s.resolution_histogram.items())) or "—"
    bucket_rows = [(f"{w} × {h}", n) for (w, h), n in sorted(s.buckets.items(), key=lambda kv: kv[0][0] / kv[0][1])]
    buckets = bars(bucket_rows) if bucket_rows else "—"
    return (
        f"<p><b>{s.image_count}</b> {'image' if s.image_count == 1 else 'images'} · <b>{s.captioned_count}</b> "
        f"captioned · <b>{s.flagged_count}</b> flagged<br>"
        f"<b>{s.images_with_repeats}</b> images per epoch with repeats · batch {batch_size} → "
        f"<b>{s.steps_per_epoch}</b> {'step' if s.steps_per_epoch == 1 else 'steps'} per epoch</p>"
        f"<p><b>Shorter side</b></p>{hist}"
        f"<p><b>{'Aspect buckets' if bucketing else 'Training size (no buckets)'}</b></p>{buckets}"
    )


SUMMARY_SLICE = 200  # images per GUI-thread slice of the summary (a few ms each)


@dataclass(frozen=True)
class SummaryParams:
    """The settings :func:`ds.summarize` takes besides the items."""

    resolution: int = 512
    bucketing: bool = True
    min_side: int = 256
    max_side: int = 1024
    step: int = 64
    batch_size: int = 1


class SummaryBuilder:
    """:func:`ds.summarize` and :func:`ds.tag_frequency` of many images, computed in slices.

    ``ds.summarize`` is pure Python (~30 µs an image: 60+ ms for 2,000), too long for one GUI event.
    The items are cut into slices of ``slice_size`` images with the same repeats; each slice is
    summarized by ``ds.summarize`` itself (with batch size 1) and the slices are added up: counts and
    histograms add, and a bucket's images-with-repeats is repeats × its image count, which gives the
    steps per epoch. Slices are cached by their content, so after one caption edit only its slice is
    recomputed. :meth:`run` yields None after each computed slice and the result last.
    """

    def __init__(self, slice_size: int = SUMMARY_SLICE):
        self.slice_size = slice_size
        self._cache: dict[tuple, tuple[ds.DatasetSummary, Counter[str]]] = {}

    def compute(
        self, items: Sequence[DatasetItem], p: SummaryParams
    ) -> tuple[ds.DatasetSummary, list[tuple[str, int]]]:
        """All at once (raises ValueError like ``ds.summarize``)."""
        for out in self.run(items, p):
            if out is not None:
                return out
        raise AssertionError("unreachable")

    def run(
        self, items: Sequence[DatasetItem], p: SummaryParams
    ) -> Iterator[tuple[ds.DatasetSummary, list[tuple[str, int]]] | None]:
        by_repeats: dict[int, list[DatasetItem]] = {}
        for it in items:
            by_repeats.setdefault(it.repeats, []).append(it)
        geometry = (p.resolution, p.bucketing, p.min_side, p.max_side, p.step)
        cache: dict[tuple, tuple[ds.DatasetSummary, Counter[str]]] = {}
        parts: list[tuple[int, ds.DatasetSummary, Counter[str]]] = []
        for reps, group in by_repeats.items():
            for i in range(0, len(group), self.slice_size):
                chunk = group[i : i + self.slice_size]
                key = (
                    reps,
                    geometry,
                    tuple(
                        (it.width, it.height, it.caption_exists, it.caption, frozenset(it.flags))
                        for it in chunk
                    ),
                )
                part = self._cache.get(key)
                if part is None:
                    s = ds.summarize(
                        chunk, p.resolution, bucketing=p.bucketing, min_side=p.min_side, max_side=p.max_side,
                        step=p.step, batch_size=1,
                    )  # fmt: skip
                    part = (s, Counter(dict(ds.tag_frequency(it.caption for it in chunk))))
                    cache[key] = part
                    yield None
                cache[key] = part
                parts.append((reps, *part))
        self._cache = cache  # only what the current items use
        yield self._merge(parts, p)

    @staticmethod
    def _merge(
        parts: list[tuple[int, ds.DatasetSummary, Counter[str]]], p: SummaryParams
    ) -> tuple[ds.DatasetSummary, list[tuple[str, int]]]:
        total = ds.DatasetSummary()
        hist: Counter[str] = Counter()
        images: Counter[tuple[int, int]] = Counter()  # usable images per bucket
        with_repeats: Counter[tuple[int, int]] = Counter()  # images × repeats per bucket
        tags: Counter[str] = Counter()
        for reps, s, t in parts:
            total.image_count += s.image_count
            total.captioned_count += s.captioned_count
            total.flagged_count += s.flagged_count
            total.images_with_repeats += s.images_with_repeats
            hist.update(s.resolution_histogram)
            for b, n in s.buckets.items():
                images[b] += n
                with_repeats[b] += n * reps
            tags.update(t)
        total.resolution_histogram = {label: hist[label] for _, label in ds.RESOLUTION_BINS if hist[label]}
        batch = max(1, p.batch_size)
        if p.bucketing and images:
            order = ds.make_buckets(p.resolution, p.min_side, p.max_side, p.step)
            total.buckets = {b: images[b] for b in order if images[b]}
            total.steps_per_epoch = sum(math.ceil(n / batch) for n in with_repeats.values())
        else:
            if images:
                total.buckets = {(p.resolution, p.resolution): sum(images.values())}
            total.steps_per_epoch = math.ceil(total.images_with_repeats / batch)
        freq = sorted(tags.items(), key=lambda kv: (-kv[1], kv[0].casefold()))  # as ds.tag_frequency orders
        return total, freq



@dataclass(frozen=True)
class ShownCount:
    """What the grid shows under its filter, for the line under it.

    Attributes:
        shown, captioned, flagged: the images in view, and how many of them have a caption, a flag.
        total: every image of the dataset.
        filter: the filter in words (:func:`describe_filter`); "" when every image is shown.
    """

    shown: int
    captioned: int
    flagged: int
    total: int
    filter: str = ""

    @classmethod
    def of(cls, shown: Sequence[DatasetItem], total: int, filter: str) -> ShownCount:  # noqa: A002 - what it is
        return cls(len(shown), sum(1 for it in shown if it.has_caption), sum(1 for it in shown if it.flags), total, filter)


def describe_filter(mode_label: str, search: str, tag: str) -> str:
    """The grid's filter in words, for "2 of 30 images (…)": "Flagged, search “circle”, tag “blue”"; "" for none.
    ``mode_label`` is the Show filter's entry ("" for All images)."""
    parts = [mode_label] if mode_label else []
    if search.strip():
        parts.append(f"search “{search.strip()}”")
    if tag.strip():
        parts.append(f"tag “{tag.strip()}”")
    return ", ".join(parts)


def strip_text(s: ds.DatasetSummary, loading: bool, view: ShownCount | None = None) -> str:
    """The one-line summary under the grid. Its counts follow the grid's filter (``view``): "2 of 30 images (search
    “circle”) · 2 captioned · …", or "No image matches …" when none does; steps per epoch are the training's (all)."""
    more = " · reading images…" if loading else ""
    steps = f"{plural(s.steps_per_epoch, 'step')} per epoch"
    if view is not None and view.filter:
        if not view.shown:
            return f"No image matches the filter ({view.filter}) of {plural(view.total, 'image')} · {steps}{more}"
        return (f"{view.shown} of {plural(view.total, 'image')} ({view.filter}) · {view.captioned} captioned · "
                f"{view.flagged} flagged · {steps}{more}")
    return f"{plural(s.image_count, 'image')} · {s.captioned_count} captioned · {s.flagged_count} flagged · {steps}{more}"


def edit_bytes(edit: CaptionEdit) -> dict[Path, bytes | None]:
    """What each caption file of an applied edit holds now."""
    return {ch.caption_path: ch.new for ch in edit.changes}


def plan_and_write(
    items: Sequence[DatasetItem], op: Callable[[str], str], description: str, report: Report | None = None
) -> tuple[CaptionEdit | None, str | None]:
    """Read the captions, run ``op`` on each and write the changed ones, all or nothing (any thread).

    Returns ``(edit, None)``, or ``(None, why)`` when a caption could not be read or written (then every
    caption is as it was). ``report(phase, done, total)`` follows the reading and the writing.
    """

    def counted() -> Iterator[DatasetItem]:
        for n, it in enumerate(items, 1):
            yield it
            if report is not None:
                report("reading", n, len(items))

    try:
        edit = ds.plan_edit(counted(), op, description)
    except OSError as e:
        return None, f"a caption could not be read ({e})"
    try:
        edit.apply(None if report is None else lambda n: report("writing", n, edit.count))
    except OSError as e:
        return None, f"a caption could not be written ({e})"
    return edit, None



def without_included(excluded: Sequence[str], added: Sequence[str | Path]) -> list[str]:
    """``dataset.exclude`` less the images (or images under the folders) the user adds again."""
    roots = [path_key(p) for p in added]
    return [
        e for e in excluded
        if not any(path_key(e) == r or path_key(e).startswith(r.rstrip("/") + "/") for r in roots)
    ]  # fmt: skip
