"""Where things live (shipped resources and presets, user data, caches), and one spelling per path."""

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


def expand(path: str | os.PathLike[str]) -> Path:
    """``$VARS`` and ``~`` expanded; a ``~user`` that names no user stays as written (never raises)."""
    return Path(os.path.expanduser(os.path.expandvars(os.fspath(path))))


def path_key(path: str | os.PathLike[str]) -> str:
    """One spelling per file or folder, for asking "the same place?": expanded (:func:`expand`), made absolute
    and resolved through symbolic links. A path that cannot be resolved (a link loop, a NUL byte, a name too
    long) keeps its absolute spelling; never raises."""
    try:
        p = expand(path)
    except (TypeError, ValueError):
        return os.fspath(path) if isinstance(path, (str, os.PathLike)) else str(path)
    try:
        return str(p.resolve())
    except (OSError, RuntimeError, ValueError):
        try:
            return os.path.abspath(p)
        except (OSError, ValueError):
            return str(p)


def same_path(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two spellings name the same file or folder (see :func:`path_key`)."""
    return path_key(a) == path_key(b)
