"""The Dataset page's widgets that hold no dataset logic: the thumbnail grid, the drop hint, the side tabs'
Summary and Options pages, and moving files to the trash (asked first)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QFile, QModelIndex, QSize, Qt
from PySide6.QtWidgets import QAbstractItemView, QFrame, QLabel, QListView, QVBoxLayout, QWidget

from guitrainer.core.dataset.scan import DatasetItem
from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.dataset.model import ThumbnailDelegate
from guitrainer.ui.dataset.thumbnails import GRID_SIZE
from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.messages import Button

DATASET_OPTIONS = (
    "resolution", "bucketing", "min_bucket_resolution", "max_bucket_resolution", "bucket_step",
    "caption_extension", "trigger_word", "shuffle_captions", "keep_tokens", "caption_dropout", "flip_augment",
)  # fmt: skip


def make_grid(parent: QWidget) -> QListView:
    """The thumbnail grid: icon mode, uniform cells, many-image friendly, no drags of its own."""
    grid = QListView(parent)
    grid.setObjectName("dataset_grid")
    grid.setViewMode(QListView.ViewMode.IconMode)
    grid.setMovement(QListView.Movement.Static)
    grid.setResizeMode(QListView.ResizeMode.Adjust)
    grid.setUniformItemSizes(True)
    grid.setLayoutMode(QListView.LayoutMode.Batched)
    grid.setBatchSize(300)
    grid.setSpacing(2)
    grid.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
    grid.setDragEnabled(False)
    grid.setDragDropMode(QAbstractItemView.DragDropMode.NoDragDrop)
    grid.setAcceptDrops(False)
    grid.viewport().setAcceptDrops(False)
    grid.setMouseTracking(True)
    grid.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
    grid.verticalScrollBar().setSingleStep(24)
    delegate = ThumbnailDelegate(GRID_SIZE, grid)
    grid.setItemDelegate(delegate)
    grid.setGridSize(delegate.sizeHint(None, QModelIndex()) + QSize(4, 4))  # type: ignore[arg-type]
    grid.setMinimumWidth(300)
    return grid


def make_empty_hint(parent: QWidget) -> QLabel:
    hint = QLabel(
        "<div style='font-size:15px'><b>Drop image folders or images here</b></div>"
        "<div>PNG, JPEG, WebP and BMP. Captions are the .txt files beside the images. "
        "A folder named like <code>10_mychar</code> repeats its images 10 times per epoch.</div>",
        parent,
    )
    hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
    hint.setWordWrap(True)
    hint.setMinimumHeight(90)
    hint.setFrameShape(QFrame.Shape.StyledPanel)
    hint.setStyleSheet("QLabel { border: 2px dashed palette(mid); border-radius: 8px; padding: 12px; }")
    return hint


def stacked(parent: QWidget, widget: QWidget) -> QWidget:
    """``widget`` at the top of a page, the spare height below it."""
    page = QWidget(parent)
    lay = QVBoxLayout(page)
    lay.addWidget(widget)
    lay.addStretch(1)
    return page


def options_form(binding: ConfigBinding, parent: QWidget) -> QWidget:
    return build_form(
        binding, "dataset", list(DATASET_OPTIONS), title="How images and captions are fed to training", parent=parent
    )


def confirm_delete(parent: QWidget, count: int) -> bool:
    answer = messages.question(
        parent,
        "Delete files",
        f"Move {count} image file{'s' if count != 1 else ''} and their captions to the trash?\n"
        "This changes the folders on disk.",
        (Button("yes"), Button("cancel")),
        default="cancel",
    )
    return answer == "yes"


def move_to_trash(items: Sequence[DatasetItem]) -> tuple[list[DatasetItem], list[str]]:
    """Move each image and its caption to the trash: (the items moved, the names that could not be)."""
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
    return gone, failed
