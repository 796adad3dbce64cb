"""Regularization (class) images on the Dataset page: folders, a preview strip, the class prompt and
prior loss weight, and a "Generate class images…" dialog that makes them with the base model.

The panel edits ``dataset.regularization_folders`` (drop folders on it, or Add folder…; a kohya
``N_name`` folder gets N repeats), ``dataset.class_prompt`` and ``dataset.prior_loss_weight``. Folder
contents are read with a directory listing only (no image decoding on the GUI thread); thumbnails come
from a :class:`ThumbnailLoader`'s thread pool. Generation runs in a :class:`ClassImageWorker` thread
(torch is imported there, never at start) with a progress bar and Cancel.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDragMoveEvent, QDropEvent, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from guitrainer.config import DatasetFolder, ModelConfig, repeats_from_name
from guitrainer.core import dataset as ds
from guitrainer.core.paths import expand
from guitrainer.core.regularization import class_usage
from guitrainer.ui.binding import ConfigBinding, make_editor
from guitrainer.ui.drops import local_paths
from guitrainer.ui.folder_table import FolderTable
from guitrainer.ui.thumbnails import ThumbnailLoader
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)

PREVIEW_COUNT = 8
PREVIEW_SIZE = 72
_WATCHED = {
    "dataset.regularization_folders",
    "dataset.folders",
    "dataset.caption_extension",
}


def _norm(path: str) -> str:
    try:
        return str(expand(path).resolve())
    except OSError:
        return path


def list_images(folder: str, caption_extension: str = ".txt") -> list[Path]:
    """Images directly in ``folder``, as training reads them (directory listing only)."""
    return [c.path for c in ds.collect([folder], caption_extension, recursive=False, repeats=1).candidates]


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "_", text.strip().lower()).strip("_")
    return s[:48] or "class"


# --------------------------------------------------------------------------- background generation


class ClassImageWorker(BaseWorker):
    """Runs :func:`guitrainer.engine.class_images.generate_class_images` in a background thread."""

    progressed = Signal(int, int)  # done, total

    def __init__(
        self,
        model_cfg: ModelConfig,
        prompt: str,
        folder: str,
        count: int,
        *,
        size: int,
        steps: int,
        seed: int,
        negative_prompt: str,
        stop: threading.Event,
    ):
        super().__init__()
        self.model_cfg = ModelConfig(model_cfg.base, model_cfg.family, model_cfg.init_lora)
        self.args = (prompt, folder, count)
        self.kwargs = {"size": size, "steps": steps, "seed": seed, "negative_prompt": negative_prompt}
        self._stop = stop

    def work(self) -> object:
        import torch  # noqa: F401 - loaded first so its threads can be capped

        from guitrainer.engine.class_images import generate_class_images
        from guitrainer.ui.workers import cap_torch_threads

        cap_torch_threads()
        return generate_class_images(
            self.model_cfg,
            *self.args,
            **self.kwargs,
            progress=lambda d, n: self.progressed.emit(int(d), int(n)),
            should_stop=self._stop.is_set,
        )


class GenerateClassImagesDialog(QDialog):
    """Count, folder, size, steps and seed; Generate runs in the background with progress and Cancel."""

    generated = Signal(str, object)  # folder, GenerationResult (also after a cancel: what was made is kept)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Generate class images")
        self.setObjectName("generate_class_dialog")
        self.binding = binding
        self._stop = threading.Event()
        self._running = False
        self._folder = ""
        self.result_value: object | None = None
        g = binding.get
        train_draws = class_usage(_train_counts(binding), []).train_draws

        self.prompt = QLineEdit(g("dataset.class_prompt"))
        self.prompt.setPlaceholderText("e.g. a photo of a dog")
        self.prompt.setToolTip("What every class image shows: the general class of your subject, without its trigger word.")
        self.negative = QLineEdit(g("sampling.negative_prompt"))
        self.count = QSpinBox()
        self.count.setRange(1, 100_000)
        self.count.setValue(min(max(train_draws, 10), 1000) if train_draws else 100)
        self.count.setToolTip(
            "How many class images the folder should hold. kohya draws as many class images per epoch as "
            f"training images ({train_draws} now, with repeats); existing images in the folder count."
        )
        self.folder = QLineEdit(self._default_folder())
        self.folder.textEdited.connect(self._on_folder_edited)
        self._folder_auto = True  # follows the prompt until the user types or browses a folder
        self.prompt.textChanged.connect(self._on_prompt_changed)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        self.size = QSpinBox()
        self.size.setRange(64, 4096)
        self.size.setSingleStep(64)
        self.size.setSuffix(" px")
        self.size.setValue(int(g("dataset.resolution")))
        self.steps = QSpinBox()
        self.steps.setRange(1, 200)
        self.steps.setValue(int(g("sampling.steps")))
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setValue(int(g("schedule.seed")) % (2**31))
        self.seed.setToolTip("Image i uses seed + i, so a cancelled run continues with the very same images.")

        form = QFormLayout()
        form.addRow("Class prompt", self.prompt)
        form.addRow("Negative prompt", self.negative)
        form.addRow("Images", self.count)
        form.addRow("Folder", folder_row)
        form.addRow("Size", self.size)
        form.addRow("Steps", self.steps)
        form.addRow("Seed", self.seed)

        self.progress = QProgressBar()
        self.progress.setObjectName("class_progress")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("Not started")
        self.status = QLabel(f"Made with the base model ({g('model.base')}).")
        self.status.setObjectName("class_status")
        self.status.setWordWrap(True)
        self.buttons = QDialogButtonBox()
        self.generate_button = self.buttons.addButton("Generate", QDialogButtonBox.ButtonRole.AcceptRole)
        self.cancel_button = self.buttons.addButton("Cancel", QDialogButtonBox.ButtonRole.RejectRole)
        self.generate_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel_or_close)

        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        lay.addWidget(self.buttons)
        self.resize(560, self.sizeHint().height())

    def _default_folder(self) -> str:
        return str(expand(self.binding.get("output.folder")) / "class_images" / _slug(self.prompt.text()))

    def _on_prompt_changed(self, _text: str) -> None:
        if self._folder_auto:
            self.folder.setText(self._default_folder())

    def _on_folder_edited(self, _text: str) -> None:
        self._folder_auto = False

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder for the class images", self.folder.text())
        if folder:
            self.folder.setText(folder)
            self._folder_auto = False

    def is_running(self) -> bool:
        return self._running

    def start(self) -> bool:
        """Check the inputs and start generating; False (with a message) when something is missing."""
        if self._running:
            return False
        prompt, folder = self.prompt.text().strip(), self.folder.text().strip()
        if not prompt:
            self.status.setText("Write a class prompt first, e.g. “a photo of a dog”.")
            return False
        if not folder:
            self.status.setText("Choose a folder for the class images.")
            return False
        if _norm(folder) in {_norm(f.path) for f in self.binding.get("dataset.folders")}:
            self.status.setText("That folder holds training images; choose a separate folder for class images.")
            return False
        self._stop.clear()
        self._running = True
        self._set_inputs_enabled(False)
        self.progress.setRange(0, 0)  # busy until the first report (the model loads first)
        self.progress.setFormat("%v / %m")
        self.status.setText("Loading the base model…")
        self.cancel_button.setText("Cancel")
        worker = ClassImageWorker(
            self.binding.config.model,
            prompt,
            folder,
            self.count.value(),
            size=self.size.value(),
            steps=self.steps.value(),
            seed=self.seed.value(),
            negative_prompt=self.negative.text().strip(),
            stop=self._stop,
        )
        worker.progressed.connect(self._on_progress)
        self._folder = folder
        worker.finished.connect(self._on_finished)  # bound methods of a GUI-thread object: queued
        worker.failed.connect(self._on_failed)
        run_in_thread(worker, name="ClassImageThread")
        log.info("generating %d class images of %r into %s", self.count.value(), prompt, folder)
        return True

    def cancel(self) -> None:
        """Ask the run to stop; images already written are kept (the next run continues)."""
        if self._running:
            self._stop.set()
            self.status.setText("Cancelling after the current image…")
            self.cancel_button.setEnabled(False)

    def cancel_or_close(self) -> None:
        if self._running:
            self.cancel()
        else:
            self.reject()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self._running:  # keep the dialog (and its progress) until the worker has stopped
            self.cancel()
            event.ignore()
            return
        super().closeEvent(event)

    def reject(self) -> None:
        if self._running:
            self.cancel()
            return
        super().reject()

    def _set_inputs_enabled(self, on: bool) -> None:
        for w in (self.prompt, self.negative, self.count, self.folder, self.size, self.steps, self.seed, self.generate_button):
            w.setEnabled(on)

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        if total:
            self.status.setText(f"Made {done} of {total} images…")

    def _on_finished(self, result: object) -> None:
        folder = self._folder
        self._running = False
        self.result_value = result
        self._set_inputs_enabled(True)
        self.cancel_button.setEnabled(True)
        self.cancel_button.setText("Close")
        written, have = getattr(result, "written", 0), getattr(result, "skipped_existing", 0)
        if getattr(result, "cancelled", False):
            text = f"Cancelled: made {written} images ({have} were there). Generate again to continue."
        elif written == 0:
            text = f"The folder already holds {have} images; nothing to make."
        else:
            text = f"Made {written} class images" + (f" ({have} were there)." if have else ".")
        self.status.setText(text + " The folder is in the regularization set.")
        self.progress.setRange(0, max(1, written))
        self.progress.setValue(written)
        self.generated.emit(folder, result)

    def _on_failed(self, message: str, tb: str) -> None:
        self._running = False
        self._set_inputs_enabled(True)
        self.cancel_button.setEnabled(True)
        self.cancel_button.setText("Close")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status.setText(f"Could not generate class images: {message}")
        self.status.setToolTip(tb)


def _train_counts(binding: ConfigBinding) -> list[tuple[str, int]]:
    ext = binding.get("dataset.caption_extension")
    return [(str(p), f.repeats) for f in binding.get("dataset.folders") for p in list_images(f.path, ext)]


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

        box = QGroupBox("Prior preservation", self)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        self.class_prompt_edit = make_editor(binding, "dataset.class_prompt", box)
        self.class_prompt_edit.setPlaceholderText("e.g. a photo of a dog (used where a class image has no caption)")  # type: ignore[attr-defined]
        self.weight_edit = make_editor(binding, "dataset.prior_loss_weight", box)
        form.addRow("Class prompt", self.class_prompt_edit)
        form.addRow("Prior loss weight", self.weight_edit)

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

    # ------------------------------------------------------------------ public API
    def folders(self) -> list[DatasetFolder]:
        return list(self.binding.get("dataset.regularization_folders"))

    def image_count(self) -> int:
        """Class images in all regularization folders (as of the last refresh)."""
        return sum(self._counts.values())

    def add_folders(self, paths: Sequence[str | Path]) -> list[str]:
        """Add folders (an image file adds its folder); kohya ``N_name`` sets repeats. Returns those added."""
        current = self.folders()
        have = {_norm(f.path) for f in current}
        training = {_norm(f.path) for f in self.binding.get("dataset.folders")}
        added: list[str] = []
        refused: list[str] = []
        for raw in paths:
            p = Path(raw).expanduser()
            if p.is_file():
                p = p.parent
            if not p.is_dir():
                refused.append(f"{p.name}: not a folder")
                continue
            key = _norm(str(p))
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
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of class images")
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
            usage = class_usage(_train_counts(self.binding), class_counts)
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
        if _norm(folder) not in {_norm(f.path) for f in self.folders()}:
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
            else "No class images (add them on the Dataset page, Regularization tab): the weight has no effect."
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
