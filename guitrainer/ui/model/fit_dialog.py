"""FitDialog: "Fit to this card" — the memory savers chosen for a GPU (this computer's, or a size picked for
planning), shown as a diff of settings with the estimate before and after, applied with one click.

The choice is :func:`guitrainer.core.memory.fit.fit` (estimates only: quick, on the GUI thread). Beside the
fastest choice, the next ones that fit and cost differently can be picked instead; the precision lab can then
measure the applied settings on this machine.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QSignalBlocker
from PySide6.QtGui import QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.units import GiB, format_bytes
from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.memory.fit import FitOption, FitResult, card_budget, fit
from guitrainer.ui.binding import ConfigBinding

#: the card sizes offered for planning (GB as cards are sold)
CARD_SIZES = (4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 80)
THIS_CARD = "this"


class FitDialog(QDialog):
    """Choose a card, see what Fit changes and what it costs, apply it."""

    def __init__(self, binding: ConfigBinding, device: Any = None, parent: QWidget | None = None, *,
                 machine_ram: int | None = None, images: int | None = None, planned: int | None = None) -> None:
        """``planned``: the card size to start from where this computer has no GPU (the preset's card, "… — 8 GB")."""
        super().__init__(parent)
        self.setWindowTitle("Fit to this card")
        self.binding = binding
        self.device = device if isinstance(device, DeviceInfo) else None
        self.machine_ram = machine_ram
        self.images = images
        self.result: FitResult | None = None
        self._options: list[FitOption] = []

        self.card = QComboBox(self)
        self.card.setObjectName("fit_card")
        budget, said = card_budget(self.device) if self.device is not None else (None, "")
        if budget is not None and self.device is not None:
            self.card.addItem(f"This computer's {self.device.name}: {said}", THIS_CARD)
        for size in CARD_SIZES:
            self.card.addItem(f"A card of {size} GB", size * GiB)
        if budget is None:
            self.card.setCurrentIndex(self.card.findData(_nearest(planned or _device_total(device))))
        self.card.currentIndexChanged.connect(self.refresh)
        self.option = QComboBox(self)
        self.option.setObjectName("fit_option")
        self.option.setToolTip("The fastest choice that fits, or one of the next ones (slower, or at another cost) "
                               "to measure in the precision lab")
        self.option.currentIndexChanged.connect(self._show_option)
        self.summary = QLabel(self)
        self.summary.setObjectName("fit_summary")
        self.summary.setWordWrap(True)
        self.table = QTableWidget(0, 4, self)
        self.table.setObjectName("fit_changes")
        self.table.setHorizontalHeaderLabels(["Setting", "Now", "Fit", "What it costs"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setWordWrap(True)
        header = self.table.horizontalHeader()
        for column in range(3):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.estimate_label = QLabel(self)
        self.estimate_label.setObjectName("fit_estimate")
        self.estimate_label.setWordWrap(True)
        note = QLabel("The costs are estimates from published figures; after applying, the precision lab (Measure "
                      "on this machine…) times the settings on this computer.", self)
        note.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.apply_button = self.buttons.addButton("Apply", QDialogButtonBox.ButtonRole.AcceptRole)
        self.apply_button.setObjectName("fit_apply")
        self.buttons.accepted.connect(self.apply)
        self.buttons.rejected.connect(self.reject)

        form = QFormLayout()
        form.addRow("Card", self.card)
        form.addRow("Choice", self.option)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.estimate_label)
        layout.addWidget(note)
        layout.addWidget(self.buttons)
        self.resize(760, 420)
        self.refresh()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.table.resizeRowsToContents()  # the costs wrap to the column's width as it is now

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        self.table.resizeRowsToContents()

    def budget(self) -> int:
        """The bytes of the card chosen."""
        data = self.card.currentData()
        if data == THIS_CARD and self.device is not None:
            budget, _said = card_budget(self.device)
            return int(budget or 0)
        return int(data)

    def refresh(self) -> None:
        """Choose again for the card picked."""
        this_card = self.card.currentData() == THIS_CARD
        config: TrainingConfig = self.binding.config
        self.result = fit(config, self.budget(), self.device if this_card else None,
                          machine_ram=self.machine_ram, images=self.images)
        r = self.result
        self._options = [o for o in (r.best, *r.alternatives) if o is not None]
        if not self._options and r.ram_limited is not None:  # shown to plan with: it fits the card, not this RAM
            self._options = [r.ram_limited[0]]
        with QSignalBlocker(self.option):
            self.option.clear()
            for i, o in enumerate(self._options):
                what = "Fastest" if i == 0 else "Also fits"
                self.option.addItem(f"{what}: {format_bytes(o.total)}, about {o.slower:.2f}× the step time "
                                    "without memory savers", i)
        self.option.setEnabled(len(self._options) > 1)
        self.summary.setText(r.summary)
        self._show_option()

    def chosen(self) -> FitOption | None:
        i = self.option.currentIndex()
        return self._options[i] if 0 <= i < len(self._options) else None

    def apply(self) -> None:
        """Make the chosen changes (each one setting) and close."""
        option = self.chosen()
        if option is None:
            self.reject()
            return
        for change in option.changes:
            self.binding.set(change.path, change.after)
        self.accept()

    def _show_option(self, *_args: object) -> None:
        option = self.chosen()
        r = self.result
        changes = option.changes if option is not None else ()
        self.table.setRowCount(len(changes))
        for row, change in enumerate(changes):
            cells = (change.label, change.shown(change.before), change.shown(change.after), change.why)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"<p>{html.escape(text)}</p>")
                self.table.setItem(row, column, item)
        self.table.resizeRowsToContents()
        if r is None:
            return
        budget = format_bytes(r.budget)
        planned = ("this computer's GPU" if self.card.currentData() == THIS_CARD else
                   f"a CUDA card of {budget}, its CUDA context and allocator slack included (the meter shows this "
                   "computer's)")
        if option is None:
            least = format_bytes(r.smallest.total) if r.smallest else "?"
            self.estimate_label.setText(f"Estimated now {format_bytes(r.before.total)} on {planned}; the least any "
                                        f"choice reaches is {least}.")
        elif r.best is None and r.ram_limited is not None:
            _option, need, have = r.ram_limited
            self.estimate_label.setText(f"Estimated {format_bytes(r.before.total)} now → {format_bytes(option.total)} "
                                        f"with these settings on {planned}; system RAM {format_bytes(need)}, this "
                                        f"computer {format_bytes(have)}.")
        else:
            self.estimate_label.setText(f"Estimated {format_bytes(r.before.total)} now → {format_bytes(option.total)} "
                                        f"with these settings on {planned}.")
        self.apply_button.setEnabled(option is not None and bool(option.changes))


def _device_total(device: Any) -> int | None:
    total = getattr(device, "total_memory", None)
    return int(total) if total else None


def _nearest(total: int | None) -> int:
    """The offered card size nearest ``total`` bytes (12 GB when unknown)."""
    if not total:
        return 12 * GiB
    return min((s * GiB for s in CARD_SIZES), key=lambda b: abs(b - total))
