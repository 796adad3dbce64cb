"""Where things live: shipped resources and presets, user data, caches."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import platformdirs

from guitrainer import APP_NAME


def _data_roots() -> list[Path]:
    """Where a wheel install (``pip install .``) put ``share/guitrainer``: the environment, then the user scheme."""
    roots = []
    for scheme in (None, f"{os.name}_user"):
        try:
            data = sysconfig.get_path("data", scheme) if scheme else sysconfig.get_path("data")
        except KeyError:  # no user scheme on this platform
            continue
        roots.append(Path(data) / "share" / APP_NAME)
    return roots


def install_root() -> Path:
    """Folder holding resources/ and presets/: PyInstaller's bundle, the source tree (a checkout or an
    editable install), or ``<prefix>/share/guitrainer`` where a wheel installs them (pyproject data-files)."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return Path(bundle)
    source = Path(__file__).resolve().parents[2]
    if (source / "resources").is_dir():
        return source
    for root in _data_roots():
        if (root / "resources").is_dir():
            return root
    return source  # nothing found: paths under it say where the files were expected


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
