"""Turning what a file or ``--set`` holds into a field's type, and checking it against the field's metadata."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from typing import Any, Literal

from guitrainer.config.fields import ConfigError, short_repr
from guitrainer.config.sections import SECTIONS, DatasetFolder


def _split(path: str) -> tuple[str, str]:
    parts = path.split(".")
    if len(parts) != 2 or parts[0] not in SECTIONS:
        raise ConfigError(path, f"not a setting; use section.field with a section among {', '.join(SECTIONS)}")
    names = {f.name for f in dataclasses.fields(SECTIONS[parts[0]])}
    if parts[1] not in names:
        raise ConfigError(path, f"unknown field; [{parts[0]}] has {', '.join(sorted(names))}")
    return parts[0], parts[1]


def field_info(path: str) -> dataclasses.Field:
    section, name = _split(path)
    return next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == name)


def field_paths() -> list[str]:
    return [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def field_type(f: dataclasses.Field, owner: type | None = None) -> Any:
    """The resolved type annotation of a section field."""
    if owner is None:
        owner = next(cls for cls in SECTIONS.values() if f in dataclasses.fields(cls))
    if owner not in _HINTS_CACHE:
        _HINTS_CACHE[owner] = typing.get_type_hints(owner)
    return _HINTS_CACHE[owner][f.name]


def field_choices(f: dataclasses.Field) -> tuple[str, ...] | None:
    if f.metadata.get("choices"):
        return tuple(f.metadata["choices"])
    t = field_type(f)
    if typing.get_origin(t) is Literal:
        return tuple(typing.get_args(t))
    return None


def _coerce(f: dataclasses.Field, value: Any, path: str, *, strict: bool = False) -> Any:
    """``value`` as the field's type, or a ConfigError naming ``path`` (an item of a list: ``path[i]``).

    Text is read as the type (``"32"`` -> 32, ``"true"`` -> True, ``"0.9, 0.99"`` -> [0.9, 0.99]): that is how
    ``--set`` and the text boxes give values. ``strict`` (a config or preset file, where TOML has types) takes
    only the type itself: ``rank = "7"`` or ``bucketing = 5`` is refused, naming the field.
    """
    t = field_type(f)
    origin = typing.get_origin(t)
    if strict:
        _check_strict_type(t, value, path)
    try:
        if t is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            if not isinstance(value, bool | int):
                raise ValueError(value)
            return bool(value)
        if t is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if t is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if t is str or origin is Literal:
            if not isinstance(value, str):
                raise ValueError(value)
            return _text(value, path)
        if origin is list:
            (item,) = typing.get_args(t)
            if isinstance(value, str):
                value = _parse_list_string(value, split_commas=item in COMMA_SPLIT_ITEMS)
            if not isinstance(value, list | tuple):
                raise ValueError(value)
            return [_coerce_item(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise ConfigError(path, f"expected {_type_name(t)}, got {short_repr(value)}") from e
    return value


def _check_strict_type(t: Any, value: Any, path: str) -> None:
    """A ConfigError naming ``path`` when a file's ``value`` is not of type ``t`` (ints count as floats)."""
    if t is bool:
        ok = isinstance(value, bool)
    elif t is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif t is str or typing.get_origin(t) is Literal:
        ok = isinstance(value, str)
    elif typing.get_origin(t) is list:
        (item,) = typing.get_args(t)
        # one text for a list of text or folders is one item (``prompts = "a cat"``), as in --set
        ok = isinstance(value, list) or (isinstance(value, str) and item is not float)
        if ok and item is float:
            for i, v in enumerate(value):
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise ConfigError(f"{path}[{i}]", f"expected a number, got {short_repr(v)}")
    else:
        ok = True
    if not ok:
        raise ConfigError(path, f"expected {_type_name(t)}, got {_kind_of(value)}")


def _kind_of(value: Any) -> str:
    """A value for a type message: its TOML kind and the value, e.g. ``text '7'``, ``the number 5``."""
    if isinstance(value, str):
        return f"text {short_repr(value)} (write it without quotes if a number or true/false is meant)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {short_repr(value)}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return short_repr(value)


#: Item types of list fields whose ``--set`` plain text is split on commas: a number never holds one.
#: Free text (prompts, paths, folders) may, so there a plain string is one item and several items are
#: written as a TOML array: ``--set 'sampling.prompts=["a, b", "c"]'``.
COMMA_SPLIT_ITEMS: tuple[type, ...] = (float,)


def _coerce_item(item: type, value: Any, where: str) -> Any:
    """One item of a list field, or a ConfigError naming ``where`` (e.g. ``optimizer.betas[1]``)."""
    try:
        if item is DatasetFolder:
            folder = DatasetFolder.from_value(value)
            _text(folder.path, where)
            return folder
        if item is float:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise TypeError(value)
            return float(value)
        if item is str:
            if not isinstance(value, str):
                raise TypeError(value)
            return _text(value, where)
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        detail = str(e) if item is DatasetFolder and str(e) else f"expected {_type_name(item)}, got {short_repr(value)}"
        raise ConfigError(where, detail) from e
    raise ConfigError(where, f"unsupported item type {item!r}")


def _text(value: str, where: str) -> str:
    """Text as it is, but never with a NUL character (no path or prompt holds one; the OS refuses it)."""
    if "\x00" in value:
        raise ConfigError(where, f"must not contain a NUL character, got {short_repr(value)}")
    return value


def _parse_list_string(value: str, *, split_commas: bool) -> list[Any]:
    """Text for a list field (``--set``): a TOML inline array ``["a, b", "c"]`` gives its items; other
    text is one item, or, with ``split_commas``, comma-separated items (``0.9, 0.99``). Empty text: []."""
    s = value.strip()
    if not s:
        return []
    if s.startswith("["):
        try:
            parsed = tomllib.loads(f"v = {s}")["v"]
        except (tomllib.TOMLDecodeError, RecursionError):
            parsed = None  # e.g. a prompt in A1111's "[from:to:0.5]" syntax: plain text
        if isinstance(parsed, list):
            return parsed
    if split_commas:
        return [v.strip() for v in s.split(",") if v.strip()]
    return [s]


def _type_name(t: Any) -> str:
    if t is DatasetFolder:
        return "a folder path or a table with `path` and `repeats`"
    if typing.get_origin(t) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(t))
    if typing.get_origin(t) is list:
        (item,) = typing.get_args(t)
        return {float: "a list of numbers", str: "a list of text"}.get(item, "a list")
    return {bool: "true or false", int: "a whole number", float: "a number", str: "text"}.get(t, str(t))


def _check_field(f: dataclasses.Field, value: Any, path: str) -> None:
    meta = f.metadata
    choices = field_choices(f)
    if choices is not None and value not in choices:
        raise ConfigError(path, f"must be one of {', '.join(repr(c) for c in choices)}, got {short_repr(value)}")
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value != value:  # NaN
            raise ConfigError(path, "must be a number, got NaN")
        if lo is not None and value < lo or hi is not None and value > hi:
            raise ConfigError(path, f"must be between {_fmt(lo)} and {_fmt(hi)}, got {_fmt(value)}")
        if meta.get("positive") and value <= 0:
            raise ConfigError(path, f"must be above 0 (0 trains a LoRA that does nothing), got {_fmt(value)}")
    if isinstance(value, list) and value and isinstance(value[0], DatasetFolder):
        for i, folder in enumerate(value):
            if folder.repeats < 1 or folder.repeats > 1000:
                raise ConfigError(f"{path}[{i}].repeats", f"must be between 1 and 1000, got {folder.repeats}")


def _fmt(v: Any) -> str:
    if v is None:
        return "∞"
    if isinstance(v, float) and (abs(v) >= 1e6 or (v != 0 and abs(v) < 1e-3)):
        return f"{v:g}"
    return f"{v:g}" if isinstance(v, float) else str(v)

