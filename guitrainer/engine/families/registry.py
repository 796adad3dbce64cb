"""Every model family's engine side by name: ``engine/families/<name>/`` exposes ``FAMILY`` (a
:class:`~guitrainer.engine.families.base.Family`) for each name of :data:`guitrainer.config.families.FAMILY_NAMES`
(but "auto"), so adding a family adds no line here."""

from __future__ import annotations

import functools
import importlib

from guitrainer.config.families import FAMILY_NAMES
from guitrainer.engine.families.base import Family


@functools.cache
def family(name: str) -> Family:
    """The engine side of family ``name``; ``KeyError`` naming the known ones for any other name."""
    if name not in FAMILY_NAMES or name == "auto":
        known = ", ".join(n for n in FAMILY_NAMES if n != "auto")
        raise KeyError(f"no model family {name!r} (known: {known})")
    module = importlib.import_module(f"guitrainer.engine.families.{name}")
    found: Family = module.FAMILY
    return found
