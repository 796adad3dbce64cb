"""The "Generate class images…" dialog of the Regularization panel: makes class images with the base model.

Generation runs in a :class:`ClassImageWorker` thread through :func:`~guitrainer.ui.workers.run_in_thread`
(torch is imported there, never at start), with a progress bar and Cancel.
"""

from __future__ import annotations

import logging
import re
import threading

from PySide6.QtCore import Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.names import safe_name
from guitrainer.base.paths import expand, path_key
from guitrainer.config import ModelConfig
from guitrainer.core.dataset.folders import training_images
from guitrainer.core.dataset.regularization import class_usage
from guitrainer.core.dataset.report import plural
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)


def _slug(text: str) -> str:
    """The class prompt as a folder name ("a photo of a dog" -> "a_photo_of_a_dog"), one every system can write:
    never a Windows device name (a prompt "con" or "aux" -> "_con", "_aux"; see :func:`~guitrainer.base.names.safe_name`)."""
    s = re.sub(r"[^A-Za-z0-9]+", "_", text.strip().lower()).strip("_")
    return safe_name(s[:48], "class")


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
        gpu_index: int,
        stop: threading.Event,
    ):
        super().__init__()
        self.model_cfg = ModelConfig(
            base=model_cfg.base, vae=model_cfg.vae, family=model_cfg.family, init_lora=model_cfg.init_lora
        )
        self.args = (prompt, folder, count)
        self.kwargs = {"size": size, "steps": steps, "seed": seed, "negative_prompt": negative_prompt, "gpu_index": gpu_index}
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
        training = training_images(g("dataset.folders"), g("dataset.caption_extension"))
        train_draws = class_usage(training, []).train_draws

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
        folder = QFileDialog.getExistingDirectory(
            self, "Folder for the class images", start_dirs.start_near(self.folder.text(), "images")
        )
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
        if path_key(folder) in {path_key(f.path) for f in self.binding.get("dataset.folders")}:
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
            gpu_index=self.binding.config.precision.gpu_index,
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
            self.status.setText(f"Made {done} of {plural(total, 'image')}…")

    def _on_finished(self, result: object) -> None:
        folder = self._folder
        self._running = False
        self.result_value = result
        self._set_inputs_enabled(True)
        self.cancel_button.setEnabled(True)
        self.cancel_button.setText("Close")
        written, have = getattr(result, "written", 0), getattr(result, "skipped_existing", 0)
        if getattr(result, "cancelled", False):
            text = f"Cancelled: made {plural(written, 'image')} ({have} were there). Generate again to continue."
        elif written == 0:
            text = f"The folder already holds {plural(have, 'image')}; nothing to make."
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


