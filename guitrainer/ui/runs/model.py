"""The Runs page's list: a table model over the store's rows and a proxy that sorts and filters it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QColor

from guitrainer.core.runs.store import STATUSES, RunRow

COLUMNS = ("Name", "Date", "Model", "Precision", "Steps", "Final loss", "Status", "Output")
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
ID_ROLE = Qt.ItemDataRole.UserRole + 2
STATUS_COLORS = {"failed": "#c92a2a", "interrupted": "#d9480f", "running": "#1971c2", "stopped": "#5c677d"}

Index = QModelIndex | QPersistentModelIndex


def model_text(base: str) -> str:
    """A base model as the list shows it: a file or folder name, or the hub id / "demo"."""
    if not base:
        return ""
    p = Path(base)
    return p.name if ("/" in base or "\\" in base) and (p.suffix or p.is_absolute()) else base


class RunsTableModel(QAbstractTableModel):
    """One row per stored run; ``SORT_ROLE`` gives raw values (dates and losses sort as numbers)."""

    def __init__(self, parent: Any = None):
        super().__init__(parent)
        self.rows: list[RunRow] = []
        self._sort: tuple[int, Qt.SortOrder] | None = None

    def set_rows(self, rows: list[RunRow]) -> None:
        self.beginResetModel()
        self.rows = self._sorted(list(rows))
        self.endResetModel()

    def _sorted(self, rows: list[RunRow]) -> list[RunRow]:
        if self._sort is not None:
            column, order = self._sort
            rows.sort(key=lambda r: self._raw(r, column), reverse=order == Qt.SortOrder.DescendingOrder)
        return rows

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort the rows themselves (one ``list.sort``: a proxy's sort would call :meth:`data` ~10 times a row)."""
        self._sort = (column, order)
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        ids = [self.rows[i.row()].id for i in old]
        self.rows = self._sorted(self.rows)
        where = {r.id: n for n, r in enumerate(self.rows)}
        self.changePersistentIndexList(old, [self.index(where[i], o.column()) for i, o in zip(ids, old)])
        self.layoutChanged.emit()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def row_at(self, row: int) -> RunRow:
        return self.rows[row]

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        r = self.rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(r, col)
        if role == SORT_ROLE:
            return self._raw(r, col)
        if role == ID_ROLE:
            return r.id
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == 6 and r.message:
                return r.message
            if col == 7:
                return r.lora_path or r.output_folder
            if col == 2:
                return r.model
        if role == Qt.ItemDataRole.ForegroundRole and col == 6 and r.status in STATUS_COLORS:
            return QColor(STATUS_COLORS[r.status])
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (4, 5):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    @staticmethod
    def _text(r: RunRow, col: int) -> str:
        if col == 0:
            return r.name
        if col == 1:
            return r.date_text
        if col == 2:
            return model_text(r.model)
        if col == 3:
            return r.precision
        if col == 4:
            return f"{r.steps}/{r.total_steps}" if r.total_steps else str(r.steps)
        if col == 5:
            return "" if r.final_loss is None or not math.isfinite(r.final_loss) else f"{r.final_loss:.4f}"
        if col == 6:
            return r.status
        return Path(r.lora_path).name if r.lora_path else r.output_folder

    @staticmethod
    def _raw(r: RunRow, col: int) -> Any:
        if col == 1:
            return r.created_at
        if col == 4:
            return r.steps
        if col == 5:
            return r.final_loss if r.final_loss is not None and math.isfinite(r.final_loss) else math.inf
        if col == 6:
            return STATUSES.index(r.status) if r.status in STATUSES else len(STATUSES)
        return RunsTableModel._text(r, col).lower()


class RunsFilter(QSortFilterProxyModel):
    """Sorts by ``SORT_ROLE``; keeps rows whose name, model, precision, status or output contain every
    word of the filter text (case-insensitive), and whose status is the one chosen (all when empty)."""

    def __init__(self, parent: Any = None):
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self._words: list[str] = []
        self._status = ""

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """The source model sorts (fast); this proxy keeps its order and only filters."""
        model = self.sourceModel()
        if model is not None:
            model.sort(column, order)

    def set_text(self, text: str) -> None:
        self._change(lambda: setattr(self, "_words", text.lower().split()))

    def set_status(self, status: str) -> None:
        self._change(lambda: setattr(self, "_status", status))

    def _change(self, apply: Any) -> None:
        """Change what the filter keeps (Qt 6.10 on: begin/endFilterChange; before: invalidateRowsFilter)."""
        if hasattr(self, "beginFilterChange"):
            self.beginFilterChange()
            apply()
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:
            apply()
            self.invalidateRowsFilter()

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:  # noqa: N802
        model = self.sourceModel()
        if not isinstance(model, RunsTableModel):
            return True
        r = model.row_at(source_row)
        if self._status and r.status != self._status:
            return False
        if not self._words:
            return True
        hay = " ".join((r.name, r.model, r.precision, r.status, r.output_folder, r.lora_path or "", r.date_text)).lower()
        return all(w in hay for w in self._words)
