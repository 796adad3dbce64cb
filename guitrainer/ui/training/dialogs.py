"""The dialogs the Training page opens: start problems, "start anyway?", a failed run, a run still going at close.

Each is non-blocking (``open()``) except the close question, which must be answered before the window
closes. Messages are plain words; a traceback goes under "Show Details…", never into a tooltip.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QSizePolicy,
    QSpacerItem,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)


def fit_title(box: QMessageBox) -> QMessageBox:
    """Make a message box at least as wide as its title, so window managers do not cut the title off.

    A spacer row in the box's own grid widens it (Qt's documented way); a style-sheet minimum width on the
    message label instead made Qt lay the text out for one width and show it at another, cutting lines off.
    """
    need = box.fontMetrics().horizontalAdvance(box.windowTitle()) + 160  # buttons and frame of the title bar
    grid = box.layout()
    if isinstance(grid, QGridLayout):
        spacer = QSpacerItem(need, 0, QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Expanding)
        grid.addItem(spacer, grid.rowCount(), 0, 1, grid.columnCount())
    return box


def bullets(lines: Sequence[str]) -> str:
    return "<ul style='margin-left:-20px'>" + "".join(f"<li>{html.escape(s)}</li>" for s in lines) + "</ul>"


def start_problems_box(parent: QWidget, errors: Sequence[str]) -> QMessageBox:
    """"Training cannot start yet:" and the problems (opened)."""
    box = QMessageBox(
        QMessageBox.Icon.Warning, "Cannot start training", "Training cannot start yet:", QMessageBox.StandardButton.Ok, parent
    )
    box.setObjectName("start_problems_box")
    box.setInformativeText(bullets(errors))
    fit_title(box)  # last: a later setText/setInformativeText rebuilds the box's layout
    box.open()
    return box


def start_confirm_box(parent: QWidget, points: Sequence[str], answered: Callable[[bool], None]) -> QMessageBox:
    """"Before you start:" the points, and Start anyway / Cancel (opened); ``answered(yes)`` follows."""
    box = QMessageBox(
        QMessageBox.Icon.Question,
        "Start anyway?",
        "Before you start:",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        parent,
    )
    box.setObjectName("start_confirm_box")
    box.setInformativeText(bullets(points) + "Start training anyway?")
    box.button(QMessageBox.StandardButton.Yes).setText("Start anyway")
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.finished.connect(lambda result: answered(result == QMessageBox.StandardButton.Yes))
    fit_title(box)  # last: a later setText/setInformativeText rebuilds the box's layout
    box.open()
    return box


def error_box(parent: QWidget, title: str, message: str, advice: Sequence[str], details: str) -> QMessageBox:
    """A non-blocking error dialog: the message, what to try, and the traceback under "Show Details…"."""
    box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, parent)
    box.setObjectName("training_error_box")
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if advice:
        box.setInformativeText("<b>What to try:</b>" + bullets(list(advice)))
    if details:
        box.setDetailedText(details)
    fit_title(box)  # last: a later setText/setInformativeText rebuilds the box's layout
    box.open()
    return box


def ask_close(parent: QWidget) -> str:
    """Ask what to do with a running training: "stop", "keep" or "cancel" (modal)."""
    box = QMessageBox(parent)
    box.setObjectName("close_box")
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle("Training is running")
    box.setText("Training is still running.")
    box.setInformativeText("Stop it now? The LoRA and a resumable state are saved first.")
    stop = box.addButton("Stop and save", QMessageBox.ButtonRole.AcceptRole)
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.RejectRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(keep)
    fit_title(box)  # last: a later setText/setInformativeText rebuilds the box's layout
    box.exec()
    clicked = box.clickedButton()
    if clicked is stop:
        return "stop"
    if clicked is keep:
        return "keep"
    return "cancel"


def finished_run_box(parent: QWidget, steps: int, epochs: int, answered: Callable[[int], None]) -> QDialog:
    """"The last run is complete" and a choice of more epochs (opened); ``answered(more_epochs)`` on yes."""
    dlg = QDialog(parent)
    dlg.setObjectName("finished_run_box")
    dlg.setWindowTitle("Run complete")
    dlg.setMinimumWidth(440)
    lay = QVBoxLayout(dlg)
    text = QLabel(
        f"The last run is complete: it trained all its {steps} steps ({epochs} epoch{'s' if epochs != 1 else ''}). "
        "Resuming it would train nothing more.<br><br>Train more epochs, starting from where it ended?",
        dlg,
    )
    text.setWordWrap(True)
    lay.addWidget(text)
    row = QHBoxLayout()
    row.addWidget(QLabel("Train", dlg))
    spin = QSpinBox(dlg)
    spin.setObjectName("more_epochs")
    spin.setRange(1, 1000)
    spin.setValue(max(1, epochs // 2))
    spin.valueChanged.connect(lambda n: spin.setSuffix(" more epoch" if n == 1 else " more epochs"))
    spin.setSuffix(" more epoch" if spin.value() == 1 else " more epochs")
    row.addWidget(spin)
    row.addStretch(1)
    lay.addLayout(row)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, dlg)
    train = buttons.addButton("Train more", QDialogButtonBox.ButtonRole.AcceptRole)
    train.setObjectName("train_more_button")
    buttons.accepted.connect(dlg.accept)
    buttons.rejected.connect(dlg.reject)
    lay.addWidget(buttons)
    dlg.accepted.connect(lambda: answered(spin.value()))
    dlg.open()
    return dlg


def open_in_file_manager(folder: Path) -> str:
    """Open ``folder`` (created first) in the file manager: "" when it opened, else what to tell the user."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"Cannot create the output folder {folder}: {e.strerror or e}"
    if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
        return f"Could not open a file manager; the files are in {folder}"
    return ""


def log_tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of a log, as details for a failure that came without any."""
    text = text.rstrip("\n")
    if not text:
        return ""
    tail = text.splitlines()[-lines:]
    return f"The last {len(tail)} lines of the log:\n\n" + "\n".join(tail)
