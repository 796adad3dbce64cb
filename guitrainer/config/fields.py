"""The building blocks of a setting: ``setting()`` metadata, :class:`ConfigError`, small value helpers."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import field
from typing import Any

SCHEMA_VERSION = 1

class ConfigError(ValueError):
    """A config value is invalid. ``field`` is the dotted path, e.g. ``network.rank``."""

    def __init__(self, field: str, message: str, *, source: str = "", line: int | None = None):
        self.field = field
        self.message = message
        self.source = source
        self.line = line
        where = ""
        if source:
            where = f"{source}" + (f", line {line}" if line else "") + ": "
        super().__init__(f"{where}`{field}`: {message}")


class UnknownKeyWarning(UserWarning):
    """A config or preset holds a key this version does not know; it is dropped."""


def setting(
    default: Any = dataclasses.MISSING,
    *,
    label: str,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] | None = None,
    choice_labels: dict[str, str] | None = None,
    unit: str = "",
    advanced: bool = False,
    kind: str = "",
    positive: bool = False,
    applies: tuple[str, tuple[Any, ...]] | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its UI metadata.

    Args:
        label: short name the user sees.
        help: one or two sentences shown as the tooltip / help text.
        minimum, maximum: inclusive numeric range, checked by validation and used by spin boxes.
        choices: closed set of allowed values (for ``Literal`` fields this is derived).
        choice_labels: user-facing names for the choices.
        unit: shown as a suffix ("px", "steps").
        advanced: hidden behind "Show advanced" in generated forms.
        kind: a hint for the editor: "path", "folder", "file", "multiline", "scientific", "model" (the base
            model picker), "vae" (the VAE picker: a folder or a .safetensors file).
        positive: the value must be above 0 (``minimum`` stays 0 for the spin boxes): an alpha or a learning
            rate of 0 trains a LoRA that does nothing.
        applies: ``(setting path, values)``: the setting only means something while that other setting has one of
            those values (generated forms grey it out otherwise, naming when it applies).
    """
    meta = {
        "label": label,
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "choice_labels": choice_labels or {},
        "unit": unit,
        "advanced": advanced,
        "kind": kind,
        "positive": positive,
        "applies": applies,
    }
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about whatever a file holds."""
    try:
        r = repr(value)
    except RecursionError:
        r = f"<deeply nested {type(value).__name__}>"
    return r if len(r) <= limit else r[: limit - 1] + "…"


def _whole_number(value: Any, what: str) -> int:
    """``value`` as an int: ints, integral floats and digit strings; never a bool."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a whole number, got {short_repr(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError(f"{what} must be a whole number, got {short_repr(value)}")


_REPEATS_RE = re.compile(r"^(\d+)_(.+)$")


def repeats_from_name(name: str) -> int | None:
    """kohya folder convention: ``10_mychar`` -> 10. None when the name has no such prefix."""
    m = _REPEATS_RE.match(name)
    if not m:
        return None
    n = int(m.group(1))
    return n if n >= 1 else None

