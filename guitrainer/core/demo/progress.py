"""The Demo's number for "it learned": each Demo prompt's first and last sample, read with the shape measure.

For the trigger prompt ("a red zorb") the run *learned* when the last sample shows the concept (a red bar) and
the first did not; for a prompt of a shape the base knows ("a blue square") the LoRA *kept* it when the last
sample still shows it. Only for the Demo: any other model's samples show things this measure cannot read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guitrainer.core.demo.measure import Reading, expectation, read_image
from guitrainer.core.demo.shapes import CONCEPT
from guitrainer.core.runs.samples import SamplePair


@dataclass(frozen=True)
class PromptProgress:
    """One Demo prompt's before and after, read."""

    prompt: str
    shape: str
    color: str
    first_step: int
    last_step: int
    before: Reading
    after: Reading

    @property
    def is_concept(self) -> bool:
        return (self.shape, self.color) == (CONCEPT.shape, CONCEPT.color)

    @property
    def verdict(self) -> str:
        """"learned" / "not yet" for the concept; "kept" / "changed" for a shape the base knows."""
        shown_after = self.after.shows(self.shape, self.color)
        if self.is_concept:
            return "learned" if shown_after and not self.before.shows(self.shape, self.color) else (
                "shown before training too" if shown_after else "not yet"
            )
        return "kept" if shown_after else "changed"

    def describe(self) -> str:
        """One line for the log and the Runs page."""
        asks = f"a {self.color} {self.shape}"
        return (
            f"“{self.prompt}” (asks for {asks}): step {self.first_step} {self.before.describe()}; "
            f"step {self.last_step} {self.after.describe()} — {self.verdict}"
        )


def demo_progress(pairs: list[SamplePair]) -> list[PromptProgress]:
    """The Demo prompts among ``pairs`` (the ones :func:`expectation` knows), each read before and after;
    a sample whose file is gone is left out."""
    out: list[PromptProgress] = []
    for pair in pairs:
        wanted = expectation(pair.prompt)
        if wanted is None:
            continue
        try:
            before, after = read_image(pair.first.path), read_image(pair.last.path)
        except OSError:
            continue
        out.append(PromptProgress(pair.prompt, wanted[0], wanted[1], pair.first.step, pair.last.step, before, after))
    return out


def is_demo(config: Mapping[str, Any] | Any) -> bool:
    """Whether a run's config (a ``TrainingConfig`` or the dict the run store keeps) trained the built-in demo."""
    model = config.get("model", {}) if isinstance(config, Mapping) else getattr(config, "model", None)
    get = model.get if isinstance(model, Mapping) else (lambda k, d=None: getattr(model, k, d))
    return str(get("family", "") or "") == "demo" or str(get("base", "") or "").strip() == "demo"
