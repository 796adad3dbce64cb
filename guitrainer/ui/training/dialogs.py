"""The dialogs the Training page opens: start problems, "start anyway?", a failed run, a run still going at close.

Each is non-blocking (``open()``) except the close question, which must be answered before the window
closes. Messages are plain words; a traceback goes under "Show Details…", never into a tooltip. The message
boxes are made by :mod:`guitrainer.ui.widgets.messages`; this module says what they say.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.desktop import open_with_desktop
from guitrainer.ui.widgets.messages import Button, MessageBox


def bullets(lines: Sequence[str]) -> str:
    return "<ul style='margin-left:-20px'>" + "".join(f"<li>{html.escape(s)}</li>" for s in lines) + "</ul>"


def start_problems_box(parent: QWidget, errors: Sequence[str]) -> MessageBox:
    """"Training cannot start yet:" and the problems (opened)."""
    return messages.warning(
        parent, "Cannot start training", "Training cannot start yet:", info=bullets(errors), name="start_problems_box"
    )


def start_confirm_box(parent: QWidget, points: Sequence[str], answered: Callable[[bool], None]) -> MessageBox:
    """"Before you start:" the points, and Start anyway / Cancel (opened); ``answered(yes)`` follows."""
    return messages.ask(
        parent,
        "Start anyway?",
        "Before you start:",
        (Button("yes", "Start anyway"), Button("cancel")),
        lambda answer: answered(answer == "yes"),
        info=bullets(points) + "Start training anyway?",
        default="cancel",
        name="start_confirm_box",
    )


def error_box(parent: QWidget, title: str, message: str, advice: Sequence[str], details: str) -> MessageBox:
    """A non-blocking error dialog: the message, what to try, and the traceback under "Show Details…"."""
    info = "<b>What to try:</b>" + bullets(list(advice)) if advice else ""
    return messages.error(parent, title, message, info=info, details=details, name="training_error_box")


def ask_close(parent: QWidget) -> str:
    """Ask what to do with a running training: "stop", "keep" or "cancel" (modal)."""
    answer = messages.question(
        parent,
        "Training is running",
        "Training is still running.",
        (Button("accept", "Stop and save", "stop"), Button("reject", "Keep training", "keep"), Button("cancel")),
        info="Stop it now? The LoRA and a resumable state are saved first.",
        default="keep",
        name="close_box",
    )
    return answer if answer in ("stop", "keep") else "cancel"


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


def open_in_file_manager(parent: QWidget, folder: Path) -> str:
    """Open ``folder`` (created first) in the file manager: "" when it opened, else what to tell the user (a
    failed open also says so in a message that offers to copy the path: :func:`~guitrainer.ui.widgets.desktop.open_with_desktop`)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"Cannot create the output folder {folder}: {e.strerror or e}"
    if not open_with_desktop(parent, folder, "the output folder"):
        return f"Could not open a file manager; the files are in {folder}"
    return ""


def log_tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of a log, as details for a failure that came without any."""
    text = text.rstrip("\n")
    if not text:
        return ""
    tail = text.splitlines()[-lines:]
    return f"The last {len(tail)} lines of the log:\n\n" + "\n".join(tail)
