"""Sample images made during training: newest first, click one to see it large with its prompt."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QIcon, QPixmap
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

    def add_sample(self, sample: SampleImage) -> QListWidgetItem:
        """Insert at the top (newest first)."""
        pix = QPixmap(sample.path)
        if pix.isNull():
            log.warning("sample image %s cannot be read", sample.path)
            icon = self.style().standardIcon(self.style().StandardPixmap.SP_FileIcon)
        else:
            icon = QIcon(
                pix.scaled(ICON_SIZE, ICON_SIZE, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
            )
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
