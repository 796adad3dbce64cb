"""Auto-captioning panel: pick a model, run it in a worker thread over the selection or all images."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QThread, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.core.dataset.captioner_catalog import (
    hub_reachable,
    known_for,
    looks_like_hub_id,
    offline_message,
)
from guitrainer.core.dataset.report import plural
from guitrainer.ui import start_dirs
from guitrainer.ui.workers import BaseWorker, run_in_thread

log = logging.getLogger(__name__)


def _size_text(n: int) -> str:
    """Bytes for people: 512 B, 3.4 kB, 120.5 MB, 1.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class CaptionWorker(BaseWorker):
    """Loads a captioner and runs :func:`engine.captioners.run_captioning` (through ``run_in_thread``).

    ``finished(CaptionRunResult)`` when it ran or was cancelled; ``failed(message, traceback)`` when the
    model could not be loaded or the run broke (the message in plain words, the traceback for the log).
    """

    progressed = Signal(int, int)  # done, total
    # file, number (1-based), files, bytes received, file size (64-bit: weights can pass 2 GB)
    downloading = Signal(str, int, int, "qlonglong", "qlonglong")
    captioned = Signal(str, str)  # image path, new caption

    def __init__(self, kind: str, source: str, paths: list[Path], mode: str, caption_extension: str, options: dict[str, Any]):
        super().__init__()
        self.kind, self.source, self.paths, self.mode = kind, source, paths, mode
        self.caption_extension = caption_extension
        self.options = options
        self._stop = threading.Event()

    def cancel(self) -> None:
        """Thread-safe: stop after the current batch."""
        self._stop.set()

    def is_cancelled(self) -> bool:
        return self._stop.is_set()

    def _on_download(self, file: str, number: int, count: int, received: int, size: int) -> None:
        """Download progress (worker thread); raising here stops the download when cancelled."""
        from guitrainer.engine.captioners import CaptioningCancelled

        if self._stop.is_set():
            raise CaptioningCancelled("cancelled while downloading the model")
        self.downloading.emit(file, number, count, received, size)

    def work(self) -> Any:
        from guitrainer.engine.captioners import (
            CaptionerError,
            CaptioningCancelled,
            CaptionRunResult,
            load_captioner,
            run_captioning,
        )

        if looks_like_hub_id(self.source) and not hub_reachable():
            raise CaptionerError(offline_message(self.source))
        try:
            captioner = load_captioner(self.kind, self.source, progress=self._on_download, **self.options)  # type: ignore[arg-type]
        except CaptioningCancelled:
            return CaptionRunResult(cancelled=True)
        try:
            return run_captioning(
                captioner,
                self.paths,
                mode=self.mode,  # type: ignore[arg-type]
                caption_extension=self.caption_extension,
                batch_size=4,
                should_stop=self._stop.is_set,
                on_progress=self.progressed.emit,
                on_caption=lambda p, t: self.captioned.emit(str(p), t),
            )
        finally:
            captioner.close()


class CaptioningPanel(QWidget):
    """Model choice, thresholds, mode; emits ``start_requested`` — the page supplies the images."""

    start_requested = Signal(str)  # scope: "selection" | "all"
    run_finished = Signal(object)  # CaptionRunResult
    run_failed = Signal(str)
    captioned = Signal(str, str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._thread: QThread | None = None
        self._worker: CaptionWorker | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        intro = QLabel(
            "Write captions with a model. BLIP writes a sentence; a WD14 tagger writes booru-style tags. "
            "Pick a known model (downloaded once, then it works offline) or choose the folder of one you have.",
            self,
        )
        intro.setWordWrap(True)
        intro.setStyleSheet("color: palette(placeholder-text);")
        lay.addWidget(intro)
        form = QFormLayout()
        self.kind = QComboBox(self)
        self.kind.addItem("WD14 tagger (tags, ONNX)", "wd14")
        self.kind.addItem("BLIP (sentences)", "blip")
        form.addRow("Model type", self.kind)
        self.source = QLineEdit(self)
        self.source.setPlaceholderText("folder with model.onnx + selected_tags.csv, or a BLIP folder")
        browse = QPushButton("Browse…", self)
        browse.clicked.connect(self._browse)
        row = QWidget(self)
        rl = QHBoxLayout(row)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.source, 1)
        rl.addWidget(browse)
        form.addRow("Model", row)
        self.suggested = QComboBox(self)
        self.suggested.setObjectName("known_captioners")
        self.suggested.setToolTip("Models known to work here, with their download size. Choosing one fills in its hub id.")
        self.suggested.activated.connect(self._suggestion_chosen)
        form.addRow("Known models", self.suggested)
        self.general = QDoubleSpinBox(self)
        self.general.setRange(0.01, 1.0)
        self.general.setSingleStep(0.05)
        self.general.setValue(0.35)
        self.general.setToolTip("Tags whose score is at least this are written. Lower: more tags, more mistakes.")
        self.character = QDoubleSpinBox(self)
        self.character.setRange(0.01, 1.0)
        self.character.setSingleStep(0.05)
        self.character.setValue(0.85)
        self.character.setToolTip("Threshold for character tags (named characters).")
        self._general_label = QLabel("General threshold", self)
        self._character_label = QLabel("Character threshold", self)
        form.addRow(self._general_label, self.general)
        form.addRow(self._character_label, self.character)
        self.mode = QComboBox(self)
        self.mode.addItem("Skip images that have a caption", "skip")
        self.mode.addItem("Overwrite existing captions", "overwrite")
        self.mode.addItem("Append new tags to existing captions", "append")
        form.addRow("Existing captions", self.mode)
        self.scope = QComboBox(self)
        self.scope.addItem("Selected images", "selection")
        self.scope.addItem("All images", "all")
        form.addRow("Caption", self.scope)
        lay.addLayout(form)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Start captioning", self)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setEnabled(False)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        lay.addLayout(buttons)
        self.progress = QProgressBar(self)
        self.progress.setVisible(False)
        lay.addWidget(self.progress)
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        lay.addStretch(1)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.start_button.clicked.connect(lambda: self.start_requested.emit(self.scope.currentData()))
        self.cancel_button.clicked.connect(self.cancel)
        self._kind_changed()

    def _fill_suggestions(self) -> None:
        self.suggested.clear()
        self.suggested.addItem("Choose a known model…", "")
        for c in known_for(self.kind.currentData()):
            self.suggested.addItem(c.text(), c.hub_id)

    def _suggestion_chosen(self, index: int) -> None:
        hub_id = self.suggested.itemData(index)
        if hub_id:
            self.source.setText(hub_id)
            self.status.setText("Downloaded on the first start, then kept: later runs work offline.")

    def _kind_changed(self) -> None:
        self._fill_suggestions()
        wd = self.kind.currentData() == "wd14"
        for w in (self.general, self.character, self._general_label, self._character_label):
            w.setVisible(wd)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Choose the captioning model's folder", start_dirs.start_near(self.source.text(), "models")
        )
        if folder:
            self.source.setText(folder)

    def options(self) -> dict[str, Any]:
        if self.kind.currentData() == "wd14":
            return {"general_threshold": self.general.value(), "character_threshold": self.character.value()}
        return {}

    def is_running(self) -> bool:
        return self._thread is not None

    def start(self, paths: list[Path], caption_extension: str, gpu_index: int = -1) -> bool:
        """Run over ``paths`` in a worker thread, on the GPU ``gpu_index`` names (``precision.gpu_index``; -1 the
        first). False (with a message) when it cannot start."""
        if self._thread is not None:
            return False
        if not paths:
            self.status.setText("No images to caption: select some, or choose “All images”.")
            return False
        if not self.source.text().strip():
            self.status.setText("Choose the model folder first.")
            return False
        worker = CaptionWorker(
            self.kind.currentData(), self.source.text().strip(), paths, self.mode.currentData(), caption_extension,
            {**self.options(), "gpu_index": gpu_index},
        )
        worker.progressed.connect(self._on_progress)
        worker.downloading.connect(self._on_download)
        worker.captioned.connect(self.captioned)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self.progress.setRange(0, len(paths))
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.status.setText(f"Loading the model, then captioning {plural(len(paths), 'image')}…")
        self._worker = worker
        self._thread = run_in_thread(worker, name="CaptionThread", thread_finished=self._cleanup)
        return True

    def cancel(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            self.status.setText("Stopping after the current images…")

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setMaximum(total)
        self.progress.setValue(done)
        self.status.setText(f"Captioned {done} of {total}…")

    def _on_download(self, file: str, number: int, count: int, received: int, size: int) -> None:
        """A hub id is being downloaded: the bar counts files (and the current file's bytes)."""
        if self._worker is None or self._worker.is_cancelled():
            return  # keep “Stopping…” on screen
        part = min(received / size, 1.0) if size > 0 else 0.0
        self.progress.setRange(0, 1000 * count)
        self.progress.setValue(int(1000 * (number - 1 + part)))
        text = f"Downloading {file} {number}/{count}"
        if size > 0:
            text += f" ({_size_text(received)} of {_size_text(size)})"
        self.status.setText(text + "…")

    @Slot(object)
    def _on_finished(self, result: Any) -> None:
        parts = [f"{'Cancelled' if result.cancelled else 'Done'}: wrote {plural(len(result.changes), 'caption')}"]
        if result.skipped:
            parts.append(f"skipped {result.skipped}")
        if result.failed:
            parts.append(f"{len(result.failed)} failed ({result.failed[0][0].name}: {result.failed[0][1]})")
        self.status.setText(", ".join(parts) + ".")
        self.run_finished.emit(result)

    @Slot(str, str)
    def _on_failed(self, message: str, _details: str) -> None:
        # the worker logged the traceback; the panel shows the message in plain words
        text = message.strip().splitlines()[-1] if message.strip() else "unknown error"
        self.status.setText(f"Captioning failed: {text}")
        self.status.setToolTip("The Log (Training page) has the details.")
        self.run_failed.emit(message)

    @Slot()
    def _cleanup(self) -> None:
        self._thread, self._worker = None, None  # both deleted by run_in_thread's wiring
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.progress.setVisible(False)

    def shutdown(self) -> None:
        """Cancel and wait for the worker (window closing)."""
        if self._thread is not None:
            self.cancel()
            self._thread.wait(10000)
