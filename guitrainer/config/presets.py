"""Presets: sparse overlays on the default TrainingConfig, stored as TOML.

Shipped presets live in ``presets/`` (read-only); user presets in the platform's user data
folder. Loading a preset applies it on top of the *defaults*, so every field is filled and
nothing from the previous preset leaks through.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from guitrainer.base import paths
from guitrainer.base.fileio import atomic_write_bytes
from guitrainer.base.names import safe_name
from guitrainer.config.fields import ConfigError, short_repr
from guitrainer.config.files import (
    apply_overlay,
    config_from_dict,
    diff,
    find_line,
    parse_toml_text,
    read_config_text,
)
from guitrainer.config.training import TrainingConfig

log = logging.getLogger(__name__)

#: the built-in tiny model that trains on a CPU in seconds (tests, the self-test and a first run use it)
DEMO_PRESET = "Demo — tiny built-in model (CPU, about a minute)"
#: the preset a first start shows
DEFAULT_PRESET = DEMO_PRESET


@dataclass
class Preset:
    name: str
    description: str
    overlay: dict[str, Any]
    path: Path | None = None
    shipped: bool = False
    warnings: list[str] = field(default_factory=list)

    def config(self) -> TrainingConfig:
        """The full config: defaults with this preset's overlay applied."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return apply_overlay(TrainingConfig(), self.overlay, source=str(self.path or self.name)).validate()

    def to_toml(self) -> str:
        return tomli_w.dumps({"preset": {"name": self.name, "description": self.description}, **self.overlay})


def slug(name: str) -> str:
    """The file name (without ``.toml``) a user preset called ``name`` is saved under: ASCII letters, digits, ``._-``,
    at most 80 characters, and never a Windows device name (``con`` -> ``_con``: presets are shared)."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", name.strip()).strip("._")
    return safe_name(s[:80], "preset")


def read_preset(path: str | Path, *, shipped: bool = False) -> Preset:
    """Parse and validate one preset file. Raises ConfigError naming the file, line and field.

    Whatever the file holds (wrong types, a bad ``schema_version``, binary garbage), the only
    exception is :class:`ConfigError`: one bad preset must never stop the app or the CLI.
    """
    path = Path(path)
    try:
        return _read_preset(path, shipped)
    except ConfigError:
        raise
    except Exception as e:  # a case the checks above missed: still the user's file, not our crash
        log.warning("unexpected error reading preset %s", path, exc_info=True)
        raise ConfigError("(file)", f"cannot be read as a preset: {type(e).__name__}: {e}", source=str(path)) from e


def _read_preset(path: Path, shipped: bool) -> Preset:
    text = read_config_text(path)
    data = parse_toml_text(text, str(path))
    header = data.get("preset", {})
    if not isinstance(header, dict):
        raise ConfigError("preset", "must be a table with `name` and `description`", source=str(path))
    for key in ("name", "description"):
        if not isinstance(header.get(key, ""), str):
            raise ConfigError(
                f"preset.{key}", f"must be text, got {short_repr(header[key])}", source=str(path), line=find_line(text, f"preset.{key}")
            )
    name = header.get("name") or path.stem
    overlay = {k: v for k, v in data.items() if k != "preset"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config_from_dict(overlay, source=str(path), text=text)
    return Preset(
        name=name,
        description=header.get("description", ""),
        overlay=overlay,
        path=path,
        shipped=shipped,
        warnings=[str(w.message) for w in caught],
    )


class PresetStore:
    """Shipped + user presets. Malformed files are reported in :attr:`errors`, never fatal."""

    def __init__(self, shipped_dir: Path | None = None, user_dir: Path | None = None):
        self.shipped_dir = shipped_dir or paths.shipped_presets_dir()
        self.user_dir = user_dir or paths.user_presets_dir()
        self.presets: dict[str, Preset] = {}
        self.errors: list[ConfigError] = []
        self.reload()

    def reload(self) -> None:
        self.presets.clear()
        self.errors.clear()
        for folder, shipped in ((self.shipped_dir, True), (self.user_dir, False)):
            if not folder.is_dir():
                continue
            for p in sorted(folder.glob("*.toml")):
                try:
                    preset = read_preset(p, shipped=shipped)
                except ConfigError as e:
                    log.warning("skipping preset: %s", e)
                    self.errors.append(e)
                    continue
                if preset.name in self.presets and not shipped:
                    # A user preset with a shipped preset's name: keep both, mark the user's.
                    preset.name = f"{preset.name} (mine)"
                self.presets[preset.name] = preset

    def names(self) -> list[str]:
        shipped = [n for n, p in self.presets.items() if p.shipped]
        user = sorted(n for n, p in self.presets.items() if not p.shipped)
        return shipped + user

    def get(self, name: str) -> Preset:
        try:
            return self.presets[name]
        except KeyError:
            raise KeyError(f"no preset named {name!r}; known: {', '.join(self.names())}") from None

    def find(self, query: str) -> Preset:
        """The preset ``query`` names, as a person types it on a command line.

        In order: the exact name; the name ignoring case; the one name that starts with ``query``, then
        the one that contains it (both ignoring case and surrounding space): ``demo`` finds
        "Demo — tiny built-in model (CPU, about a minute)".

        Raises:
            KeyError: no preset matches (the message lists them all), or several do (it lists those).
        """
        if query in self.presets:
            return self.presets[query]
        q = query.strip().casefold()
        names = self.names()
        if not q:
            raise KeyError(f"no preset named {query!r}; known: {', '.join(names)}")
        for match in (
            lambda n: n.casefold() == q,
            lambda n: n.casefold().startswith(q),
            lambda n: q in n.casefold(),
        ):
            found = [n for n in names if match(n)]
            if len(found) == 1:
                return self.presets[found[0]]
            if len(found) > 1:
                listing = "; ".join(repr(n) for n in found)
                raise KeyError(f"{query!r} matches {len(found)} presets: {listing}; give more of the name")
        raise KeyError(f"no preset named {query!r}; known: {', '.join(names)}")

    def _user_path(self, name: str) -> Path:
        return self.user_dir / f"{slug(name)}.toml"

    def save(self, name: str, config: TrainingConfig, description: str = "", *, overwrite: bool = True) -> Preset:
        """Save ``config`` as a user preset (only what differs from the defaults). Atomic."""
        name = name.strip()
        if not name:
            raise ValueError("a preset needs a name")
        existing = self.presets.get(name)
        if existing is not None and existing.shipped:
            raise ValueError(f"{name!r} is a shipped preset; save it under another name")
        if existing is not None and not overwrite:
            raise FileExistsError(f"a preset named {name!r} exists")
        config.validate()
        preset = Preset(name=name, description=description, overlay=diff(TrainingConfig(), config), shipped=False)
        target = existing.path if existing is not None and existing.path else self._user_path(name)
        atomic_write_bytes(target, preset.to_toml().encode("utf-8"))
        preset.path = target
        self.presets[name] = preset
        return preset

    def rename(self, old: str, new: str) -> Preset:
        preset = self.get(old)
        if preset.shipped:
            raise ValueError(f"{old!r} is a shipped preset and cannot be renamed")
        new = new.strip()
        if not new or new in self.presets:
            raise ValueError(f"cannot rename to {new!r}: empty or taken")
        renamed = Preset(name=new, description=preset.description, overlay=preset.overlay, shipped=False)
        target = self._user_path(new)
        atomic_write_bytes(target, renamed.to_toml().encode("utf-8"))
        renamed.path = target
        if preset.path and preset.path != target:
            preset.path.unlink(missing_ok=True)
        del self.presets[old]
        self.presets[new] = renamed
        return renamed

    def delete(self, name: str) -> None:
        preset = self.get(name)
        if preset.shipped:
            raise ValueError(f"{name!r} is a shipped preset and cannot be deleted")
        if preset.path:
            preset.path.unlink(missing_ok=True)
        del self.presets[name]

    def import_file(self, path: str | Path) -> Preset:
        """Copy a preset file into the user folder after validating it."""
        preset = read_preset(path)
        name = preset.name
        while name in self.presets:
            name = f"{name} (imported)"
        preset.name = name
        target = self._user_path(name)
        self.user_dir.mkdir(parents=True, exist_ok=True)
        if name == read_preset(path).name:
            atomic_write_bytes(target, read_config_text(path).encode("utf-8"))  # keep the user's comments
        else:
            atomic_write_bytes(target, preset.to_toml().encode("utf-8"))
        preset.path, preset.shipped = target, False
        self.presets[name] = preset
        return preset
