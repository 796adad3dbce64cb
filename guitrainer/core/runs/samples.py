"""A run's sample images by prompt: the first and the latest of each, the pair a before / after view shows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from guitrainer.core.events import SampleImage


@dataclass(frozen=True)
class SamplePair:
    """A prompt's first sample (the base model's, when the run sampled at step 0) and its latest."""

    prompt: str
    first: SampleImage
    last: SampleImage

    @property
    def before_training(self) -> bool:
        return self.first.step == 0


def first_and_last(samples: Iterable[SampleImage]) -> list[SamplePair]:
    """Per prompt, in the order the prompts first appear: the sample of the lowest step and of the highest
    (at equal steps the later one, a resumed run's re-made sample)."""
    first: dict[str, SampleImage] = {}
    last: dict[str, SampleImage] = {}
    for s in samples:
        if s.prompt not in first or s.step < first[s.prompt].step:
            first[s.prompt] = s
        if s.prompt not in last or s.step >= last[s.prompt].step:
            last[s.prompt] = s
    return [SamplePair(p, first[p], last[p]) for p in first]


def from_artifacts(artifacts: Iterable[dict[str, object]]) -> list[SampleImage]:
    """The samples among a run's recorded artifacts (:meth:`RunStore.artifacts`), in the order written."""
    out: list[SampleImage] = []
    for a in artifacts:
        if a.get("kind") == "sample" and a.get("path"):
            step = a.get("step")
            out.append(SampleImage(path=str(a["path"]), prompt=str(a.get("prompt") or ""), step=step if isinstance(step, int) else 0))
    return out
