"""Where things live: shipped resources and presets, user data, caches."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

from guitrainer import APP_NAME


def install_root() -> Path:
    """Folder holding resources/ and presets/ (the repo, or PyInstaller's bundle)."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return Path(bundle)
    return Path(__file__).resolve().parents[2]


def resources_dir() -> Path:
    return install_root() / "resources"


def shipped_presets_dir() -> Path:
    return install_root() / "presets"


def user_data_dir() -> Path:
    """Per-user data (user presets, the demo model). ``GUITRAINER_HOME`` overrides it (tests)."""
    env = os.environ.get("GUITRAINER_HOME")
    if env:
        return Path(env)
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def user_presets_dir() -> Path:
    return user_data_dir() / "presets"


def cache_dir() -> Path:
    env = os.environ.get("GUITRAINER_HOME")
    if env:
        return Path(env) / "cache"
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def expand(path: str) -> Path:
    return Path(os.path.expandvars(path)).expanduser()
