"""Several files chosen as one model (a split install, as ComfyUI users keep Flux.1 and SD 3.5): which is the
transformer, which the VAE, which the text encoders, and what the set lacks — before any of it is loaded.

Each file is recognised from its tensors (a safetensors header; nothing else is read): the transformer is the
file a family's detector takes as its denoiser, the VAE the file holding only a VAE
(:func:`guitrainer.core.families.parts.components`), the rest text encoders. The family's
:attr:`~guitrainer.core.families.facts.FamilyFacts.check_parts` then says, in its own words, what is missing or
of the wrong kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.core.families.facts import NamedTensors
from guitrainer.core.families.parts import components
from guitrainer.core.families.registry import facts
from guitrainer.core.model.checkpoint import CheckpointError, classify_keys, read_safetensors_header


@dataclass(frozen=True)
class SplitChoice:
    """Where each chosen file goes: ``model.base``, ``model.text_encoders``, ``model.vae`` (the family found, None
    when no file is a transformer this app trains), and the problems and notes of the set."""

    base: str
    text_encoders: tuple[str, ...]
    vae: str
    family: str | None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.family is not None and not self.problems


def arrange(paths: Sequence[str]) -> SplitChoice:
    """Sort ``paths`` (the files a user picked or dropped together) into one model's parts."""
    tables: list[tuple[str, NamedTensors]] = []
    for path in paths:
        name = Path(path).name
        if not name.lower().endswith(".safetensors"):
            return SplitChoice("", (), "", None, (f"{printable(name)} is not a .safetensors file: a split install's "
                                                   "files are .safetensors (the transformer, text encoders, VAE).",))
        try:
            tables.append((str(path), (name, read_safetensors_header(expand(path))[0])))
        except (CheckpointError, OSError) as e:
            return SplitChoice("", (), "", None, (f"{printable(name)} cannot be read as a .safetensors file: {e}.",))
    denoiser = next(((p, t) for p, t in tables if _family_of(t) is not None), None)
    if denoiser is None:
        listed = ", ".join(printable(t[0]) for _, t in tables)
        return SplitChoice("", (), "", None, (f"None of these files is a model's transformer ({listed}): choose the "
                                              "transformer's file (e.g. flux1-dev.safetensors) with its text "
                                              "encoders and VAE.",))
    family = _family_of(denoiser[1])
    assert family is not None
    rest = [(p, t) for p, t in tables if p != denoiser[0]]
    is_vae = facts(family).vae_file or (lambda tensors: set(components(tensors)) == {"vae"})
    vae = next(((p, t) for p, t in rest if is_vae(t[1])), None)
    text_encoders = [(p, t) for p, t in rest if vae is None or p != vae[0]]
    checker = facts(family).check_parts
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    if checker is not None:
        report = checker(denoiser[1], [t for _, t in text_encoders], vae[1] if vae else None)
        problems, notes = report.problems, report.notes
    return SplitChoice(denoiser[0], tuple(p for p, _ in text_encoders), vae[0] if vae else "", family, problems, notes)


def _family_of(table: NamedTensors) -> str | None:
    """The family whose transformer this file is (None: a part, a LoRA, anything else)."""
    name, tensors = table
    family, ok, *_ = classify_keys(tensors, {}, name=name)
    return family if ok else None
