"""Every model family's facts by name: ``core/families/<name>.py`` defines ``FACTS`` for each name of
:data:`guitrainer.config.families.FAMILY_NAMES` (but "auto"), so adding a family adds no line here."""

from __future__ import annotations

import functools
import importlib

from guitrainer.config.families import FAMILY_NAMES
from guitrainer.core.families.facts import FamilyFacts


@functools.cache
def facts(name: str) -> FamilyFacts:
    """The facts of family ``name``; ``KeyError`` naming the known ones for any other name."""
    if name not in FAMILY_NAMES or name == "auto":
        known = ", ".join(n for n in FAMILY_NAMES if n != "auto")
        raise KeyError(f"no model family {name!r} (known: {known})")
    module = importlib.import_module(f"guitrainer.core.families.{name}")
    found: FamilyFacts = module.FACTS
    return found


def all_facts() -> tuple[FamilyFacts, ...]:
    """Every family's facts, in the picker's order."""
    return tuple(facts(n) for n in FAMILY_NAMES if n != "auto")
