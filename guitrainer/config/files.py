"""Config files: sparse overlays, schema migrations, TOML reading and writing, line numbers for messages."""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import re
import tomllib
import typing
import warnings
from pathlib import Path
from typing import Any

from guitrainer.base import safe_open
from guitrainer.base.names import printable
from guitrainer.config.fields import SCHEMA_VERSION, ConfigError, UnknownKeyWarning, short_repr
from guitrainer.config.sections import SECTIONS, apply_lr_free_default
from guitrainer.config.training import TrainingConfig

log = logging.getLogger("guitrainer.config")

#: largest config or preset file read: a full config is a few kilobytes; anything bigger is some other file
MAX_CONFIG_BYTES = 4 * 1024 * 1024

def find_line(text: str, path: str) -> int | None:
    """Line number (1-based) of ``field = ...`` inside ``[section]`` of a TOML text, for messages."""
    section, _, name = path.partition(".")
    name = name.split("[")[0]
    current = ""
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        m = re.match(r"^\[\s*([A-Za-z0-9_.]+)\s*\]", s)
        if m:
            current = m.group(1)
            continue
        if re.match(rf"^{re.escape(name)}\s*=", s) and current == section:
            return i
        if re.match(rf"^{re.escape(section)}\s*\.\s*{re.escape(name)}\s*=", s) and current == "":
            return i
    return None


# --------------------------------------------------------------------------- overlays, migrations

Migration = typing.Callable[[dict[str, Any]], dict[str, Any]]
#: schema_version N -> function turning a version-N dict into a version-(N+1) dict.
MIGRATIONS: dict[int, Migration] = {}


def schema_version_of(data: dict[str, Any]) -> int:
    """The ``schema_version`` of a config / preset dict (this app's when absent).

    Raises :class:`ConfigError` when it is not a whole number or is negative. A newer version than this
    app's is returned as is (:func:`migrate` warns about it).
    """
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError("schema_version", f"must be a whole number (this app writes {SCHEMA_VERSION}), got {short_repr(version)}")
    if version < 0:
        raise ConfigError("schema_version", f"must not be negative (this app writes {SCHEMA_VERSION}), got {version}")
    return version


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a dict from an older ``schema_version`` up to :data:`SCHEMA_VERSION`.

    A newer version than this app's warns (:class:`UnknownKeyWarning`): its known keys still apply and
    unknown ones are dropped, each with its own warning (as peft does). A version that is not a whole
    number, a negative one, or one with no migration raises :class:`ConfigError`.
    """
    if not isinstance(data, dict):
        raise ConfigError("(file)", f"must be a table of sections, got {type(data).__name__}")
    deep = too_deep(data)
    if deep is not None:
        raise ConfigError(deep, f"tables or lists nested more than {MAX_DEPTH} levels deep; no setting holds that")
    version = schema_version_of(data)
    data = copy.deepcopy(data)
    if version > SCHEMA_VERSION:
        warnings.warn(
            f"config schema_version {version} is newer than this app's {SCHEMA_VERSION}; unknown keys will be dropped",
            UnknownKeyWarning,
            stacklevel=3,
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ConfigError("schema_version", f"no migration from version {version} (this app writes {SCHEMA_VERSION})")
        data = MIGRATIONS[version](data)
        version += 1
    data["schema_version"] = SCHEMA_VERSION
    return data


#: deepest nesting a config may hold: a section table (1), a folder table inside a list (3); far more is an error
MAX_DEPTH = 16


def too_deep(data: dict[str, Any], limit: int = MAX_DEPTH) -> str | None:
    """The dotted path of the first value nested deeper than ``limit`` (iterative: never a RecursionError)."""
    stack: list[tuple[str, Any, int]] = [(str(k), v, 1) for k, v in data.items()]
    while stack:
        path, value, depth = stack.pop()
        if depth > limit:  # name the setting (and its first list index): section.key[i]
            m = re.match(r"[^.\[]+(?:\.[^.\[]+)?(?:\[\d+\])?", path)
            return m.group(0) if m else path
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}", v, depth + 1) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in enumerate(value))
    return None


def apply_overlay(base: TrainingConfig, overlay: dict[str, Any], *, source: str = "", text: str = "") -> TrainingConfig:
    """Return a copy of ``base`` with every key of the sparse ``overlay`` applied.

    Lists replace lists (they are values, not merged). Unknown sections and fields warn
    (:class:`UnknownKeyWarning`) and are dropped. Type errors raise :class:`ConfigError` naming
    the field, the source file and its line.
    """
    cfg = base.copy()
    try:
        data = migrate(overlay)
    except ConfigError as e:
        raise ConfigError(e.field, e.message, source=source, line=find_line_top(text, e.field) if text else None) from None
    data.pop("schema_version", None)
    data.pop("preset", None)  # preset header: name / description, not a setting
    where = f" in {source}" if source else ""
    for sname, values in data.items():
        if sname not in SECTIONS:
            warnings.warn(f"unknown section [{sname}]{where} ignored", UnknownKeyWarning, stacklevel=2)
            log.warning("unknown section [%s]%s ignored", sname, where)
            continue
        if not isinstance(values, dict):
            raise ConfigError(
                sname,
                f"must be a table of settings ([{sname}]), got {_kind(values)}",
                source=source,
                line=find_line_top(text, sname) if text else None,
            )
        known = {f.name for f in dataclasses.fields(SECTIONS[sname])}
        for key, value in values.items():
            path = f"{sname}.{key}"
            if key not in known:
                warnings.warn(f"unknown setting `{path}`{where} ignored", UnknownKeyWarning, stacklevel=2)
                log.warning("unknown setting `%s`%s ignored", path, where)
                continue
            try:
                cfg.set(path, value, strict=True)
            except ConfigError as e:
                # e.field may be finer than path: `dataset.folders[1]`, `optimizer.betas[0]`
                raise ConfigError(e.field, e.message, source=source, line=find_line(text, path) if text else None) from None
    apply_lr_free_default(cfg.optimizer, data)
    return cfg


def config_from_dict(data: dict[str, Any], *, source: str = "", text: str = "") -> TrainingConfig:
    """A :class:`TrainingConfig` from a (possibly sparse) dict on top of the defaults, validated.

    Unknown keys warn and are dropped; the first problem raises :class:`ConfigError` naming its field and,
    when ``text`` (the file's text) is given, its line in ``source``.
    """
    return validated(apply_overlay(TrainingConfig(), data, source=source, text=text), source=source, text=text)


def validated(cfg: TrainingConfig, *, source: str = "", text: str = "") -> TrainingConfig:
    """``cfg`` when it has no problem; else its first problem as a :class:`ConfigError` with the line in ``text``."""
    errs = cfg.errors()
    if errs:
        e = errs[0]
        raise ConfigError(e.field, e.message, source=source, line=find_line(text, e.field) if text else None)
    return cfg


def _kind(value: Any) -> str:
    """A value for messages: "a table", "a list", or the (shortened) value itself."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return f"text {short_repr(value)}"
    if isinstance(value, bool):
        return str(value).lower()
    return short_repr(value)


def find_line_top(text: str, key: str) -> int | None:
    """Line number (1-based) of a top-level ``key = ...`` or of a ``[key]`` / ``[[key]]`` header."""
    in_section = False
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if re.match(rf"^\[\[?\s*{re.escape(key)}\s*\]", s):
            return i
        if s.startswith("["):
            in_section = True
        elif not in_section and re.match(rf"^{re.escape(key)}\s*=", s):
            return i
    return None


def diff(base: TrainingConfig, cfg: TrainingConfig) -> dict[str, Any]:
    """The sparse overlay that turns ``base`` into ``cfg`` (what a preset file stores)."""
    a, b = base.to_dict(), cfg.to_dict()
    out: dict[str, Any] = {}
    for sname in SECTIONS:
        for k, v in b[sname].items():
            if a[sname].get(k) != v:
                out.setdefault(sname, {})[k] = v
    return out


# --------------------------------------------------------------------------- files


def parse_toml_text(text: str, source: str) -> dict[str, Any]:
    """A TOML text as a dict; a UTF-8 byte-order mark at the start (Windows editors write one) is skipped."""
    text = text.removeprefix("\ufeff")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ConfigError("(file)", f"not valid TOML: {e}", source=source, line=int(m.group(1)) if m else None) from None
    except RecursionError:
        raise ConfigError("(file)", "not valid TOML: arrays or tables nested too deeply", source=source) from None


def read_config_text(path: str | Path) -> str:
    """The text of a config or preset file, read safely (:mod:`guitrainer.base.safe_open`): a named pipe, a device
    (``/dev/zero``), a folder or a file over :data:`MAX_CONFIG_BYTES` is refused at once.

    Raises:
        ConfigError: naming the file (``(file)``) and what it is instead: "is a named pipe (FIFO), not a file".
    """
    try:
        return safe_open.read_text(path, limit=MAX_CONFIG_BYTES, what="a config file")
    except safe_open.PathError as e:
        reason = "is not UTF-8 text; is this a config file?" if e.reason == "is not UTF-8 text" else e.reason
        raise ConfigError("(file)", reason, source=printable(os.fspath(path))) from None


def load_toml(path: str | Path, base: TrainingConfig | None = None) -> TrainingConfig:
    """Load a config file (full or sparse) on top of ``base`` (defaults when None)."""
    path = Path(path)
    text = read_config_text(path)
    data = parse_toml_text(text, str(path))
    cfg = apply_overlay(base or TrainingConfig(), data, source=str(path), text=text)
    return validated(cfg, source=str(path), text=text)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``."""
    from guitrainer.base.fileio import atomic_write_bytes

    atomic_write_bytes(path, text.encode("utf-8"))


def save_toml(cfg: TrainingConfig, path: str | Path) -> None:
    atomic_write_text(path, cfg.to_toml())
