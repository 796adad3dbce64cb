"""The dialogs the Training page opens: start problems, "start anyway?", a failed run, a run still going at close.

Each is non-blocking (``open()``) except the close question, which must be answered before the window
closes. Messages are plain words; a traceback goes under "Show Details…", never into a tooltip.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)


def fit_title(box: QMessageBox) -> QMessageBox:
    """Make a message box at least as wide as its title, so window managers do not cut the title off."""
    need = box.fontMetrics().horizontalAdvance(box.windowTitle()) + 160  # buttons and frame of the title bar
    box.setStyleSheet(f"QLabel#qt_msgbox_label {{ min-width: {max(0, need - 80)}px; }}")
    return box


def bullets(lines: Sequence[str]) -> str:
    return "<ul style='margin-left:-20px'>" + "".join(f"<li>{html.escape(s)}</li>" for s in lines) + "</ul>"


def start_problems_box(parent: QWidget, errors: Sequence[str]) -> QMessageBox:
    """"Training cannot start yet:" and the problems (opened)."""
    box = QMessageBox(
        QMessageBox.Icon.Warning, "Cannot start training", "Training cannot start yet:", QMessageBox.StandardButton.Ok, parent
    )
    box.setObjectName("start_problems_box")
    fit_title(box)
    box.setInformativeText(bullets(errors))
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
    fit_title(box)
    box.setInformativeText(bullets(points) + "Start training anyway?")
    box.button(QMessageBox.StandardButton.Yes).setText("Start anyway")
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.finished.connect(lambda result: answered(result == QMessageBox.StandardButton.Yes))
    box.open()
    return box


def error_box(parent: QWidget, title: str, message: str, advice: Sequence[str], details: str) -> QMessageBox:
    """A non-blocking error dialog: the message, what to try, and the traceback under "Show Details…"."""
    box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, parent)
    box.setObjectName("training_error_box")
    fit_title(box)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if advice:
        box.setInformativeText("<b>What to try:</b>" + bullets(list(advice)))
    if details:
        box.setDetailedText(details)
    box.open()
    return box


def ask_close(parent: QWidget) -> str:
    """Ask what to do with a running training: "stop", "keep" or "cancel" (modal)."""
    box = QMessageBox(parent)
    box.setObjectName("close_box")
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle("Training is running")
    fit_title(box)
    box.setText("Training is still running.")
    box.setInformativeText("Stop it now? The LoRA and a resumable state are saved first.")
    stop = box.addButton("Stop and save", QMessageBox.ButtonRole.AcceptRole)
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.RejectRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(keep)
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
    dlg.setWindowTitle("The last run is complete")
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
    spin.setSuffix(" more epochs")
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
