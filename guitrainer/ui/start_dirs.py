"""Where a file dialog opens: the folder last used for the same kind of file, else the usual place for it.

Without a start folder Qt opens the process's working folder, which for a double-clicked app is its install
folder: no artist keeps pictures there. Each kind (``images``, ``presets``, ``charts``...) remembers its own
last folder in the app's settings, and starts in Pictures (images) or the home folder (everything else).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths
from PySide6.QtWidgets import QFileDialog, QWidget

from guitrainer.ui.app_settings import default_settings

_KEY = "dialogs/{}"
_FIRST = {"images": QStandardPaths.StandardLocation.PicturesLocation}


def remembered(kind: str, settings: QSettings | None = None) -> str | None:
    """The folder last used for ``kind``, when there is one and it still exists."""
    last = (settings or default_settings()).value(_KEY.format(kind), "", type=str)
    return last if last and Path(last).is_dir() else None


def start_dir(kind: str, settings: QSettings | None = None) -> str:
    """The folder a dialog for ``kind`` opens in: the last one used that still exists, else the usual place."""
    last = remembered(kind, settings)
    if last:
        return last
    location = _FIRST.get(kind, QStandardPaths.StandardLocation.HomeLocation)
    usual = QStandardPaths.writableLocation(location)
    return usual if usual and Path(usual).is_dir() else str(Path.home())


def start_near(value: str, kind: str) -> str:
    """A dialog's start for a setting's current ``value`` (a folder or file, ``~`` allowed): that folder, the
    file's folder, or the nearest folder above that exists; else :func:`start_dir` (an empty value, a hub id)."""
    text = str(value or "").strip()
    if text:
        path = Path(text).expanduser()
        if path.is_absolute():
            for folder in (path, *path.parents):
                if folder.is_dir() and folder != Path(folder.anchor):
                    return str(folder)
    return start_dir(kind)


def start_file(kind: str, name: str, settings: QSettings | None = None) -> str:
    """A save dialog's proposed path: ``name`` in :func:`start_dir`."""
    return str(Path(start_dir(kind, settings)) / name)


def remember(kind: str, chosen: str | list[str], settings: QSettings | None = None) -> None:
    """Keep where the next dialog for ``kind`` opens: the folder holding what was chosen (a file, the first of
    several files, or a folder: its parent, so the next pick can be a sibling)."""
    first = (chosen[0] if chosen else "") if isinstance(chosen, list) else chosen
    if not first:
        return
    folder = Path(first).parent
    (settings or default_settings()).setValue(_KEY.format(kind), str(folder))


def choose_folder(parent: QWidget, title: str, kind: str) -> str:
    """A folder dialog that opens where :func:`start_dir` says and remembers the choice; "" when cancelled."""
    folder = QFileDialog.getExistingDirectory(parent, title, start_dir(kind))
    remember(kind, folder)
    return folder


def choose_files(parent: QWidget, title: str, kind: str, filters: str) -> list[str]:
    """Several files to open (see :func:`choose_folder`); [] when cancelled."""
    files, _ = QFileDialog.getOpenFileNames(parent, title, start_dir(kind), filters)
    remember(kind, files)
    return files


def choose_file(parent: QWidget, title: str, kind: str, filters: str) -> str:
    """One file to open (see :func:`choose_folder`); "" when cancelled."""
    path, _ = QFileDialog.getOpenFileName(parent, title, start_dir(kind), filters)
    remember(kind, path)
    return path


def choose_save_path(parent: QWidget, title: str, kind: str, name: str, filters: str) -> str:
    """Where to save, proposing ``name`` in :func:`start_dir` (see :func:`choose_folder`); "" when cancelled."""
    path, _ = QFileDialog.getSaveFileName(parent, title, start_file(kind, name), filters)
    remember(kind, path)
    return path
