"""The table of image folders with their image count, editable repeats and a remove button.

Used for the training folders (Dataset page) and the class-image folders (Regularization tab).
"""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QWidget,
)

from guitrainer.config import DatasetFolder


class FolderTable(QTableWidget):
    """Folder · Images · Repeats (spin box) · ✕. Emits what the user asked; the owner changes the config."""

    repeats_changed = Signal(str, int)  # folder path, new repeats
    remove_requested = Signal(str)  # folder path

    def __init__(self, remove_tooltip: str, *, visible_rows: int = 4, parent: QWidget | None = None):
        super().__init__(0, 4, parent)
        self._remove_tooltip = remove_tooltip
        self._visible_rows = visible_rows
        self.setHorizontalHeaderLabels(["Folder", "Images", "Repeats", ""])
        hh = self.horizontalHeader()
        hh.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in (1, 2, 3):
            hh.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setToolTip("Each folder's images are used 'Repeats' times per epoch (kohya's 10_name folders).")

    def paths(self) -> list[str]:
        return [self.item(r, 0).text() if self.item(r, 0) else "" for r in range(self.rowCount())]

    def set_folders(self, folders: list[DatasetFolder], counts: dict[str, int]) -> None:
        """Show ``folders``; the same folders are updated in place (a spin box keeps the user's focus)."""
        if self.paths() == [f.path for f in folders]:
            for r, f in enumerate(folders):
                self.item(r, 1).setText(str(counts.get(f.path, 0)))
                spin = self.cellWidget(r, 2)
                if isinstance(spin, QSpinBox) and spin.value() != f.repeats:
                    with QSignalBlocker(spin):
                        spin.setValue(f.repeats)
            return
        self.setRowCount(len(folders))
        for r, f in enumerate(folders):
            name = QTableWidgetItem(f.path)
            name.setToolTip(f.path)
            self.setItem(r, 0, name)
            n = QTableWidgetItem(str(counts.get(f.path, 0)))
            n.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.setItem(r, 1, n)
            spin = QSpinBox(self)
            spin.setRange(1, 1000)
            spin.setValue(f.repeats)
            spin.setSuffix(" ×")
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(lambda v, p=f.path: self.repeats_changed.emit(p, int(v)))
            self.setCellWidget(r, 2, spin)
            rm = QToolButton(self)
            rm.setText("✕")
            rm.setToolTip(self._remove_tooltip)
            rm.clicked.connect(lambda _c=False, p=f.path: self.remove_requested.emit(p))
            self.setCellWidget(r, 3, rm)
        rows_h = sum(self.rowHeight(r) for r in range(min(len(folders), self._visible_rows)))
        self.setFixedHeight(self.horizontalHeader().height() + rows_h + 2 * self.frameWidth() + 2)
