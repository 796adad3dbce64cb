"""The last workspace (settings, dataset folders, preset name, unsaved mark), kept for the next start.

Saved on quit as a TOML file beside the app's settings file, so nothing the user set up is lost when
the window closes: the next start loads the same preset, then these settings and the same dataset.
Also the questions the window asks before it throws edits away (another preset, quitting).
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QRect, QSettings, QSize
from PySide6.QtGui import QScreen
from PySide6.QtWidgets import QWidget

from guitrainer.base import safe_open
from guitrainer.base.fileio import atomic_write_bytes
from guitrainer.config import ConfigError, TrainingConfig, apply_overlay
from guitrainer.config.files import MAX_CONFIG_BYTES
from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.messages import Button, MessageBox

log = logging.getLogger(__name__)

FILE_NAME = "workspace.toml"
#: the settings a preset change leaves alone: the images belong to the workspace, not to a preset
DATASET_KEYS = ("dataset.folders", "dataset.exclude", "dataset.regularization_folders", "dataset.class_prompt")


@dataclass
class Workspace:
    config: TrainingConfig
    preset: str
    modified: bool


def workspace_path(settings: QSettings) -> Path:
    return Path(settings.fileName()).with_name(FILE_NAME)


def save_workspace(settings: QSettings, ws: Workspace) -> None:
    data = ws.config.to_dict()
    data["workspace"] = {"preset": ws.preset, "modified": ws.modified}
    import tomli_w

    try:
        atomic_write_bytes(workspace_path(settings), tomli_w.dumps(data).encode("utf-8"))
    except OSError as e:
        log.warning("the workspace could not be saved: %s", e)


def load_workspace(settings: QSettings) -> Workspace | None:
    """The workspace saved on the last quit; None when there is none or it cannot be read (logged)."""
    path = workspace_path(settings)
    try:  # through base.safe_open: whatever is at the path (a pipe, a device, a huge file), the start never hangs
        if safe_open.look(path).kind == "missing":
            return None
        data = tomllib.loads(safe_open.read_text(path, limit=MAX_CONFIG_BYTES, what="a workspace file"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        log.warning("the last workspace (%s) cannot be read: %s", path, e)
        return None
    meta = data.pop("workspace", {})
    try:
        cfg = apply_overlay(TrainingConfig(), data, source=str(path))
    except ConfigError as e:
        log.warning("the last workspace (%s) is not restored: %s", path, e)
        return None
    return Workspace(cfg, str(meta.get("preset", "")), bool(meta.get("modified", False)))


def first_window_size(screen: QScreen | None) -> QSize:
    """First start: most of a large screen; 1180×780 when the screen is unknown or small (from 1366×768
    up the pages fit without scrolling)."""
    avail = screen.availableGeometry() if screen is not None else None
    if avail is None or avail.width() < 1280 or avail.height() < 700:
        return QSize(1180, 780)
    w = min(avail.width(), max(1280, int(avail.width() * 0.85)))
    h = min(avail.height(), max(720, int(avail.height() * 0.85)))
    return QSize(w, h)


#: below this available screen size the first window opens maximized: a smaller window than 1366×768
#: (less the panel) makes the pages scroll sideways, and such a screen has no room to spare anyway
MAXIMIZE_BELOW = QSize(1600, 900)


def first_start_maximized(screen: QScreen | None) -> bool:
    """First start on a small screen (a 1366×768 laptop): open maximized rather than a window that scrolls."""
    avail = screen.availableGeometry() if screen is not None else None
    return avail is not None and (avail.width() < MAXIMIZE_BELOW.width() or avail.height() < MAXIMIZE_BELOW.height())


#: the least window a saved geometry restores to (the pages fit from 1366×768 less a panel up), and the
#: least share of the available screen it takes: a size saved on another screen never opens tiny
MIN_RESTORED = QSize(1180, 700)
MIN_SCREEN_SHARE = 0.7


def restored_size(saved: QSize, avail: QRect | None) -> QSize:
    """The window size for ``saved`` (last session's, perhaps on another screen) on a screen with ``avail``
    room: at least :data:`MIN_RESTORED` and :data:`MIN_SCREEN_SHARE` of the screen, at most the screen."""
    if avail is None or avail.isEmpty():
        return saved.expandedTo(MIN_RESTORED)
    floor = QSize(
        min(avail.width(), max(MIN_RESTORED.width(), int(avail.width() * MIN_SCREEN_SHARE))),
        min(avail.height(), max(MIN_RESTORED.height(), int(avail.height() * MIN_SCREEN_SHARE))),
    )
    return saved.expandedTo(floor).boundedTo(avail.size())


def keep_dataset(new: TrainingConfig, current: TrainingConfig) -> TrainingConfig:
    """``new`` (a preset just loaded) with the current dataset, unless the preset names images itself."""
    if new.dataset.folders:
        return new
    for key in DATASET_KEYS:
        new.set(key, current.get(key))
    return new


def ask_save(
    parent: QWidget, title: str, text: str, info: str, discard_text: str, name: str, answered: Callable[[str], None]
) -> MessageBox:
    """Save / discard / cancel, non-modal: ``answered("save" | "discard" | "cancel")`` follows."""
    return messages.ask(
        parent,
        title,
        text,
        (Button("accept", "Save as preset…", "save"), Button("destructive", discard_text, "discard"), Button("cancel")),
        lambda answer: answered(answer if answer in ("save", "discard") else "cancel"),
        info=info,
        default="save",
        name=name,
    )
