"""The Output page's "Save precision" box: what the fp16 check of the last saved LoRA found, with the numbers.

Shows one :class:`~guitrainer.core.precision.numerics.SaveReport`: the choice made (kept fp16 / switched to bf16),
a sentence with the totals, and a table per tensor (values over 65,504, values that become zero, values
that become subnormal, the largest magnitude), the tensors with findings first.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guitrainer.core.precision.numerics import SaveReport, TensorFinding, format_value

COLUMNS = ("Tensor", "Values", "Largest |v|", "> 65,504", "→ 0", "→ subnormal")
#: what each short header means (its tooltip)
COLUMN_TIPS = ("The LoRA tensor", "How many values it holds", "Its largest magnitude",
               "Values beyond fp16's largest (65,504): they would become infinite",
               "Values too small for fp16 even as subnormals: they would become zero",
               "Values fp16 keeps only as subnormals, with fewer significant bits")
OK_COLOR = "#2b8a3e"
WARN_COLOR = "#e8590c"
BAD_COLOR = "#e03131"
LOSS_TEXT = "#7a3e00"
LOSS_BACKGROUND = "#ffe8cc"
EMPTY_TEXT = "No LoRA saved yet in this session: after each save, the fp16 check's findings appear here."


class _Number(QTableWidgetItem):
    """A right-aligned cell that sorts by its number, not its text."""

    def __init__(self, value: float, text: str | None = None):
        super().__init__(text if text is not None else f"{value:,.0f}")
        self.value = value
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        return self.value < getattr(other, "value", 0.0)


def _severity(t: TensorFinding) -> tuple[int, int, int, float]:
    return (-t.over_max, -t.to_zero, -t.subnormal, -t.peak)


class SaveReportView(QGroupBox):
    """The last save's precision report; :meth:`show_report` after each save."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Save precision (last saved LoRA)", parent)
        self.setObjectName("save_report")
        self.report: SaveReport | None = None
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.choice_label = QLabel("")
        self.choice_label.setObjectName("save_report_choice")
        self.choice_label.hide()
        self.file_label = QLabel(EMPTY_TEXT)
        self.file_label.setObjectName("save_report_file")
        self.file_label.setWordWrap(True)
        self.file_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.file_label.setStyleSheet("color: palette(placeholder-text);")
        top.addWidget(self.choice_label)
        top.addWidget(self.file_label, 1)
        lay.addLayout(top)
        self.headline = QLabel("")
        self.headline.setObjectName("save_report_headline")
        self.headline.setWordWrap(True)
        self.headline.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.headline.hide()
        lay.addWidget(self.headline)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("save_report_table")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        for c, tip in enumerate(COLUMN_TIPS):  # short headers leave the tensor's name its room at 1366 px
            self.table.horizontalHeaderItem(c).setToolTip(tip)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(60)
        for c in range(1, len(COLUMNS)):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setMinimumHeight(96)  # a header and three rows; it scrolls inside, the page does not
        self.table.hide()
        lay.addWidget(self.table, 1)

    def show_report(self, report: SaveReport) -> None:
        """Show ``report`` (replaces the previous one)."""
        self.report = report
        color = OK_COLOR
        if report.used != report.requested:
            color = WARN_COLOR
        elif report.over_max:
            color = BAD_COLOR
        self.choice_label.setText(report.choice)
        self.choice_label.setStyleSheet(
            f"color: white; background: {color}; border-radius: 3px; padding: 2px 6px; font-weight: bold;"
        )
        self.choice_label.show()
        step = f" at step {report.step}" if report.step else ""
        self.file_label.setText(f"{Path(report.path).name}{step}, asked for {report.requested}, written as {report.used}")
        self.file_label.setToolTip(report.path)
        self.headline.setText(report.headline())
        self.headline.show()
        self._fill(sorted(report.tensors, key=_severity))
        self.table.setVisible(report.checked)

    def _fill(self, tensors: list[TensorFinding]) -> None:
        self.table.setSortingEnabled(False)
        self.table.setRowCount(len(tensors))
        for row, t in enumerate(tensors):
            name = QTableWidgetItem(t.name)
            name.setToolTip(t.name)
            self.table.setItem(row, 0, name)
            self.table.setItem(row, 1, _Number(t.values))
            self.table.setItem(row, 2, _Number(t.peak, format_value(t.peak)))
            for col, count, (fg, bg) in (
                (3, t.over_max, ("white", BAD_COLOR)),  # infinities: the file would be broken
                (4, t.to_zero, (LOSS_TEXT, LOSS_BACKGROUND)),  # precision lost, the file still works
                (5, t.subnormal, (LOSS_TEXT, LOSS_BACKGROUND)),
            ):
                cell = _Number(count)
                if count:
                    cell.setForeground(QBrush(QColor(fg)))
                    cell.setBackground(QBrush(QColor(bg)))
                self.table.setItem(row, col, cell)
        # worst first until the user clicks a header: no sort indicator, so enabling sorting keeps this order
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.DescendingOrder)
        self.table.setSortingEnabled(True)

    def rows(self) -> list[tuple[str, ...]]:
        """The table as text, row by row (tests, copy)."""
        return [
            tuple(self.table.item(r, c).text() for c in range(self.table.columnCount()))
            for r in range(self.table.rowCount())
        ]
