"""The base models on paper, for the estimator: each family's :class:`~guitrainer.core.families.facts.ModelSpec`
(``core/families/<name>.py`` holds it), and which family a config trains."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from guitrainer.config import TrainingConfig
from guitrainer.core.families.facts import ConvTable, LoraTable, MlpTables, ModelSpec
from guitrainer.core.families.registry import all_facts, facts

__all__ = ["LoraTable", "ModelSpec", "config_family", "conv_table", "detected_family", "family_label", "resolve_family", "spec_for", "spec_of", "text_encoder_mlp_tables"]


def spec_of(family: str) -> ModelSpec:
    """The estimator's table of ``family`` (``KeyError`` for a family without one)."""
    spec = facts(family).spec
    if spec is None:
        raise KeyError(f"the {facts(family).label} family has no parameter table for the estimator")
    return spec


def conv_table(family: str) -> ConvTable:
    return facts(family).conv_table


def text_encoder_mlp_tables(family: str) -> MlpTables:
    return facts(family).text_encoder_mlp_tables


def family_label(family: str) -> str:
    return facts(family).label


def resolve_family(family: str, base: str = "") -> str:
    """'auto' is what the base model's files say (:func:`detected_family`); failing that a guess from its name
    (a family whose hub patterns it contains, SDXL when it says 'xl'), else SD 1.5."""
    if family not in ("auto", ""):
        return family
    found = detected_family(base)
    if found:
        return found
    low = base.lower()
    for known in all_facts():
        if any(p in low for p in known.hub_patterns) and known.name != "sd15":
            return known.name
    return "sd15"


def detected_family(base: str) -> str | None:
    """The family :func:`guitrainer.core.model.checkpoint.detect_model` reads from the base model's files (a folder's
    configs, a checkpoint's tensor names, "demo"); None when they do not say. Cached until the path changes."""
    text = str(base).strip()
    if not text:
        return None
    try:
        stamp = os.stat(os.path.expanduser(text)).st_mtime_ns
    except OSError:
        stamp = None
    return _detected(text, stamp)


@functools.lru_cache(maxsize=16)
def _detected(text: str, _stamp: int | None) -> str | None:
    from guitrainer.core.model.checkpoint import detect_model

    return detect_model(text).family


def config_family(config: TrainingConfig) -> str:
    """The model family a config trains: ``model.family``, or what its base model's files say."""
    return resolve_family(str(config.model.family), str(config.model.base))


def spec_for(config: TrainingConfig) -> ModelSpec:
    """The spec of the model ``config`` trains: its family's (``model.family``, or what its base model's files say),
    of the size the base model's files name where the family has several (SD 3.5 Large / Medium)."""
    family = resolve_family(str(config.model.family), str(config.model.base))
    by_base = facts(family).spec_for_base
    if by_base is not None:
        found = _spec_of_base(by_base, str(config.model.base), _stamp(str(config.model.base)))
        if found is not None:
            return found
    return spec_of(family)


def _stamp(base: str) -> int | None:
    try:
        return os.stat(os.path.expanduser(base)).st_mtime_ns
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=16)
def _spec_of_base(by_base: Callable[[str], ModelSpec | None], base: str, _stamp: int | None) -> ModelSpec | None:
    """``by_base(base)``, cached until the base model's files change (the estimate runs on every setting change)."""
    return by_base(base)
