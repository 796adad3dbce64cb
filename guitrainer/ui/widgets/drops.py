"""Drag and drop helpers: only local files and folders are accepted anywhere in the app."""

from __future__ import annotations

from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent


def local_paths(event: QDropEvent | QDragEnterEvent | QDragMoveEvent) -> list[str]:
    """The local file and folder paths a drag carries (remote URLs and text are ignored)."""
    md = event.mimeData()
    if md is None or not md.hasUrls():
        return []
    return [u.toLocalFile() for u in md.urls() if u.isLocalFile() and u.toLocalFile()]
