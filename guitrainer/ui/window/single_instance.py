"""One running app per user: a second launch hands its files to the first and exits.

Double-clicking a preset while the app runs opens it in the running window instead of a
second app competing for the same GPU. ``--new-instance`` starts another one anyway.
"""

from __future__ import annotations

import getpass
import json
import logging
import re

from PySide6.QtCore import QEvent, QObject, QTimer, Signal
from PySide6.QtGui import QFileOpenEvent
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

#: the longest hand-over message read: a JSON list of file paths (thousands of them fit)
MAX_MESSAGE_BYTES = 1 << 20


def server_name(app_name: str) -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "user"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{app_name}-{user}")


def send_to_running(name: str, files: list[str], timeout_ms: int = 500) -> bool:
    """True when another instance took the files (this process should exit)."""
    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(timeout_ms):
        return False
    sock.write(json.dumps({"files": files}).encode("utf-8") + b"\n")
    sock.flush()
    ok = sock.waitForBytesWritten(timeout_ms) or sock.bytesToWrite() == 0
    sock.disconnectFromServer()
    return ok


class InstanceServer(QObject):
    """Listens for later launches; emits their files."""

    files_received = Signal(list)

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self._server = QLocalServer(self)
        if not self._server.listen(name):
            QLocalServer.removeServer(name)  # a stale socket from a crashed run
            self._server.listen(name)
        self._server.newConnection.connect(self._accept)

    @property
    def listening(self) -> bool:
        return self._server.isListening()

    def _accept(self) -> None:
        while self._server.hasPendingConnections():
            sock = self._server.nextPendingConnection()
            sock.setParent(self)
            sock.setProperty("buffer", b"")
            sock.readyRead.connect(lambda s=sock: self._read(s))

    def _read(self, sock: QLocalSocket) -> None:
        data = bytes(sock.property("buffer") or b"") + bytes(sock.readAll())
        if len(data) > MAX_MESSAGE_BYTES:  # no launch sends that much: whatever it is, it is not read without end
            log.warning("ignored a message of over %d bytes from another launch", MAX_MESSAGE_BYTES)
            sock.readyRead.disconnect()
            sock.abort()
            sock.deleteLater()
            return
        sock.setProperty("buffer", data)
        if not data.endswith(b"\n"):
            return  # the message is one JSON line; wait for the rest
        sock.readyRead.disconnect()
        sock.deleteLater()
        try:
            files = json.loads(data.decode("utf-8")).get("files", [])
        except (ValueError, AttributeError):
            log.warning("ignored a malformed message from another launch")
            return
        self.files_received.emit([str(f) for f in files])


class FileOpenFilter(QObject):
    """Files the desktop hands to the running app as events rather than arguments.

    macOS delivers a preset double-clicked in Finder, or a folder dropped on the Dock icon, as a
    ``QFileOpenEvent`` sent to the QApplication (also at launch, before the window exists). Install
    this on the application: paths arriving within 100 ms are emitted together, once.
    """

    files_opened = Signal(list)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._pending: list[str] = []
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(100)  # Finder sends one event per selected file
        self._timer.timeout.connect(self._flush)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.FileOpen and isinstance(event, QFileOpenEvent):
            path = event.file() or event.url().toLocalFile()
            if path:
                self._pending.append(path)
                self._timer.start()
            return True
        return super().eventFilter(watched, event)

    def _flush(self) -> None:
        paths, self._pending = self._pending, []
        if paths:
            self.files_opened.emit(paths)
