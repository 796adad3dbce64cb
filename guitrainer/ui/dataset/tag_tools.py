"""Tag tools: bulk caption operations (each one undo step) and the tag frequency table."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guitrainer.core.dataset import scan as ds

log = logging.getLogger(__name__)

TagOperation = Callable[[str], str]


class TagToolsPanel(QWidget):
    """Emits ``operation_requested(description, op, scope)``; the page applies it and reports the count."""

    operation_requested = Signal(str, object, str)  # description, op(str) -> str, "selection" | "all"
    tag_clicked = Signal(str)  # filter the grid by this tag ("" clears)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)

        scope_row = QHBoxLayout()
        scope_row.addWidget(QLabel("Apply to"))
        self.scope = QComboBox(self)
        self.scope.setObjectName("tag_scope")
        self.scope.addItem("Selected images", "selection")
        self.scope.addItem("All images", "all")
        scope_row.addWidget(self.scope)
        scope_row.addStretch(1)
        lay.addLayout(scope_row)

        ops = self.ops = QGroupBox("Edit tags", self)
        form = QFormLayout(ops)
        self.trigger = QLineEdit(self)
        self.trigger.setPlaceholderText("e.g. mychar")
        form.addRow("Trigger word", self._with_button(self.trigger, "Add to front", self._add_trigger))
        self.find = QLineEdit(self)
        self.find.setPlaceholderText("find")
        self.replace = QLineEdit(self)
        self.replace.setPlaceholderText("replace with")
        self.regex = QCheckBox("Regex", self)
        self.regex.setToolTip("Treat 'find' as a Python regular expression (\\1 in the replacement works).")
        fr = QWidget(self)
        frl = QHBoxLayout(fr)
        frl.setContentsMargins(0, 0, 0, 0)
        frl.addWidget(self.find, 1)
        frl.addWidget(self.replace, 1)
        frl.addWidget(self.regex)
        b = QPushButton("Replace", self)
        b.clicked.connect(self._find_replace)
        frl.addWidget(b)
        form.addRow("Find / replace", fr)
        self.remove = QLineEdit(self)
        self.remove.setPlaceholderText("tag to remove")
        form.addRow("Remove tag", self._with_button(self.remove, "Remove", self._remove))
        self.rename_old = QLineEdit(self)
        self.rename_old.setPlaceholderText("old tag")
        self.rename_new = QLineEdit(self)
        self.rename_new.setPlaceholderText("new tag")
        rn = QWidget(self)
        rnl = QHBoxLayout(rn)
        rnl.setContentsMargins(0, 0, 0, 0)
        rnl.addWidget(self.rename_old, 1)
        rnl.addWidget(self.rename_new, 1)
        b = QPushButton("Rename", self)
        b.clicked.connect(self._rename)
        rnl.addWidget(b)
        form.addRow("Rename tag", rn)
        tidy = QWidget(self)
        tl = QHBoxLayout(tidy)
        tl.setContentsMargins(0, 0, 0, 0)
        self.keep_first = QSpinBox(self)
        self.keep_first.setRange(0, 20)
        self.keep_first.setPrefix("keep first ")
        self.keep_first.setToolTip("Leave this many leading tags (e.g. the trigger word) where they are.")
        sort_b = QPushButton("Sort A–Z", self)
        sort_b.clicked.connect(self._sort)
        dedupe_b = QPushButton("Remove duplicates", self)
        dedupe_b.clicked.connect(self._dedupe)
        tl.addWidget(sort_b)
        tl.addWidget(self.keep_first)
        tl.addWidget(dedupe_b)
        tl.addStretch(1)
        form.addRow("Tidy", tidy)
        lay.addWidget(ops)
        lay.addWidget(self._build_frequency(), 1)

    def _build_frequency(self) -> QGroupBox:
        """The tag frequency table: click a tag to filter the grid by it."""
        freq = QGroupBox("Tag frequency", self)
        fl = QVBoxLayout(freq)
        hint = QLabel("Click a tag to show only images that have it.", self)
        hint.setStyleSheet("color: palette(placeholder-text);")
        fl.addWidget(hint)
        self.table = QTableWidget(0, 2, self)
        self.table.setObjectName("tag_table")
        self.table.setHorizontalHeaderLabels(["Tag", "Images"])
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.cellClicked.connect(self._on_cell)
        fl.addWidget(self.table, 1)
        clear = QPushButton("Show all tags", self)
        clear.clicked.connect(lambda: (self.table.clearSelection(), self.tag_clicked.emit("")))
        fl.addWidget(clear, 0, Qt.AlignmentFlag.AlignLeft)
        return freq

    def _with_button(self, edit: QLineEdit, text: str, slot: Callable[[], None]) -> QWidget:
        w = QWidget(self)
        row = QHBoxLayout(w)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(edit, 1)
        b = QPushButton(text, w)
        b.clicked.connect(slot)
        edit.returnPressed.connect(slot)
        row.addWidget(b)
        return w

    def set_busy(self, busy: bool) -> None:
        """While an edit is being written the operations are disabled (the frequency table stays usable)."""
        self.scope.setEnabled(not busy)
        self.ops.setEnabled(not busy)
        self.ops.setToolTip("Wait until the captions are written." if busy else "")

    # ------------------------------------------------------------------ operations
    def _emit(self, description: str, op: TagOperation) -> None:
        if not self.ops.isEnabled():  # busy writing captions (see set_busy)
            return
        self.operation_requested.emit(description, op, self.scope.currentData())

    def _add_trigger(self) -> None:
        word = self.trigger.text().strip()
        if word:
            self._emit(f"Add trigger word “{word}”", functools.partial(ds.add_trigger, word=word))

    def _find_replace(self) -> None:
        find = self.find.text()
        if not find:
            return
        regex = self.regex.isChecked()
        if regex:
            try:
                re.compile(find)
            except re.error as e:
                self.find.setToolTip(f"Not a valid regular expression: {e}")
                self.find.setStyleSheet("border: 1px solid #c03030;")
                return
        self.find.setStyleSheet("")
        self._emit(
            f"Replace “{find}” with “{self.replace.text()}”",
            functools.partial(ds.find_replace, find=find, replace=self.replace.text(), regex=regex),
        )

    def _remove(self) -> None:
        tag = self.remove.text().strip()
        if tag:
            self._emit(f"Remove tag “{tag}”", functools.partial(ds.remove_tag, tag=tag))

    def _rename(self) -> None:
        old, new = self.rename_old.text().strip(), self.rename_new.text().strip()
        if old:
            self._emit(f"Rename tag “{old}” to “{new}”", ds.RenameTag(old, new))  # as data: a tag filter follows it

    def _sort(self) -> None:
        self._emit("Sort tags", functools.partial(ds.sort_tags, keep_first=self.keep_first.value()))

    def _dedupe(self) -> None:
        self._emit("Remove duplicate tags", ds.dedupe_tags)

    # ------------------------------------------------------------------ frequency table
    def set_frequencies(self, freq: list[tuple[str, int]], limit: int = 500) -> None:
        self.table.setSortingEnabled(False)
        rows = freq[:limit]
        self.table.setRowCount(len(rows))
        for r, (tag, n) in enumerate(rows):
            self.table.setItem(r, 0, QTableWidgetItem(tag))
            count = QTableWidgetItem()
            count.setData(Qt.ItemDataRole.DisplayRole, n)
            count.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(r, 1, count)

    def _on_cell(self, row: int, _col: int) -> None:
        it = self.table.item(row, 0)
        if it is not None:
            self.remove.setText(it.text())
            self.rename_old.setText(it.text())
            self.tag_clicked.emit(it.text())
