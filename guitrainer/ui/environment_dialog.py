"""Help ▸ Environment (also shown on first start): the machine's facts and a fix for each problem."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guitrainer.ui.icons import level_icon

log = logging.getLogger(__name__)



class _ProbeSignals(QObject):
    done = Signal(object)


class _Probe(QRunnable):
    """Runs the device probe (imports torch) off the GUI thread."""

    def __init__(self, folders: dict[str, Path | str]):
        super().__init__()
        self.folders = folders
        self.signals = _ProbeSignals()

    def run(self) -> None:
        from guitrainer.core import environment, hardware

        try:
            items = environment.check(hardware.probe(), self.folders)
        except Exception as e:  # noqa: BLE001 - shown to the user, never a crash
            log.exception("environment check failed")
            items = [environment.EnvItem("Check", f"failed: {e}", "error", "Please report this.")]
        self.signals.done.emit(items)


class EnvironmentDialog(QDialog):
    """A table of facts; each problem row says what to do."""

    checked = Signal(str)  # the worst level found

    def __init__(self, folders: dict[str, Path | str], parent: QWidget | None = None, *, first_run: bool = False):
        super().__init__(parent)
        self.setWindowTitle("Environment")
        self.resize(820, 380)
        lay = QVBoxLayout(self)
        intro = "Welcome to guitrainer. Here is what this computer can do for training." if first_run else ""
        self.summary = QLabel(intro + ("<br>" if intro else "") + "Checking this computer…")
        self.summary.setWordWrap(True)
        lay.addWidget(self.summary)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["", "Value", "What to do"])
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setWordWrap(True)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        lay.addWidget(self.table, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = buttons.addButton("Copy report", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self._copy)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.items: list = []
        self._intro = intro
        probe = _Probe(folders)
        probe.signals.done.connect(self.show_items)
        self._probe = probe  # keep the signals object alive
        QThreadPool.globalInstance().start(probe)

    def show_items(self, items: list) -> None:
        from guitrainer.core.environment import worst

        self.items = items
        self.table.setRowCount(len(items))
        for row, item in enumerate(items):
            head = QTableWidgetItem(level_icon(self, item.level), item.label)
            self.table.setItem(row, 0, head)
            self.table.setItem(row, 1, QTableWidgetItem(item.value))
            fix = QTableWidgetItem(item.fix or "—")
            fix.setToolTip(item.fix)
            self.table.setItem(row, 2, fix)
        self.table.resizeColumnsToContents()
        self.table.setColumnWidth(2, max(300, self.table.columnWidth(2)))
        self.table.resizeRowsToContents()
        level = worst(items)
        verdict = {
            "ok": "Everything needed for training is in place.",
            "info": "Ready to train. Notes below.",
            "warning": "You can train, but read the warnings below.",
            "error": "Something must be fixed before training on this computer works well.",
        }[level]
        self.summary.setText((self._intro + "<br>" if self._intro else "") + f"<b>{verdict}</b>")
        self.checked.emit(level)

    def report_text(self) -> str:
        return "\n".join(f"[{i.level}] {i.label}: {i.value}" + (f" — {i.fix}" if i.fix else "") for i in self.items)

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.report_text())


def default_folders(output_folder: str) -> dict[str, Path | str]:
    from guitrainer.core import paths

    return {"output": paths.expand(output_folder), "cache": paths.cache_dir()}



