"""A log panel fed by ``logging``: records from any thread arrive on the GUI thread via a signal."""

from __future__ import annotations

import contextlib
import logging

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QColor, QFontDatabase, QTextCharFormat
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

log = logging.getLogger(__name__)

MAX_LINES = 5000


class _Emitter(QObject):
    record_emitted = Signal(str, int)  # formatted text, levelno


class QtLogHandler(logging.Handler):
    """Forwards each record as a Qt signal; emitting from another thread queues it to the receiver's thread."""

    def __init__(self, level: int = logging.INFO):
        super().__init__(level)
        self.emitter = _Emitter()
        self.setFormatter(logging.Formatter("%(asctime)s  %(levelname)-7s %(message)s", "%H:%M:%S"))

    @property
    def record_emitted(self) -> Signal:
        return self.emitter.record_emitted

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)
            return
        with contextlib.suppress(RuntimeError):  # the panel was deleted while a thread still logged
            self.emitter.record_emitted.emit(text, record.levelno)


class LogPanel(QWidget):
    """Read-only text view of log records; :meth:`attach` / :meth:`detach` hook it to a logger."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = QPlainTextEdit(self)
        self.view.setObjectName("log_view")
        self.view.setReadOnly(True)
        self.view.setMaximumBlockCount(MAX_LINES)
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.view.setPlaceholderText("Messages from the trainer appear here while it runs.")
        copy = QPushButton("Copy all")
        copy.clicked.connect(self._copy_all)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.view.clear)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(copy)
        row.addWidget(clear)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.view, 1)
        lay.addLayout(row)
        self.handler = QtLogHandler()
        self.handler.record_emitted.connect(self.append)
        self._logger: logging.Logger | None = None
        self._saved_level: int | None = None

    def attach(self, name: str = "guitrainer", level: int = logging.INFO) -> None:
        """Start showing records of logger ``name`` at ``level`` and above (lowers the logger's level if needed)."""
        if self._logger is not None:
            return
        logger = logging.getLogger(name)
        self.handler.setLevel(level)
        if logger.getEffectiveLevel() > level:
            self._saved_level = logger.level
            logger.setLevel(level)
        logger.addHandler(self.handler)
        self._logger = logger

    def detach(self) -> None:
        """Stop showing records; restore the logger's level."""
        if self._logger is None:
            return
        self._logger.removeHandler(self.handler)
        if self._saved_level is not None:
            self._logger.setLevel(self._saved_level)
            self._saved_level = None
        self._logger = None

    @property
    def attached(self) -> bool:
        return self._logger is not None

    def append(self, text: str, levelno: int = logging.INFO) -> None:
        """Add one line (warnings in orange, errors in red)."""
        fmt = QTextCharFormat()
        if levelno >= logging.ERROR:
            fmt.setForeground(QColor("#c92a2a"))
        elif levelno >= logging.WARNING:
            fmt.setForeground(QColor("#d9480f"))
        cursor = self.view.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        if not self.view.document().isEmpty():
            cursor.insertBlock()
        cursor.insertText(text, fmt)
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())

    def text(self) -> str:
        return self.view.toPlainText()

    def _copy_all(self) -> None:
        from PySide6.QtWidgets import QApplication

        QApplication.clipboard().setText(self.view.toPlainText())

    def closeEvent(self, event) -> None:  # noqa: N802, ANN001
        self.detach()
        super().closeEvent(event)
