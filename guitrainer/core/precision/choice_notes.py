"""What the precision picker shows beside each training choice: "recommended here", "not supported here", what a
measurement found, or the rules' caveat in a few words.

Decided here, without Qt, from the same advice the page's cards show (:func:`guitrainer.core.precision.advisor.advise`,
which follows a measurement of this device where one exists, DESIGN §5), so a label never says what the cards
contradict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from guitrainer.config import TrainingConfig, precision_choices
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.precision import advisor
from guitrainer.core.precision.advice import Advice, worst
from guitrainer.core.precision.lab import times
from guitrainer.core.precision.measurements import MeasuredRecommendation, MeasurementStore, recommended_here

TOPIC = "precision.training"
NoteKind = Literal["", "recommended", "error", "warning", "measured"]

#: what a caveat is about, in the few words that fit beside a choice on a 1366 px screen (first match wins);
#: the note's tooltip holds the advice in full
_GISTS = (
    ("nan", "NaN / black-image risk here"),
    ("emulated", "emulated here: slow"),
    ("slower", "slower than fp32 here"),
    ("slow", "slow here"),
)


def gist(message: str) -> str:
    """A caveat in a few words for the note beside a choice (never widening the page); the tooltip has it all."""
    low = message.lower()
    return next((g for key, g in _GISTS if key in low), "has a caveat here (hover)")


@dataclass(frozen=True)
class ChoiceNote:
    """The note beside one training choice.

    Attributes:
        text: the few words shown ("" for none).
        kind: what it is, for its colour: "recommended", "error", "warning", "measured" (what the lab found).
        tooltip: the whole reason.
    """

    text: str = ""
    kind: NoteKind = ""
    tooltip: str = ""


def choice_notes(device: DeviceInfo | None, config: TrainingConfig, store: MeasurementStore | None = None) -> dict[str, ChoiceNote]:
    """The note for every training choice of ``config`` on ``device`` (empty notes while the device is unknown).

    In order: an error-level rule ("not supported here"); the recommendation (a measurement's when one exists,
    else the rules'); what the precision lab measured for the choice ("measured 1.58x slower"); the rules'
    warning in a few words.
    """
    values = [c.value for c in precision_choices.TRAINING_CHOICES]
    if device is None:
        return {v: ChoiceNote() for v in values}
    rec = recommended_here(device, config, store)
    measured = rec.measured if rec is not None else None
    notes: dict[str, ChoiceNote] = {}
    for value in values:
        trial = config.copy()
        trial.set(TOPIC, value)
        # advice about the training precision itself, not the device's build (which every choice shares)
        about = [a for a in advisor.advise(device, trial, store) if a.topic == TOPIC]
        errors = [a for a in about if a.level == "error"]
        if errors:
            notes[value] = ChoiceNote("not supported here", "error", errors[0].message)
        elif rec is not None and value == rec.training:
            notes[value] = ChoiceNote(rec.note, "recommended", rec.reason)
        elif measured is not None and measured.seconds(value, config.precision.base_weights) is not None:
            notes[value] = _measured_note(value, config, measured, about)
        elif worst(about) == "warning":
            why = next(a.message for a in about if a.level == "warning")
            notes[value] = ChoiceNote(gist(why), "warning", why)
        else:
            notes[value] = ChoiceNote()
    return notes


def _measured_note(value: str, config: TrainingConfig, measured: MeasuredRecommendation, about: list[Advice]) -> ChoiceNote:
    """What the lab found for a choice it ran that is not the recommendation."""
    seconds = measured.seconds(value, config.precision.base_weights)
    best = measured.seconds(measured.training, measured.base_weights)
    tip = next((a.message for a in about if a.suggestion.get(TOPIC) == measured.training), "")
    why = measured.why_not(value, config.precision.base_weights)
    if why:
        return ChoiceNote("measured faster, not recommended", "warning", tip or f"It ran faster, but {why}.")
    ratio = seconds / best if best else 1.0
    return ChoiceNote(f"measured {times(ratio)} slower", "warning" if ratio >= 1.5 else "measured",
                      tip or f"{seconds:.3f} s/step against {best:.3f} ({measured.where}).")
