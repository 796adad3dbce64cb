"""Help ▸ Environment (also shown on first start): the machine's facts and a fix for each problem."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.units import format_bytes
from guitrainer.core import cache_store
from guitrainer.core.dataset.report import plural
from guitrainer.ui.device_service import DeviceService
from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.icons import level_icon
from guitrainer.ui.workers import call_in_thread

log = logging.getLogger(__name__)


KIND_NAMES = {"latents": "latents", "text": "text embeddings", "thumbs": "thumbnails"}


class EnvironmentDialog(QDialog):
    """A table of facts; each problem row says what to do."""

    checked = Signal(str)  # the worst level found

    def __init__(
        self,
        folders: dict[str, Path | str],
        parent: QWidget | None = None,
        *,
        first_run: bool = False,
        device_service: DeviceService | None = None,
    ):
        super().__init__(parent)
        self.folders = folders
        self.setWindowTitle("Welcome — what this computer can do" if first_run else "Environment")
        self.resize(980, 460)
        lay = QVBoxLayout(self)
        intro = "Welcome to guitrainer. Here is what this computer can do for training." if first_run else ""
        self.summary = QLabel(intro + ("<br>" if intro else "") + "Checking this computer…")
        self.summary.setWordWrap(True)
        lay.addWidget(self.summary)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Check", "This computer", "What to do"])
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.table.setWordWrap(True)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        lay.addWidget(self.table, 1)
        cache_row = QHBoxLayout()
        self.cache_label = QLabel("Disk cache: measuring…")
        self.cache_label.setWordWrap(True)
        self.cache_label.setToolTip(
            "Latents, text embeddings and thumbnails kept so the next run and the next visit start fast. "
            "Training keeps the latents and text embeddings under "
            f"{format_bytes(cache_store.DEFAULT_BUDGET_BYTES)}, removing the least recently used."
        )
        self.clear_cache_button = QPushButton("Clear cache…")
        self.clear_cache_button.setEnabled(False)
        self.clear_cache_button.clicked.connect(self.clear_cache)
        cache_row.addWidget(self.cache_label, 1)
        cache_row.addWidget(self.clear_cache_button)
        lay.addLayout(cache_row)
        self.cache_usage: list = []
        self.cleared_text = ""
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = buttons.addButton("Copy report", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self._copy)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.items: list = []
        self._intro = intro
        # the window's one device probe (its result, or its error, is checked off the GUI thread)
        self.devices = device_service or DeviceService(parent=self)
        self.devices.when_known(self._check_device, self._probe_failed)
        self._start_job(cache_store.usage, self._show_cache)

    # ------------------------------------------------------------------ the environment check
    def _check_device(self, device: object) -> None:
        from guitrainer.core.device import environment

        folders = self.folders
        call_in_thread(lambda: environment.check(device, folders), self.show_items, self._check_failed, parent=self)

    def _probe_failed(self, message: str) -> None:
        self._check_failed(f"the device could not be probed ({message})", "")

    def _check_failed(self, message: str, _details: str) -> None:
        from guitrainer.core.device import environment

        self.show_items([environment.EnvItem("Check", f"failed: {message}", "error", "Please report this.")])

    # ------------------------------------------------------------------ disk cache
    def _start_job(self, fn: Callable[[], object], done: Callable[[object], None]) -> None:
        """``fn()`` off the GUI thread; ``done`` gets its result, or the exception when it raised."""
        call_in_thread(fn, done, lambda message, _details: done(RuntimeError(message)), parent=self)

    def _show_cache(self, result: object) -> None:
        if isinstance(result, Exception):
            self.cache_label.setText(f"Disk cache: could not be measured ({result}).")
            return
        self.cache_usage = list(result)  # type: ignore[call-overload]
        total = sum(u.bytes for u in self.cache_usage)
        parts = ", ".join(f"{KIND_NAMES.get(u.kind, u.kind)} {format_bytes(u.bytes)}" for u in self.cache_usage if u.files)
        where = cache_store.paths.cache_dir()
        self.cache_label.setText(f"Disk cache: {format_bytes(total)}" + (f" ({parts})" if parts else "") + f" in {where}")
        self.clear_cache_button.setEnabled(total > 0)

    def clear_cache(self, *, confirm: bool = True) -> None:
        """Remove the cached latents, text embeddings and thumbnails (asks first; runs in the background)."""
        total = sum(u.bytes for u in self.cache_usage)
        if confirm:
            answer = messages.question(
                self,
                "Clear the disk cache?",
                f"Remove {format_bytes(total)} of cached latents, text embeddings and thumbnails?\n\n"
                "Nothing you made is removed: the next run encodes its images again, and the dataset grid "
                "makes its thumbnails again.",
            )
            if answer != "yes":
                return
        self.clear_cache_button.setEnabled(False)
        self.cache_label.setText("Disk cache: clearing…")
        self._start_job(cache_store.clear, self._cleared)

    def _cleared(self, result: object) -> None:
        if isinstance(result, Exception):
            self.cache_label.setText(f"Disk cache: clearing failed ({result}).")
            return
        failed = f"; {plural(result.failed, 'file')} could not be removed (in use?)" if result.failed else ""  # type: ignore[attr-defined]
        self._start_job(cache_store.usage, self._show_cache)
        self.cleared_text = f"Removed {plural(result.files, 'file')}, {format_bytes(result.bytes)}{failed}."  # type: ignore[attr-defined]
        self.summary.setText(self.summary.text() + f"<br>{self.cleared_text}")

    def show_items(self, items: list) -> None:
        from guitrainer.core.device.environment import worst

        self.items = items
        self.table.setRowCount(len(items))
        for row, item in enumerate(items):
            head = QTableWidgetItem(level_icon(self, item.level), item.label)
            self.table.setItem(row, 0, head)
            self.table.setItem(row, 1, QTableWidgetItem(item.value))
            fix = QTableWidgetItem(item.fix or "—")
            fix.setToolTip(item.fix)
            self.table.setItem(row, 2, fix)
        self.fit_columns()
        level = worst(items)
        verdict = {
            "ok": "Everything needed for training is in place.",
            "info": "Ready to train. Notes below.",
            "warning": "You can train, but read the warnings below.",
            "error": "Something must be fixed before training on this computer works well.",
        }[level]
        self.summary.setText((self._intro + "<br>" if self._intro else "") + f"<b>{verdict}</b>")
        self.checked.emit(level)

    def fit_columns(self) -> None:
        """Every column on screen: the first two as wide as their text (capped), the advice takes the rest
        and wraps, so nothing is off to the right."""
        self.table.resizeColumnsToContents()
        width = self.table.viewport().width() or self.width() - 40
        first = min(self.table.columnWidth(0), 200)
        second = min(self.table.columnWidth(1), max(200, width // 3))
        self.table.setColumnWidth(0, first)
        self.table.setColumnWidth(1, second)
        self.table.setColumnWidth(2, max(220, width - first - second - 4))
        self.table.resizeRowsToContents()

    def resizeEvent(self, event) -> None:  # noqa: N802, ANN001 - Qt override
        super().resizeEvent(event)
        if self.items:
            self.fit_columns()

    def report_text(self) -> str:
        return "\n".join(f"[{i.level}] {i.label}: {i.value}" + (f" — {i.fix}" if i.fix else "") for i in self.items)

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.report_text())


def default_folders(output_folder: str) -> dict[str, Path | str]:
    from guitrainer.base import paths

    return {"output": paths.expand(output_folder), "cache": paths.cache_dir()}



