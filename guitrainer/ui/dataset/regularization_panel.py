"""Regularization (class) images on the Dataset page: folders, a preview strip, the class prompt and
prior loss weight, and a "Generate class images…" dialog that makes them with the base model.

The panel edits ``dataset.regularization_folders`` (drop folders on it, or Add folder…; a kohya
``N_name`` folder gets N repeats), ``dataset.class_prompt`` and ``dataset.prior_loss_weight``. Folder
contents are read with a directory listing only (no image decoding on the GUI thread); thumbnails come
from a :class:`ThumbnailLoader`'s thread pool. Generation is in ``class_images_dialog``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent, QPixmap
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.paths import path_key
from guitrainer.config import DatasetFolder, repeats_from_name
from guitrainer.core.dataset.folders import list_images, training_images
from guitrainer.core.dataset.regularization import class_usage
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding, make_editor
from guitrainer.ui.dataset.class_images_dialog import GenerateClassImagesDialog
from guitrainer.ui.dataset.folder_table import FolderTable
from guitrainer.ui.dataset.thumbnails import ThumbnailLoader
from guitrainer.ui.widgets.drops import local_paths

log = logging.getLogger(__name__)

PREVIEW_COUNT = 8
PREVIEW_SIZE = 72
_WATCHED = {
    "dataset.regularization_folders",
    "dataset.folders",
    "dataset.caption_extension",
}


# --------------------------------------------------------------------------- the panel


class RegularizationPanel(QWidget):
    """The Regularization section of the Dataset page (see the module docstring)."""

    folders_changed = Signal()
    status_changed = Signal(str)

    def __init__(self, binding: ConfigBinding, loader: ThumbnailLoader | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("regularization_panel")
        self.binding = binding
        self.loader = loader or ThumbnailLoader(self, disk_dir=False)
        self.loader.ready.connect(self._on_thumbnail)
        self.dialog: GenerateClassImagesDialog | None = None
        self._counts: dict[str, int] = {}
        self._preview_paths: list[str] = []
        self.setAcceptDrops(True)

        intro = QLabel(
            "Class images (“a photo of a dog”) keep the model's idea of your subject's class while it learns "
            "your subject: DreamBooth prior preservation. Drop folders of class images here, or generate them."
        )
        intro.setWordWrap(True)
        self.drop_hint = QLabel("<b>Drop class image folders here</b><br>A folder named like <code>2_dog</code> repeats its images twice.")
        self.drop_hint.setObjectName("regularization_drop_hint")
        self.drop_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.drop_hint.setWordWrap(True)
        self.drop_hint.setMinimumHeight(64)
        self.drop_hint.setFrameShape(QFrame.Shape.StyledPanel)
        self.drop_hint.setStyleSheet("QLabel { border: 2px dashed palette(mid); border-radius: 8px; padding: 8px; }")

        self.table = FolderTable("Remove this folder from the class images (files stay on disk)", visible_rows=3, parent=self)
        self.table.setObjectName("regularization_table")
        self.table.repeats_changed.connect(self.set_folder_repeats)
        self.table.remove_requested.connect(self.remove_folder)

        self.add_button = QPushButton("Add folder…")
        self.add_button.clicked.connect(self.add_folder_dialog)
        self.generate_button = QPushButton("Generate class images…")
        self.generate_button.setObjectName("generate_class_images")
        self.generate_button.setToolTip("Make class images with the base model and the class prompt, before training.")
        self.generate_button.clicked.connect(lambda: self.open_generate_dialog())
        row = QHBoxLayout()
        row.addWidget(self.add_button)
        row.addWidget(self.generate_button)
        row.addStretch(1)

        self.count_label = QLabel()
        self.count_label.setObjectName("regularization_count")
        self.count_label.setWordWrap(True)
        self._build_previews()
        box = self._build_prior_box()

        self.status = QLabel()
        self.status.setObjectName("regularization_status")
        self.status.setWordWrap(True)

        lay = QVBoxLayout(self)
        lay.addWidget(intro)
        lay.addWidget(self.drop_hint)
        lay.addWidget(self.table)
        lay.addLayout(row)
        lay.addWidget(self.count_label)
        lay.addWidget(self.previews)
        lay.addWidget(box)
        lay.addWidget(self.status)
        lay.addStretch(1)

        binding.changed.connect(self._on_config_changed)
        binding.replaced.connect(self.refresh)
        self.refresh()

    def _build_previews(self) -> None:
        """A strip of the first class images."""
        self.previews = QWidget(self)
        self.previews.setObjectName("regularization_previews")
        strip = QHBoxLayout(self.previews)
        strip.setContentsMargins(0, 0, 0, 0)
        strip.setSpacing(4)
        self.preview_labels: list[QLabel] = []
        for _ in range(PREVIEW_COUNT):
            lab = QLabel(self.previews)
            lab.setFixedSize(PREVIEW_SIZE, PREVIEW_SIZE)
            lab.setAlignment(Qt.AlignmentFlag.AlignCenter)
            lab.setStyleSheet("QLabel { background: palette(alternate-base); border-radius: 4px; }")
            strip.addWidget(lab)
            self.preview_labels.append(lab)
        strip.addStretch(1)

    def _build_prior_box(self) -> QGroupBox:
        """The class prompt and the prior loss weight."""
        binding = self.binding
        box = QGroupBox("Prior preservation", self)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        self.class_prompt_edit = make_editor(binding, "dataset.class_prompt", box)
        self.class_prompt_edit.setPlaceholderText("e.g. a photo of a dog (used where a class image has no caption)")  # type: ignore[attr-defined]
        self.weight_edit = make_editor(binding, "dataset.prior_loss_weight", box)
        form.addRow("Class prompt", self.class_prompt_edit)
        form.addRow("Prior loss weight", self.weight_edit)
        return box

    # ------------------------------------------------------------------ public API
    def folders(self) -> list[DatasetFolder]:
        return list(self.binding.get("dataset.regularization_folders"))

    def image_count(self) -> int:
        """Class images in all regularization folders (as of the last refresh)."""
        return sum(self._counts.values())

    def add_folders(self, paths: Sequence[str | Path]) -> list[str]:
        """Add folders (an image file adds its folder); kohya ``N_name`` sets repeats. Returns those added."""
        current = self.folders()
        have = {path_key(f.path) for f in current}
        training = {path_key(f.path) for f in self.binding.get("dataset.folders")}
        added: list[str] = []
        refused: list[str] = []
        for raw in paths:
            p = Path(raw).expanduser()
            if p.is_file():
                p = p.parent
            if not p.is_dir():
                refused.append(f"{p.name}: not a folder")
                continue
            key = path_key(str(p))
            if key in training:
                refused.append(f"{p.name}: it is a training folder")
                continue
            if key in have:
                continue
            have.add(key)
            current.append(DatasetFolder(path=str(p), repeats=repeats_from_name(p.name) or 1))
            added.append(str(p))
        if added:
            self.binding.set("dataset.regularization_folders", current)
        msg = f"Added {len(added)} class image folder{'s' if len(added) != 1 else ''}." if added else ""
        if refused:
            msg += (" " if msg else "") + "Not added: " + "; ".join(refused) + "."
        if msg:
            self.show_status(msg)
        return added

    def remove_folder(self, path: str) -> None:
        self.binding.set("dataset.regularization_folders", [f for f in self.folders() if f.path != path])
        self.show_status(f"Removed {Path(path).name} from the class images (files stay on disk).")

    def set_folder_repeats(self, path: str, repeats: int) -> None:
        folders = [DatasetFolder(f.path, repeats if f.path == path else f.repeats) for f in self.folders()]
        self.binding.set("dataset.regularization_folders", folders)

    def add_folder_dialog(self) -> list[str]:
        folder = start_dirs.choose_folder(self, "Add a folder of class images", "images")
        return self.add_folders([folder]) if folder else []

    def open_generate_dialog(self) -> GenerateClassImagesDialog:
        """Show (or raise) the generation dialog; a finished run adds its folder to the set."""
        if self.dialog is None:
            self.dialog = GenerateClassImagesDialog(self.binding, self)
            self.dialog.generated.connect(self._on_generated)
        self.dialog.show()
        self.dialog.raise_()
        return self.dialog

    def show_status(self, text: str) -> None:
        self.status.setText(text)
        self.status_changed.emit(text)
        log.info("%s", text)

    def shutdown(self) -> None:
        """Window closing: ask a running generation to stop (it stops after the current step)."""
        if self.dialog is not None and self.dialog.is_running():
            self.dialog.cancel()

    # ------------------------------------------------------------------ refresh
    def refresh(self) -> None:
        """Re-list the folders (directory listings only) and redraw table, counts and previews."""
        ext = self.binding.get("dataset.caption_extension")
        folders = self.folders()
        images: dict[str, list[Path]] = {f.path: list_images(f.path, ext) for f in folders}
        self._counts = {p: len(v) for p, v in images.items()}
        self.table.set_folders(folders, self._counts)
        if folders:
            # Only with class folders: counting the training draws lists the training folders again.
            class_counts = [(str(p), f.repeats) for f in folders for p in images[f.path]]
            training = training_images(self.binding.get("dataset.folders"), ext)
            usage = class_usage(training, class_counts)
            n = usage.class_images
            head = f"<b>{n}</b> class image{'s' if n != 1 else ''} in {len(folders)} folder{'s' if len(folders) != 1 else ''}."
            self.count_label.setText(f"{head} {usage.describe() if n else ''}")
        else:
            self.count_label.setText("No class images: training uses your images only.")
        self._preview_paths = [str(p) for f in folders for p in images[f.path]][:PREVIEW_COUNT]
        self._refresh_previews()
        self.previews.setVisible(bool(self._preview_paths))
        self.drop_hint.setVisible(not folders)
        self.table.setVisible(bool(folders))
        self.folders_changed.emit()

    def _refresh_previews(self) -> None:
        for i, lab in enumerate(self.preview_labels):
            path = self._preview_paths[i] if i < len(self._preview_paths) else None
            lab.setVisible(path is not None)
            if path is None:
                continue
            lab.setToolTip(Path(path).name)
            img = self.loader.get(path, PREVIEW_SIZE)
            if img is not None:
                lab.setPixmap(QPixmap.fromImage(img))
            else:
                lab.setText("…" if not self.loader.failed(path, PREVIEW_SIZE) else "?")

    def _on_thumbnail(self, path: str, size: int) -> None:
        if size == PREVIEW_SIZE and path in self._preview_paths:
            self._refresh_previews()

    def _on_config_changed(self, path: str) -> None:
        if path in _WATCHED:
            self.refresh()

    def _on_generated(self, folder: str, result: object) -> None:
        for p in getattr(result, "paths", ()):
            self.loader.forget(p)
        if path_key(folder) not in {path_key(f.path) for f in self.folders()}:
            self.add_folders([folder])
        else:
            self.refresh()
        if not str(self.binding.get("dataset.class_prompt")).strip() and self.dialog is not None:
            self.binding.set("dataset.class_prompt", self.dialog.prompt.text().strip())

    # ------------------------------------------------------------------ drag and drop
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if local_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:  # noqa: N802
        if local_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        paths = local_paths(event)
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.add_folders(paths)


# --------------------------------------------------------------------------- Training page


class _PriorHint(QLabel):
    """Says whether the prior loss weight matters (are there class image folders?)."""

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(parent)
        self.binding = binding
        self.setObjectName("prior_loss_hint")
        self.setWordWrap(True)
        self.setStyleSheet("color: palette(placeholder-text);")
        binding.changed.connect(self._on_changed)  # bound method: disconnected when the label goes
        binding.replaced.connect(self.update_text)
        self.update_text()

    def _on_changed(self, path: str) -> None:
        if path == "dataset.regularization_folders":
            self.update_text()

    def update_text(self) -> None:
        n = len(self.binding.get("dataset.regularization_folders"))
        self.setText(
            f"{n} class image folder{'s' if n != 1 else ''}: loss = your images' loss + weight × class images' loss."
            if n
            else "No class images (add them on the Dataset page, Class images tab): the weight has no effect."
        )


def prior_loss_box(binding: ConfigBinding, parent: QWidget | None = None) -> QGroupBox:
    """The Training page's "Regularization images" box: a bound prior loss weight editor and a hint."""
    box = QGroupBox("Regularization images", parent)
    box.setObjectName("prior_loss_box")
    form = QFormLayout(box)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
    form.addRow("Prior loss weight", make_editor(binding, "dataset.prior_loss_weight", box))
    form.addRow(_PriorHint(binding, box))
    return box
