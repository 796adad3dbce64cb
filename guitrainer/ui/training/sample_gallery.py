"""Sample images made during training: newest first, click one to see it large with its prompt."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QIcon, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guitrainer.core.events import SampleImage

log = logging.getLogger(__name__)

ICON_SIZE = 128
SAMPLE_ROLE = Qt.ItemDataRole.UserRole + 1


class SampleDialog(QDialog):
    """One sample, large, with the prompt and the step it was made at."""

    def __init__(self, sample: SampleImage, parent: QWidget | None = None):
        super().__init__(parent)
        self.sample = sample
        self.setWindowTitle(f"Sample at step {sample.step}")
        lay = QVBoxLayout(self)
        self.image = QLabel()
        self.image.setAlignment(Qt.AlignmentFlag.AlignCenter)
        pix = QPixmap(sample.path)
        if pix.isNull():
            self.image.setText(f"Cannot show {sample.path}")
        else:
            if pix.width() < 384:  # tiny demo samples: enlarge without smoothing so pixels stay crisp
                factor = max(1, 384 // max(1, pix.width()))
                pix = pix.scaled(pix.size() * factor, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.FastTransformation)
            elif pix.width() > 900 or pix.height() > 900:
                pix = pix.scaled(900, 900, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
            self.image.setPixmap(pix)
        lay.addWidget(self.image, 1)
        self.caption = QLabel(f"<b>Step {sample.step}</b><br>{_escape(sample.prompt)}")
        self.caption.setObjectName("sample_caption")
        self.caption.setWordWrap(True)
        self.caption.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.caption)
        path = QLabel(f"<small>{_escape(sample.path)}</small>")
        path.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(path)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)


def sampling_note(sampling: object) -> str:
    """What the empty Samples tab says: that sampling is off, or how often samples come."""
    every, prompts = getattr(sampling, "every_n_steps", 0), getattr(sampling, "prompts", [])
    at_start = bool(getattr(sampling, "at_start", False))
    if not prompts or not (every or at_start):
        return "Sampling is off: add sample prompts and set “Sample every” (Samples, on the left) to see images while training."
    if not every:
        return "Samples appear here once, before the first step (the base model's pictures)."
    first = "before the first step and " if at_start else ""
    return f"Samples appear here {first}every {every} steps while training."


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SampleGallery(QListWidget):
    """Icon grid of :class:`SampleImage`, newest first; clicking one opens a :class:`SampleDialog`."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("sample_gallery")
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setIconSize(QSize(ICON_SIZE, ICON_SIZE))
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setMovement(QListView.Movement.Static)
        self.setUniformItemSizes(True)
        self.setSpacing(6)
        self.setWordWrap(True)
        self.itemClicked.connect(self.open_item)
        self.itemActivated.connect(self.open_item)
        self.dialog: SampleDialog | None = None
        self.empty_text = ""

    def set_empty_text(self, text: str) -> None:
        """What the empty gallery says (e.g. that sampling is off)."""
        self.empty_text = text
        self.viewport().update()

    def paintEvent(self, event) -> None:  # noqa: N802, ANN001 - Qt override
        super().paintEvent(event)
        if not self.count() and self.empty_text:
            painter = QPainter(self.viewport())
            painter.setPen(self.palette().color(QPalette.ColorRole.PlaceholderText))
            flags = Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap
            painter.drawText(self.viewport().rect().adjusted(16, 8, -16, -8), int(flags), self.empty_text)
            painter.end()

    def add_sample(self, sample: SampleImage) -> QListWidgetItem:
        """Insert at the top (newest first)."""
        pix = QPixmap(sample.path)
        if pix.isNull():
            log.warning("sample image %s cannot be read", sample.path)
            icon = self.style().standardIcon(self.style().StandardPixmap.SP_FileIcon)
        else:
            small = max(pix.width(), pix.height()) <= ICON_SIZE  # a 64 px Demo sample: whole pixels, not a blur
            mode = Qt.TransformationMode.FastTransformation if small else Qt.TransformationMode.SmoothTransformation
            icon = QIcon(pix.scaled(ICON_SIZE, ICON_SIZE, Qt.AspectRatioMode.KeepAspectRatio, mode))
        item = QListWidgetItem(icon, f"step {sample.step}")
        item.setToolTip(f"Step {sample.step}\n{sample.prompt}\n{Path(sample.path).name}")
        item.setData(SAMPLE_ROLE, sample)
        self.insertItem(0, item)
        return item

    def samples(self) -> list[SampleImage]:
        """All samples, newest first."""
        return [self.item(i).data(SAMPLE_ROLE) for i in range(self.count())]

    def open_item(self, item: QListWidgetItem) -> SampleDialog | None:
        sample = item.data(SAMPLE_ROLE)
        if not isinstance(sample, SampleImage):
            return None
        if self.dialog is not None:
            self.dialog.close()
        self.dialog = SampleDialog(sample, self)
        self.dialog.open()
        return self.dialog
