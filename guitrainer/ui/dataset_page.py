"""Dataset page: drop images and folders, see them as a thumbnail grid, edit captions and tags.

The page owns the list of imported images (a :class:`DatasetModel`) and keeps ``dataset.folders``
in the config in step with it: every folder that directly holds imported images is listed, with its
repeats (editable in the folders table). Loading a config (preset, file) that names other folders
re-reads them, non-recursively, as training does.

Nothing slow runs on the GUI thread: finding files, reading headers and captions happens in a
:class:`ScanWorker` thread that hands rows over in batches; thumbnails come from a thread pool; the
summary (buckets, steps, tag counts) is computed in slices of a few ms (:class:`SummaryBuilder`). Removing images from the dataset never deletes files; "Delete files…" asks first
and moves them to the trash.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import (
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QSize,
    Qt,
    QThread,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QAction, QDragEnterEvent, QDragMoveEvent, QDropEvent, QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.config import DatasetFolder
from guitrainer.core import dataset as ds
from guitrainer.core.dataset import CaptionEdit, DatasetItem, Flag
from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.caption_editor import CaptionEditCommand, CaptionEditor, CaptionJobRunner, Report
from guitrainer.ui.captioning import CaptioningPanel
from guitrainer.ui.dataset_model import DatasetFilterProxy, DatasetModel, ItemRole, ThumbnailDelegate
from guitrainer.ui.drops import local_paths
from guitrainer.ui.folder_table import FolderTable
from guitrainer.ui.pages import Page
from guitrainer.ui.regularization_panel import RegularizationPanel
from guitrainer.ui.tag_tools import TagToolsPanel
from guitrainer.ui.thumbnails import GRID_SIZE, ThumbnailLoader

log = logging.getLogger(__name__)

IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.bmp *.PNG *.JPG *.JPEG *.WEBP *.BMP)"
_SUMMARY_KEYS = {
    "dataset.resolution",
    "dataset.bucketing",
    "dataset.min_bucket_resolution",
    "dataset.max_bucket_resolution",
    "dataset.bucket_step",
    "schedule.batch_size",
}


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
        parts = [f"Added {self.added} image{'s' if self.added != 1 else ''}."]
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
                f"Only the images you dropped are trained: the other {more} image{'s' if more != 1 else ''} "
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


class ScanWorker(QObject):
    """Finds the images (directory listing), then reads captions and image headers (lives in a QThread).

    ``collected`` reports what was found, refused and already known; rows follow in batches. ``known``
    holds :func:`ds.file_key` of every image in (or on its way into) the dataset; it is shared with the
    page and other workers and updated under ``lock``, so two drops of the same files add them once.
    """

    collected = Signal(object)  # ds.Collected
    partial_folders = Signal(object)  # list[(folder, images on disk that were not dropped)]
    batch_loaded = Signal(object)  # list[DatasetItem]
    finished = Signal()

    def __init__(
        self,
        requests: Sequence[CollectRequest],
        caption_extension: str,
        resolution: int,
        known: set,
        lock: threading.Lock,
    ):
        super().__init__()
        self.requests = list(requests)
        self.caption_extension = caption_extension
        self.resolution = resolution
        self.known = known
        self.lock = lock
        self._stop = threading.Event()

    def cancel(self) -> None:
        self._stop.set()

    def _collect(self) -> ds.Collected:
        out = ds.Collected()
        with self.lock:
            seen = set(self.known)
        for req in self.requests:
            col = ds.collect(
                req.paths, self.caption_extension, seen, recursive=req.recursive, repeats=req.repeats
            )
            if req.exclude:
                col.candidates = [c for c in col.candidates if ds.normalized(c.path) not in req.exclude]
            keys = [ds.file_key(c.path) for c in col.candidates]
            with self.lock:  # another drop may have taken some of these files meanwhile
                for c, key in zip(col.candidates, keys):
                    if key in self.known:
                        out.duplicates.append((c.path, "already in the dataset"))
                    else:
                        self.known.add(key)
                        out.candidates.append(c)
            seen.update(keys)
            out.rejected += col.rejected
            out.duplicates += col.duplicates
        return out

    def _partial_folders(self) -> list[tuple[str, list[str]]]:
        """Folders of loose dropped images that hold other images too: (folder, those other images)."""
        loose = {p.parent for req in self.requests for p in req.paths if p.is_file()}
        out = []
        with self.lock:  # after _collect: every image of this drop and of earlier ones is known
            known = set(self.known)
        for folder in sorted(loose):
            on_disk = ds.collect([folder], self.caption_extension, recursive=False).candidates
            others = [ds.normalized(c.path) for c in on_disk if ds.file_key(c.path) not in known]
            if others:
                out.append((str(folder), others))
        return out

    @Slot()
    def work(self) -> None:
        batch: list[DatasetItem] = []
        last = time.monotonic()
        first = True
        try:
            col = self._collect()
            self.partial_folders.emit(self._partial_folders())
            self.collected.emit(col)
            rows = ds.iter_items(col.candidates, self.caption_extension, self.resolution, self._stop.is_set)
            for item in rows:
                batch.append(item)
                now = time.monotonic()
                # the first rows go out at once (first screen fast), then in batches (few model resets)
                if (first and len(batch) >= 24) or len(batch) >= 200 or now - last > 0.1:
                    self.batch_loaded.emit(batch)
                    batch, last, first = [], now, False
            if batch:
                self.batch_loaded.emit(batch)
        except Exception:
            log.exception("scanning failed")
        finally:
            self.finished.emit()


class SummaryPanel(QLabel):
    """Counts, resolution histogram, buckets with counts and steps per epoch, as a small HTML table."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.summary: ds.DatasetSummary | None = None

    def show_summary(self, s: ds.DatasetSummary, batch_size: int, bucketing: bool) -> None:
        self.summary = s

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
        self.setText(
            f"<p><b>{s.image_count}</b> images · <b>{s.captioned_count}</b> captioned · "
            f"<b>{s.flagged_count}</b> flagged<br>"
            f"<b>{s.images_with_repeats}</b> images per epoch with repeats · batch {batch_size} → "
            f"<b>{s.steps_per_epoch}</b> steps per epoch</p>"
            f"<p><b>Shorter side</b></p>{hist}"
            f"<p><b>{'Aspect buckets' if bucketing else 'Training size (no buckets)'}</b></p>{buckets}"
        )


SUMMARY_SLICE = 200  # images per GUI-thread slice of the summary (a few ms each)
SUMMARY_BUDGET_S = 0.008  # GUI-thread time the summary may take per event-loop turn


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


def _edit_bytes(edit: CaptionEdit) -> dict[Path, bytes | None]:
    """What each caption file of an applied edit holds now."""
    return {ch.caption_path: ch.new for ch in edit.changes}


def _plan_and_write(
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


class DatasetPage(Page):
    """The dataset workspace. The main window forwards drops to :meth:`add_paths`."""

    title = "Dataset"
    subtitle = "Your images and their captions. Drop folders or images anywhere on the window to add them."

    import_finished = Signal(object)  # ImportReport, when its images are all in the grid
    items_changed = Signal()  # images added or removed
    status_changed = Signal(str)
    #: once per :meth:`apply_tag_operation`, when it is done: its CaptionEdit, or None (no images, failed)
    tag_operation_finished = Signal(object)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(binding, parent)
        self.undo_stack = QUndoStack(self)
        # bulk caption writes (tag operations, their undo / redo) run here, off the GUI thread
        self.caption_jobs = CaptionJobRunner(self.undo_stack, self)
        self._when_idle: list[Callable[[], None]] = []  # waits for caption_jobs to finish
        self.loader = ThumbnailLoader(self)
        self.model = DatasetModel(self.loader, self)
        self.proxy = DatasetFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        self._known: set = set()  # ds.file_key of every image in the dataset or being imported
        self._known_lock = threading.Lock()  # scan workers add to _known under it
        self._workers: list[tuple[QThread, ScanWorker, ImportReport]] = []
        self._syncing = False
        self.last_report: ImportReport | None = None
        self.last_status = ""

        self._build_toolbar()
        self._build_folders()
        self._build_workspace()
        self.status = QLabel(self)
        self.status.setObjectName("dataset_status")
        self.status.setWordWrap(True)
        self.body.addWidget(self.status)
        # no self.finish(): the grid, not a spacer, takes the spare height

        self._summary_timer = QTimer(self)
        self._summary_timer.setSingleShot(True)
        self._summary_timer.setInterval(150)
        self._summary_timer.timeout.connect(self._start_summary)
        self._summary_builder = SummaryBuilder()
        self._summary_run: Iterator[tuple[ds.DatasetSummary, list[tuple[str, int]]] | None] | None = None
        self._summary_running_params = SummaryParams()
        self._summary_step_timer = QTimer(self)  # drives the slices of a running summary
        self._summary_step_timer.setInterval(0)
        self._summary_step_timer.timeout.connect(self._summary_step)
        self._shown_frequencies: list[tuple[str, int]] | None = None
        self._build_actions()
        self.editor.runner = self.caption_jobs
        self.caption_jobs.busy_changed.connect(self._on_caption_jobs_busy)
        self.caption_jobs.progress.connect(self._show_progress)

        self.setAcceptDrops(True)
        self.viewport().setAcceptDrops(True)
        binding.changed.connect(self._on_config_changed)
        binding.replaced.connect(self._reconcile_from_config)
        self._update_summary()
        if binding.get("dataset.folders"):
            self._reconcile_from_config()

    # ------------------------------------------------------------------ layout
    def _build_toolbar(self) -> None:
        bar = QHBoxLayout()
        self.add_folder_button = QPushButton("Add folder…", self)
        self.add_folder_button.clicked.connect(self.add_folder_dialog)
        self.add_images_button = QPushButton("Add images…", self)
        self.add_images_button.clicked.connect(self.add_images_dialog)
        self.remove_button = QPushButton("Remove from dataset", self)
        self.remove_button.setToolTip("Take the selected images out of the list. Files on disk are not touched.")
        self.remove_button.clicked.connect(self.remove_selected)
        self.delete_button = QToolButton(self)
        self.delete_button.setText("Delete files…")
        self.delete_button.setToolTip("Move the selected images and their captions to the trash (asks first).")
        self.delete_button.clicked.connect(lambda: self.delete_selected_files())
        for w in (self.add_folder_button, self.add_images_button, self.remove_button, self.delete_button):
            bar.addWidget(w)
        bar.addStretch(1)
        bar.addWidget(QLabel("Show", self))
        self.filter_combo = QComboBox(self)
        self.filter_combo.setObjectName("dataset_filter")
        for mode, label in (("all", "All images"), ("captioned", "Captioned"), ("uncaptioned", "Uncaptioned"), ("flagged", "Flagged")):
            self.filter_combo.addItem(label, mode)
        self.filter_combo.currentIndexChanged.connect(lambda _i: self.proxy.set_mode(self.filter_combo.currentData()))
        bar.addWidget(self.filter_combo)
        self.search = QLineEdit(self)
        self.search.setObjectName("dataset_search")
        self.search.setPlaceholderText("Search captions and names…")
        self.search.setClearButtonEnabled(True)
        self.search.setMinimumWidth(200)
        self.search.textChanged.connect(self.proxy.set_text)
        bar.addWidget(self.search)
        self.tag_chip = QToolButton(self)
        self.tag_chip.setVisible(False)
        self.tag_chip.clicked.connect(lambda: self.filter_by_tag(""))
        bar.addWidget(self.tag_chip)
        self.body.addLayout(bar)

    def _build_folders(self) -> None:
        self.folders_table = FolderTable("Remove this folder from the dataset (files stay on disk)", parent=self)
        self.folders_table.setObjectName("folders_table")
        self.folders_table.repeats_changed.connect(self.set_folder_repeats)
        self.folders_table.remove_requested.connect(self.remove_folder)
        self.empty_hint = QLabel(
            "<div style='font-size:15px'><b>Drop image folders or images here</b></div>"
            "<div>PNG, JPEG, WebP and BMP. Captions are the .txt files beside the images. "
            "A folder named like <code>10_mychar</code> repeats its images 10 times per epoch.</div>",
            self,
        )
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setMinimumHeight(90)
        self.empty_hint.setFrameShape(QFrame.Shape.StyledPanel)
        self.empty_hint.setStyleSheet("QLabel { border: 2px dashed palette(mid); border-radius: 8px; padding: 12px; }")
        self.body.addWidget(self.empty_hint)
        self.body.addWidget(self.folders_table)

    def _build_workspace(self) -> None:
        self.grid = QListView(self)
        self.grid.setObjectName("dataset_grid")
        self.grid.setViewMode(QListView.ViewMode.IconMode)
        self.grid.setMovement(QListView.Movement.Static)
        self.grid.setResizeMode(QListView.ResizeMode.Adjust)
        self.grid.setUniformItemSizes(True)
        self.grid.setLayoutMode(QListView.LayoutMode.Batched)
        self.grid.setBatchSize(300)
        self.grid.setSpacing(2)
        self.grid.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.grid.setDragEnabled(False)
        self.grid.setDragDropMode(QAbstractItemView.DragDropMode.NoDragDrop)
        self.grid.setAcceptDrops(False)
        self.grid.viewport().setAcceptDrops(False)
        self.grid.setMouseTracking(True)
        self.grid.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.grid.verticalScrollBar().setSingleStep(24)
        self.delegate = ThumbnailDelegate(GRID_SIZE, self.grid)
        self.grid.setItemDelegate(self.delegate)
        self.grid.setGridSize(self.delegate.sizeHint(None, QModelIndex()) + QSize(4, 4))  # type: ignore[arg-type]
        self.grid.setModel(self.proxy)
        self.grid.selectionModel().currentChanged.connect(self._on_current_changed)
        self.grid.selectionModel().selectionChanged.connect(lambda *_: self._update_selection_label())
        self.grid.setMinimumWidth(360)

        left = QWidget(self)
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.grid, 1)
        self.strip = QLabel(left)
        self.strip.setObjectName("summary_strip")
        ll.addWidget(self.strip)

        self.editor = CaptionEditor(self.undo_stack, self.loader, self._on_captions_changed, self)
        self.editor.status_message.connect(self.show_status)
        self.editor.caption_saved.connect(self._on_caption_saved)
        self.editor.next_requested.connect(lambda: self.step_current(1))
        self.editor.previous_requested.connect(lambda: self.step_current(-1))
        self.tag_tools = TagToolsPanel(self)
        self.tag_tools.operation_requested.connect(self.apply_tag_operation)
        self.tag_tools.tag_clicked.connect(self.filter_by_tag)
        self.captioning = CaptioningPanel(self)
        self.captioning.start_requested.connect(self._start_captioning)
        self.captioning.captioned.connect(self._on_auto_caption)
        self.captioning.run_finished.connect(self._on_captioning_finished)
        self.summary = SummaryPanel(self)
        summary_page = QWidget(self)
        sl = QVBoxLayout(summary_page)
        sl.addWidget(self.summary)
        sl.addStretch(1)
        options = build_form(
            self.binding,
            "dataset",
            [
                "resolution", "bucketing", "min_bucket_resolution", "max_bucket_resolution", "bucket_step",
                "caption_extension", "trigger_word", "shuffle_captions", "keep_tokens", "caption_dropout", "flip_augment",
            ],
            title="How images and captions are fed to training",
            parent=self,
        )  # fmt: skip
        options_page = QWidget(self)
        ol = QVBoxLayout(options_page)
        ol.addWidget(options)
        ol.addStretch(1)

        self.tabs = QTabWidget(self)
        self.tabs.setObjectName("dataset_tabs")
        self.tabs.addTab(self.editor, "Caption")
        self.tabs.addTab(self.tag_tools, "Tags")
        self.tabs.addTab(self.captioning, "Auto-caption")
        self.tabs.addTab(summary_page, "Summary")
        self.tabs.addTab(options_page, "Options")
        self.regularization = RegularizationPanel(self.binding, self.loader, self)  # class images (issue 11)
        self.tabs.addTab(self.regularization, "Regularization")

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setMinimumHeight(560)
        self.body.addWidget(self.splitter, 1)

    def _build_actions(self) -> None:
        def action(text: str, keys: list[QKeySequence], slot: Callable[[], object]) -> QAction:
            a = QAction(text, self)
            a.setShortcuts(keys)
            a.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            a.triggered.connect(slot)
            self.addAction(a)
            return a

        self.next_action = action(
            "Next image", [QKeySequence("Alt+Right"), QKeySequence("Ctrl+PgDown")], lambda: self.step_current(1)
        )
        self.previous_action = action(
            "Previous image", [QKeySequence("Alt+Left"), QKeySequence("Ctrl+PgUp")], lambda: self.step_current(-1)
        )
        self.focus_caption_action = action("Edit caption", [QKeySequence("Ctrl+E")], self._focus_caption)
        self.undo_action = action("Undo caption change", [QKeySequence(QKeySequence.StandardKey.Undo)], self.editor.undo)
        self.redo_action = action("Redo caption change", [QKeySequence(QKeySequence.StandardKey.Redo)], self.editor.redo)

    # ------------------------------------------------------------------ public API
    @property
    def items(self) -> list[DatasetItem]:
        return self.model.items

    def is_loading(self) -> bool:
        """True while images are still being read in the background."""
        return bool(self._workers)

    def add_paths(self, paths: Sequence[str | Path]) -> ImportReport:
        """Import folders (searched fully) and image files; a worker thread finds and reads them.

        Returns at once. The report is filled in when the files are found (the status line then says
        what was found); ``import_finished(report)`` follows when every row is in the grid.
        """
        report = ImportReport()
        self.last_report = report
        self.show_status("Looking for images…")
        self._include(paths)
        self._start_scan([CollectRequest(tuple(Path(p) for p in paths))], report)
        return report

    # ------------------------------------------------------------------ left-out images (dataset.exclude)
    def _excluded(self) -> list[str]:
        return list(self.binding.get("dataset.exclude"))

    def _set_excluded(self, paths: list[str]) -> None:
        if paths != self._excluded():
            self._syncing = True
            try:
                self.binding.set("dataset.exclude", paths)
            finally:
                self._syncing = False

    def _exclude(self, paths: Iterable[str]) -> None:
        current = self._excluded()
        self._set_excluded(current + sorted(set(paths) - set(current)))

    def _include(self, paths: Sequence[str | Path]) -> None:
        """Images (or folders of images) the user adds are no longer left out of training."""
        roots = [ds.normalized(p) for p in paths]
        keep = [
            e for e in self._excluded()
            if not any(ds.normalized(e) == r or ds.normalized(e).startswith(r.rstrip("/") + "/") for r in roots)
        ]
        self._set_excluded(keep)

    def _on_partial_folders(self, report: ImportReport, found: list[tuple[str, list[str]]]) -> None:
        report.partial_folders = [(folder, len(others)) for folder, others in found]
        self._exclude(p for _, others in found for p in others)

    def add_folder_dialog(self) -> ImportReport | None:
        """File > Add folder: choose a folder and import it."""
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of training images")
        return self.add_paths([folder]) if folder else None

    def add_images_dialog(self) -> ImportReport | None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add training images", "", IMAGE_FILTER)
        return self.add_paths(files) if files else None

    def selected_items(self) -> list[DatasetItem]:
        rows = sorted(self.proxy.mapToSource(i).row() for i in self.grid.selectionModel().selectedIndexes())
        return [self.model.item(r) for r in rows]

    def visible_items(self) -> list[DatasetItem]:
        return [self.model.item(self.proxy.mapToSource(self.proxy.index(r, 0)).row()) for r in range(self.proxy.rowCount())]

    def select_rows(self, rows: Sequence[int]) -> None:
        """Select grid rows (in the filtered order); the first becomes the current one."""
        sm = self.grid.selectionModel()
        sm.clearSelection()
        for n, r in enumerate(rows):
            idx = self.proxy.index(r, 0)
            flags = QItemSelectionModel.SelectionFlag.Select
            if n == 0:
                sm.setCurrentIndex(idx, flags)
            else:
                sm.select(idx, flags)

    def step_current(self, delta: int) -> None:
        """Next / previous image in the grid (saves the caption first)."""
        n = self.proxy.rowCount()
        if not n:
            return
        cur = self.grid.currentIndex()
        row = 0 if not cur.isValid() else max(0, min(n - 1, cur.row() + delta))
        idx = self.proxy.index(row, 0)
        self.grid.selectionModel().setCurrentIndex(idx, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        self.grid.scrollTo(idx)

    def apply_tag_operation(self, description: str, op: Callable[[str], str], scope: str = "selection") -> CaptionEdit | None:
        """Run a tag operation on the selection or all images as ONE undo step; reports how many changed.

        An edit of ``caption_jobs.min_captions`` images or more is read, changed and written in a worker
        thread: this returns None at once, the status line shows the progress, and the tag tools, caption
        box and undo / redo are disabled until it is done. A smaller one is done before this returns (and
        returns the edit). Either way ``tag_operation_finished(edit or None)`` says when it is done.
        """
        items = self.selected_items() if scope == "selection" else list(self.items)
        if not items:
            self.show_status("Select images first, or choose “All images”.")
            self.tag_operation_finished.emit(None)
            return None
        self.editor.flush()
        if self.caption_jobs.in_background(len(items)):
            self.caption_jobs.submit(
                description,
                lambda report: _plan_and_write(items, op, description, report),
                lambda result: self._tag_operation_done(description, *result),
                lambda message: self._tag_operation_done(description, None, f"failed: {message}"),
            )
            return None
        return self._tag_operation_done(description, *_plan_and_write(items, op, description))

    def _tag_operation_done(
        self, description: str, edit: CaptionEdit | None, error: str | None
    ) -> CaptionEdit | None:
        """The edit is planned and written (or failed with ``error``): push it, refresh, report."""
        if edit is None or error is not None:
            self.show_status(f"{description}: nothing changed, {error}.")
            self.tag_operation_finished.emit(None)
            return None
        note = f" {edit.skipped_not_utf8} not UTF-8, left unchanged." if edit.skipped_not_utf8 else ""
        if not edit.count:
            self.show_status(f"{description}: no caption needed a change.{note}")
        else:
            self.undo_stack.push(self._command(edit))
            self._on_captions_changed([ch.caption_path for ch in edit.changes], _edit_bytes(edit))
            n = edit.count
            plural = "s" if n != 1 else ""
            self.show_status(f"{description}: changed {n} caption{plural} (Ctrl+Z undoes it).{note}")
        self.tag_operation_finished.emit(edit)
        return edit

    def _command(self, edit: CaptionEdit) -> CaptionEditCommand:
        """The undo step of an edit already written; its undo / redo run as caption jobs when big."""
        return CaptionEditCommand(edit, self._on_captions_changed, self.show_status, self.caption_jobs)

    def _on_caption_jobs_busy(self, busy: bool) -> None:
        """Nothing else edits captions while a bulk edit (or its undo / redo) is being written."""
        self.editor.set_locked(busy)
        self.tag_tools.set_busy(busy)
        self.undo_action.setEnabled(not busy)
        self.redo_action.setEnabled(not busy)
        if not busy:
            waiting, self._when_idle = self._when_idle, []
            for fn in waiting:
                fn()

    def _show_progress(self, text: str) -> None:
        """Progress of a caption job: the status line (and window) show it; not logged, unlike show_status."""
        self.status.setText(text)
        self.status.setToolTip("")
        self.status_changed.emit(text)

    def filter_by_tag(self, tag: str) -> None:
        self.proxy.set_tag(tag)
        self.tag_chip.setVisible(bool(tag))
        self.tag_chip.setText(f"tag: {tag}  ✕")
        self.tag_chip.setToolTip("Show all images again")

    def remove_selected(self) -> int:
        """Take the selected images out of the dataset (files stay on disk)."""
        items = self.selected_items()
        if not items:
            return 0
        self.editor.flush()
        if self.editor.item in items:
            self.editor.set_item(None)
        for it in items:
            self._known.discard(ds.file_key(it.image_path))
        n = self.model.remove_items(items)
        folders = {it.folder for it in self.items}
        self._exclude(ds.normalized(it.image_path) for it in items if it.folder in folders)
        self._after_items_changed()
        self.show_status(f"Removed {n} image{'s' if n != 1 else ''} from training; no files were deleted.")
        return n

    def delete_selected_files(self, confirm: bool = True) -> int:
        """Move the selected images and their captions to the trash, after a confirmation."""
        items = self.selected_items()
        if not items:
            return 0
        if confirm:
            answer = QMessageBox.question(
                self,
                "Delete files",
                f"Move {len(items)} image file{'s' if len(items) != 1 else ''} and their captions to the trash?\n"
                "This changes the folders on disk.",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                QMessageBox.StandardButton.Cancel,
            )
            if answer != QMessageBox.StandardButton.Yes:
                return 0
        from PySide6.QtCore import QFile

        self.editor.flush()
        if self.editor.item in items:
            self.editor.set_item(None)
        gone, failed = [], []
        for it in items:
            ok = QFile.moveToTrash(str(it.image_path))
            if isinstance(ok, tuple):
                ok = ok[0]
            if ok:
                gone.append(it)
                if it.caption_path.exists():
                    QFile.moveToTrash(str(it.caption_path))
            else:
                failed.append(it.name)
        for it in gone:
            self._known.discard(ds.file_key(it.image_path))
        self.model.remove_items(gone)
        self._after_items_changed()
        msg = f"Moved {len(gone)} image{'s' if len(gone) != 1 else ''} to the trash."
        if failed:
            msg += f" Could not move {len(failed)} (e.g. {failed[0]})."
        self.show_status(msg)
        return len(gone)

    def show_status(self, text: str, details: str = "") -> None:
        self.last_status = text
        self.status.setText(text)
        self.status.setToolTip(details)
        self.status_changed.emit(text)
        log.info("%s", text)

    def shutdown(self) -> None:
        """Stop background work (window closing); captions being written are written to the end."""
        self.caption_jobs.wait()
        self.editor.flush()
        for thread, worker, _ in list(self._workers):
            worker.cancel()
            thread.quit()
            thread.wait(5000)
        self.captioning.shutdown()
        self.regularization.shutdown()
        self.loader.shutdown()

    # ------------------------------------------------------------------ drag and drop
    def event(self, e: QEvent) -> bool:
        # QAbstractScrollArea only handles drags that arrive at its viewport; take them at the page too.
        if isinstance(e, QDragEnterEvent):
            self.dragEnterEvent(e)
            return True
        if isinstance(e, QDragMoveEvent):
            self.dragMoveEvent(e)
            return True
        if isinstance(e, QDropEvent) and e.type() == QEvent.Type.Drop:
            self.dropEvent(e)
            return True
        return super().event(e)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if local_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if local_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = local_paths(event)
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.add_paths(paths)

    # ------------------------------------------------------------------ scanning
    def _start_scan(self, requests: list[CollectRequest], report: ImportReport) -> None:
        worker = ScanWorker(
            requests,
            self.binding.get("dataset.caption_extension"),
            self.binding.get("dataset.resolution"),
            self._known,
            self._known_lock,
        )
        thread = QThread(self)
        worker.moveToThread(thread)
        thread.started.connect(worker.work)
        worker.partial_folders.connect(lambda found: self._on_partial_folders(report, found))
        worker.collected.connect(lambda col: self._on_collected(report, col))
        worker.batch_loaded.connect(self._on_batch)
        worker.finished.connect(thread.quit)
        entry = (thread, worker, report)
        thread.finished.connect(lambda: self._on_scan_done(entry))
        self._workers.append(entry)
        self.empty_hint.setVisible(False)
        thread.start()

    def _on_collected(self, report: ImportReport, col: ds.Collected) -> None:
        report.added = len(col.candidates)
        report.rejected = [(str(p), why) for p, why in col.rejected]
        report.duplicates = [(str(p), why) for p, why in col.duplicates]
        if report is self.last_report:
            reading = " Reading images…" if col.candidates else ""
            self.show_status(report.message() + reading, report.details())

    def _on_batch(self, items: list[DatasetItem]) -> None:
        had = self.model.rowCount()
        self.model.add_items(items)
        if not had and self.proxy.rowCount() and not self.grid.currentIndex().isValid():
            self.grid.selectionModel().setCurrentIndex(self.proxy.index(0, 0), QItemSelectionModel.SelectionFlag.NoUpdate)
        self._schedule_summary()

    def _on_scan_done(self, entry: tuple[QThread, ScanWorker, ImportReport]) -> None:
        thread, worker, report = entry
        if entry in self._workers:
            self._workers.remove(entry)
        worker.deleteLater()
        thread.deleteLater()
        self._after_items_changed()
        if not self._workers:
            self.show_status(report.message(), report.details())
        self.import_finished.emit(report)

    # ------------------------------------------------------------------ config sync
    def folder_list(self) -> list[DatasetFolder]:
        """The folders of the imported images, in import order, with their repeats."""
        seen: dict[Path, int] = {}
        for it in self.items:
            seen.setdefault(it.folder, it.repeats)
        return [DatasetFolder(path=str(p), repeats=r) for p, r in seen.items()]

    def _after_items_changed(self) -> None:
        self._sync_config()
        self._rebuild_folders_table()
        self.empty_hint.setVisible(not self.items and not self._workers)
        self._schedule_summary()
        self.items_changed.emit()

    def _sync_config(self) -> None:
        folders = self.folder_list()
        current = self.binding.get("dataset.folders")
        if [(f.path, f.repeats) for f in current] == [(f.path, f.repeats) for f in folders]:
            return
        self._syncing = True
        try:
            self.binding.set("dataset.folders", folders)
        finally:
            self._syncing = False

    def _rebuild_folders_table(self) -> None:
        folders = self.folder_list()
        counts: dict[str, int] = {}
        for it in self.items:
            counts[str(it.folder)] = counts.get(str(it.folder), 0) + 1
        self.folders_table.set_folders(folders, counts)
        self.folders_table.setVisible(bool(folders))

    def set_folder_repeats(self, folder: str, repeats: int) -> None:
        for it in self.items:
            if str(it.folder) == folder:
                it.repeats = repeats
        self._sync_config()
        self._schedule_summary()

    def remove_folder(self, folder: str) -> int:
        items = [it for it in self.items if str(it.folder) == folder]
        if self.editor.item in items:
            self.editor.set_item(None)
        for it in items:
            self._known.discard(ds.file_key(it.image_path))
        n = self.model.remove_items(items)
        self._include([folder])  # the folder is gone: its left-out images need no entry any more
        self._after_items_changed()
        self.show_status(f"Removed the folder {Path(folder).name} ({n} images) from the dataset; no files were deleted.")
        return n

    def _on_config_changed(self, path: str) -> None:
        if path == "dataset.folders" and not self._syncing:
            self._reconcile_from_config()
        elif path == "dataset.exclude" and not self._syncing:
            self._reconcile_from_config(rescan=True)  # edited by hand: drop and bring back images to match
        elif path == "dataset.caption_extension":
            self._reload_captions()
        elif path == "dataset.resolution":
            res = self.binding.get(path)
            for it in self.items:
                if it.width:
                    it.flags -= {Flag.SMALL, Flag.LARGE}
                    it.flags |= ds.size_flags(it.width, it.height, res)
            self.model.refresh_all()
            self._schedule_summary()
        elif path in _SUMMARY_KEYS:
            self._schedule_summary()

    def _reconcile_from_config(self, rescan: bool = False) -> None:
        """Make the grid match ``dataset.folders`` less ``dataset.exclude`` (a preset or file was loaded, or
        another editor changed them). ``rescan`` lists folders already shown again, for re-included images."""
        wanted = {str(Path(f.path).expanduser()): f.repeats for f in self.binding.get("dataset.folders")}
        have = set() if rescan else {f.path for f in self.folder_list()}
        left_out = frozenset(ds.normalized(p) for p in self._excluded())
        gone = [it for it in self.items if str(it.folder) not in wanted or ds.normalized(it.image_path) in left_out]
        if gone:
            if self.editor.item in gone:
                self.editor.set_item(None)
            for it in gone:
                self._known.discard(ds.file_key(it.image_path))
            self.model.remove_items(gone)
        for it in self.items:
            it.repeats = wanted.get(str(it.folder), it.repeats)
        requests = [
            CollectRequest((Path(folder),), recursive=False, repeats=reps, exclude=left_out)
            for folder, reps in wanted.items()
            if folder not in have
        ]
        if requests:
            self._start_scan(requests, ImportReport())
        self._rebuild_folders_table()
        self._schedule_summary()
        self.empty_hint.setVisible(not self.items and not self._workers)

    def _reload_captions(self) -> None:
        ext = self.binding.get("dataset.caption_extension")
        self.editor.flush()
        for it in self.items:
            it.caption_path = ds.caption_path_for(it.image_path, ext)
            it.reload_caption()
        self.model.refresh_all()
        cur = self.editor.item
        if cur is not None:
            self.editor.set_item(None)
            self.editor.set_item(cur)
        self._schedule_summary()

    # ------------------------------------------------------------------ captions
    def _on_current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        item = current.data(ItemRole) if current.isValid() else None
        self.editor.set_item(item)

    def _focus_caption(self) -> None:
        self.tabs.setCurrentWidget(self.editor)
        if self.editor.item is None:
            self.step_current(0)
        self.editor.focus_caption()

    def _on_captions_changed(
        self, paths: list[Path], written: Mapping[Path, bytes | None] | None = None
    ) -> None:
        """Caption files changed on disk; ``written``: their bytes now (then the files are not read again)."""
        if written is None:
            touched = self.model.refresh_paths(paths)
        else:  # a bulk edit: decode the known bytes, one repaint for all (2,000 captions: ~10 ms, not ~100)
            touched = []
            for it in self.items:
                if it.caption_path in written:
                    it.set_caption(ds.decode_caption(written[it.caption_path]))
                    touched.append(it)
            if len(touched) > 50:
                self.model.refresh_all()
            else:
                for it in touched:
                    self.model.refresh_item(it)
        if self.editor.item in touched:
            self.editor.reload()
        if self.proxy.is_filtering():
            self.proxy.invalidate()
        self._schedule_summary()

    def _on_caption_saved(self, item: DatasetItem) -> None:
        self.model.refresh_item(item)
        self._schedule_summary()

    def _start_captioning(self, scope: str) -> None:
        if self.caption_jobs.busy:  # it would write the captions being edited
            self.show_status("Captions are being written; start auto-captioning when that is done.")
            return
        items = self.selected_items() if scope == "selection" else list(self.items)
        self.editor.flush()
        self.captioning.start([it.image_path for it in items], self.binding.get("dataset.caption_extension"))

    def _on_auto_caption(self, image_path: str, _text: str) -> None:
        row = self.model.row_of(image_path)
        if row is not None:
            item = self.model.item(row)
            self._on_captions_changed([item.caption_path])

    def _on_captioning_finished(self, result) -> None:
        if not result.changes:
            return
        if self.caption_jobs.busy:  # an undo / redo in flight must not lose its place on the stack
            self._when_idle.append(lambda: self._on_captioning_finished(result))
            return
        edit = CaptionEdit(f"Auto-caption {len(result.changes)} images", list(result.changes))
        self.undo_stack.push(self._command(edit))
        self.show_status(f"Auto-caption wrote {edit.count} captions (Ctrl+Z undoes all of them).")

    # ------------------------------------------------------------------ summary
    def _schedule_summary(self) -> None:
        self._summary_timer.start()

    def _summary_params(self) -> SummaryParams:
        g = self.binding.get
        return SummaryParams(
            resolution=int(g("dataset.resolution")),
            bucketing=bool(g("dataset.bucketing")),
            min_side=int(g("dataset.min_bucket_resolution")),
            max_side=int(g("dataset.max_bucket_resolution")),
            step=int(g("dataset.bucket_step")),
            batch_size=int(g("schedule.batch_size")),
        )

    def _update_summary(self) -> None:
        """Recompute the summary now, in one go."""
        self._summary_step_timer.stop()
        self._summary_run = None
        params = self._summary_params()
        try:
            s, freq = self._summary_builder.compute(self.items, params)
        except ValueError as e:  # e.g. min bucket side above max while the user is typing
            self.strip.setText(f"Buckets: {e}")
            return
        self._show_summary(s, freq, params)

    def _start_summary(self) -> None:
        """Recompute the summary in slices of at most ~SUMMARY_BUDGET_S each (GUI thread stays responsive)."""
        self._summary_running_params = self._summary_params()
        self._summary_run = self._summary_builder.run(list(self.items), self._summary_running_params)
        self._summary_step()
        if self._summary_run is not None:
            self._summary_step_timer.start()

    def _summary_step(self) -> None:
        run = self._summary_run
        if run is None:
            self._summary_step_timer.stop()
            return
        t0 = time.perf_counter()
        try:
            while time.perf_counter() - t0 < SUMMARY_BUDGET_S:
                out = next(run)
                if out is not None:
                    self._summary_run = None
                    self._summary_step_timer.stop()
                    self._show_summary(*out, self._summary_running_params)
                    return
        except ValueError as e:  # e.g. min bucket side above max while the user is typing
            self._summary_run = None
            self._summary_step_timer.stop()
            self.strip.setText(f"Buckets: {e}")

    def _show_summary(self, s: ds.DatasetSummary, freq: list[tuple[str, int]], params: SummaryParams) -> None:
        self.summary.show_summary(s, params.batch_size, params.bucketing)
        loading = " · reading images…" if self._workers else ""
        self.strip.setText(
            f"{s.image_count} images · {s.captioned_count} captioned · {s.flagged_count} flagged · "
            f"{s.steps_per_epoch} steps per epoch{loading}"
        )
        if freq != self._shown_frequencies:  # refilling the tag table costs 5-40 ms for 500 tags
            self._shown_frequencies = freq
            self.tag_tools.set_frequencies(freq)
        self._update_selection_label()

    def _update_selection_label(self) -> None:
        n = len(self.grid.selectionModel().selectedIndexes())
        self.remove_button.setEnabled(n > 0)
        self.delete_button.setEnabled(n > 0)
