"""Opening a folder, a file or a web address with the desktop's own program — and saying so when none opens it.

``QDesktopServices.openUrl`` answers False where no program handles the thing (no file manager on a bare
desktop, nothing registered for ``.md`` files, no web browser): every open in the app goes through
:func:`open_with_desktop`, which then tells the user what could not be opened, where it is, and offers to copy
the path (or address) to open it by hand. Nothing is ignored.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QWidget

from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.messages import Button, MessageBox

log = logging.getLogger(__name__)


def as_url(target: Path | str | QUrl) -> QUrl:
    """A local path (a :class:`Path`, or text that is not a web address) as a file URL; a web address as it is."""
    if isinstance(target, QUrl):
        return target
    text = str(target)
    if isinstance(target, str) and "://" in text:
        return QUrl(text)
    return QUrl.fromLocalFile(text)


def shown(url: QUrl) -> str:
    """What the user copies: the path of a local file, else the address."""
    return url.toLocalFile() if url.isLocalFile() else url.toString()


def open_with_desktop(parent: QWidget | None, target: Path | str | QUrl, what: str) -> bool:
    """Open ``target`` with the program the desktop has for it. True when one opened it; False after telling the
    user (non-blocking, see :func:`say_not_opened`). ``what`` names it in the message: "the output folder"."""
    url = as_url(target)
    if QDesktopServices.openUrl(url):
        return True
    say_not_opened(parent, url, what)
    return False


def say_not_opened(parent: QWidget | None, url: QUrl, what: str) -> MessageBox:
    """"Could not open the output folder": what, where, and a button that copies its path to the clipboard."""
    where = shown(url)
    local = url.isLocalFile()
    log.warning("no program opened %s: %s", what, where)
    program = "file manager or program" if local else "web browser"
    noun = "path" if local else "address"

    def answered(answer: str) -> None:
        if answer == "copy":
            clipboard = QGuiApplication.clipboard()
            if clipboard is not None:
                clipboard.setText(where)

    return messages.ask(
        parent,
        f"Could not open {what}",
        f"No {program} on this computer opened {what}:\n{where}",
        (Button("accept", f"Copy the {noun}", "copy", name="copy_path_button"), Button("reject", "Close", "close")),
        answered,
        info=f"Copy the {noun} and open it by hand (in a file manager, a terminal or a browser).",
        default="copy",
        name="open_failed_box",
    )
