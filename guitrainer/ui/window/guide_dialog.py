"""Help ▸ Guide: the user guide (the README) shown inside the app, its Markdown rendered, its pictures scaled.

Inside the app because opening a ``.md`` file with the desktop fails where no program is registered for it
(``QDesktopServices.openUrl`` then answers False, and the menu did nothing). Links to web pages and other files
open with the desktop's programs through :func:`~guitrainer.ui.widgets.desktop.open_with_desktop`, which says so
when that fails; links inside the guide scroll to their heading.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QByteArray, QUrl
from PySide6.QtGui import QImage, QPixmap, QTextCursor, QTextDocument, QTextImageFormat
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

from guitrainer.base import safe_open
from guitrainer.ui.widgets.desktop import open_with_desktop

log = logging.getLogger(__name__)

#: the longest guide read (the README is ~40 KB)
MAX_GUIDE_BYTES = 4 * 1024 * 1024
#: pictures wider than this are shown at this width (the screenshots are 1366 px and more)
IMAGE_WIDTH = 640


class GuideDialog(QDialog):
    """The guide at ``path``, rendered (``QTextBrowser.setMarkdown``); non-modal, so the app can be used beside it."""

    def __init__(self, path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("guide_dialog")
        self.setWindowTitle(f"Guide — {path.name}")
        self.path = path
        self.browser = QTextBrowser(self)
        self.browser.setObjectName("guide_text")
        self.browser.setOpenLinks(False)  # every link is handled in _follow: none is dropped silently
        self.browser.anchorClicked.connect(self._follow)
        self.browser.document().setBaseUrl(QUrl.fromLocalFile(str(path.parent) + "/"))  # its pictures, relative
        self.browser.setSearchPaths([str(path.parent)])
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.browser, 1)
        lay.addWidget(buttons)
        self.resize(980, 760)

    def load(self) -> str:
        """Read and render the guide; "" when it was shown, else why not (the guide then says so itself)."""
        try:
            text = safe_open.read_text(self.path, limit=MAX_GUIDE_BYTES, what="the guide")
        except safe_open.PathError as e:
            self.browser.setPlainText(f"The guide cannot be shown: {e}")
            return str(e)
        self.browser.setMarkdown(text)
        fit_images(self.browser.document(), IMAGE_WIDTH)
        return ""

    def _follow(self, url: QUrl) -> None:
        """A link in the guide: its own headings scroll, anything else opens with the desktop (or says why not)."""
        if url.hasFragment() and not url.path():
            self.browser.scrollToAnchor(url.fragment())
            return
        target = url if url.scheme() not in ("", "file") else QUrl.fromLocalFile(str(self._resolve(url)))
        open_with_desktop(self, target, "this link of the guide")

    def _resolve(self, url: QUrl) -> Path:
        """A relative link of the guide as a path beside the guide."""
        local = url.toLocalFile() or url.path()
        p = Path(local)
        return p if p.is_absolute() else self.path.parent / p


def fit_images(doc: QTextDocument, width: int) -> int:
    """Show every picture of ``doc`` at most ``width`` px wide, keeping its shape; returns how many were scaled."""
    scaled = 0
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            fmt = fragment.charFormat()
            if fragment.isValid() and fmt.isImageFormat():
                image_fmt = fmt.toImageFormat()
                if _scale(doc, image_fmt, width):
                    cursor = QTextCursor(doc)
                    cursor.setPosition(fragment.position())
                    cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
                    cursor.setCharFormat(image_fmt)
                    scaled += 1
            it += 1
        block = block.next()
    return scaled


def _scale(doc: QTextDocument, fmt: QTextImageFormat, width: int) -> bool:
    """Set ``fmt``'s size to fit ``width``, from the picture's own size; False when it fits (or cannot be read)."""
    resource = doc.resource(QTextDocument.ResourceType.ImageResource, QUrl(fmt.name()))
    if isinstance(resource, QImage | QPixmap):
        size = resource.size()
    elif isinstance(resource, bytes | QByteArray):
        size = QImage.fromData(resource).size()
    else:
        return False
    w, h = size.width(), size.height()
    if w <= width or w <= 0:
        return False
    fmt.setWidth(width)
    fmt.setHeight(h * width / w)
    return True
