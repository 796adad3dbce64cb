"""The Dataset page's tool bar: add / remove / delete buttons, the Show filter, the search box, the tag chip."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QToolButton, QWidget

#: the Show filter's modes (``DatasetFilterProxy.set_mode``) and their labels
FILTER_MODES = (("all", "All images"), ("captioned", "Captioned"), ("uncaptioned", "Uncaptioned"), ("flagged", "Flagged"))


class DatasetToolbar(QWidget):
    """Widgets only; the page connects them (it owns the dataset and the filter)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        bar = QHBoxLayout(self)
        bar.setContentsMargins(0, 0, 0, 0)
        self.add_folder_button = QPushButton("Add folder…", self)
        self.add_images_button = QPushButton("Add images…", self)
        self.remove_button = QPushButton("Remove from dataset", self)
        self.remove_button.setToolTip("Take the selected images out of the list. Files on disk are not touched.")
        self.delete_button = QToolButton(self)
        self.delete_button.setText("Delete files…")
        self.delete_button.setToolTip("Move the selected images and their captions to the trash (asks first).")
        self.demo_images_button = QPushButton("Use the demo images", self)
        self.demo_images_button.setObjectName("use_demo_images")
        self.demo_images_button.setToolTip(
            "Add the Demo's 12 generated pictures: a long red bar called “a red zorb”, which the built-in demo model has "
            "never seen, and four shapes it knows. Train them with the Demo preset."
        )
        for w in (self.add_folder_button, self.add_images_button, self.demo_images_button, self.remove_button, self.delete_button):
            bar.addWidget(w)
        bar.addStretch(1)
        bar.addWidget(QLabel("Show", self))
        self.filter_combo = QComboBox(self)
        self.filter_combo.setObjectName("dataset_filter")
        for mode, label in FILTER_MODES:
            self.filter_combo.addItem(label, mode)
        bar.addWidget(self.filter_combo)
        self.search = QLineEdit(self)
        self.search.setObjectName("dataset_search")
        self.search.setPlaceholderText("Search captions and names…")
        self.search.setClearButtonEnabled(True)
        self.search.setMinimumWidth(160)
        bar.addWidget(self.search)
        self.tag_chip = QToolButton(self)
        self.tag_chip.setVisible(False)
        self.tag_chip.setToolTip("Show all images again")
        bar.addWidget(self.tag_chip)

    def show_tag(self, tag: str) -> None:
        """The chip names the tag the grid is filtered by (hidden for none); clicking it clears the filter."""
        self.tag_chip.setVisible(bool(tag))
        self.tag_chip.setText(f"tag: {tag}  ✕")
