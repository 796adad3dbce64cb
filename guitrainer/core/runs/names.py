"""A run's file names: one label on everything the run writes, chosen once when the run starts.

A run is known on disk by its label: the output name for the first run in a folder (``demo_lora``),
then ``demo_lora_2``, ``demo_lora_3`` ... Every file the run writes carries that label, so its files
pair, and no run writes over another's:

* the LoRA ``<label>.safetensors`` (diffusers: the folder ``<label>/``) and its intermediate saves
  ``<label>-000003`` (every N epochs) and ``<label>-step000120`` (Save now);
* the resumable state ``<label>_state``;
* the sample images ``samples/<label>_step000050_0.png``;
* the TensorBoard events ``logs/<label>_<YYYYmmddHHMMSS>/``.

The output name is taken as every system can write it (:func:`~guitrainer.base.names.safe_name`). A
label is free in a folder when none of these exist under it (compared without case: on Windows and
macOS ``Ink.safetensors`` is ``ink.safetensors``). A resumed run keeps the label of the state it resumes
from (``<label>_state`` in its output folder), so it writes on into its own files. With
``output.overwrite`` the output name is the label, whatever is there.

The engine writes by these names, the Output page previews them and the run store keeps them: every
one of them takes the names from here. No Qt and no torch.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from guitrainer.base.names import safe_name
from guitrainer.base.paths import expand, path_key
from guitrainer.core.model.lora_format import DIFFUSERS_WEIGHT_NAME
from guitrainer.core.runs.state import STATE_SUFFIX

SAMPLES_FOLDER = "samples"
LOGS_FOLDER = "logs"
LORA_SUFFIX = ".safetensors"


@dataclass(frozen=True)
class RunFiles:
    """Where one run writes, under one label.

    Attributes:
        folder: the output folder (``~`` expanded).
        label: the name every file of the run starts with (``demo_lora_2``).
        format: ``"kohya"`` (one ``.safetensors`` file) or ``"diffusers"`` (a folder per LoRA).
    """

    folder: Path
    label: str
    format: str = "kohya"

    def lora(self, tag: str = "") -> Path:
        """The LoRA file written (diffusers: the weights file inside the LoRA's folder); ``tag``: an intermediate save."""
        stem = f"{self.label}-{tag}" if tag else self.label
        if self.format == "diffusers":
            return self.folder / stem / DIFFUSERS_WEIGHT_NAME
        return self.folder / f"{stem}{LORA_SUFFIX}"

    def lora_item(self, tag: str = "") -> Path:
        """What the user sees as that LoRA: the file (kohya) or its folder (diffusers)."""
        path = self.lora(tag)
        return path.parent if self.format == "diffusers" else path

    @property
    def state(self) -> Path:
        """The resumable state folder ``<label>_state``."""
        return self.folder / f"{self.label}{STATE_SUFFIX}"

    @property
    def samples(self) -> Path:
        """The folder the sample images go to (shared by the runs of a folder; the file names are the run's)."""
        return self.folder / SAMPLES_FOLDER

    def sample(self, step: int, index: int) -> Path:
        """``samples/<label>_step<N>_<i>.png`` (N zero-padded to 6 digits, so the names sort by step)."""
        return self.samples / f"{self.label}_step{step:06d}_{index}.png"

    def sample_pattern(self) -> str:
        """The sample file names as a glob, for a preview (``demo_lora_2_step*_*.png``)."""
        return f"{self.label}_step*_*.png"

    def logs(self, when: datetime | None = None) -> Path:
        """``logs/<label>_<YYYYmmddHHMMSS>``: a TensorBoard folder per launch, kohya's layout."""
        stamp = (when or datetime.now()).strftime("%Y%m%d%H%M%S")
        return self.folder / LOGS_FOLDER / f"{self.label}_{stamp}"

    def in_use(self) -> list[str]:
        """The names on disk that carry this label (empty: the label is free in this folder)."""
        return _Listing.of(self.folder).uses(self.label)


def label_of_state(state_folder: str | Path) -> str | None:
    """The label of a state folder ``<label>_state``; None for a folder named otherwise."""
    name = Path(state_folder).name
    if name.endswith(STATE_SUFFIX) and len(name) > len(STATE_SUFFIX):
        return name[: -len(STATE_SUFFIX)]
    return None


def labels(name: str) -> Iterable[str]:
    """The labels a run named ``name`` may take, in order: ``name``, ``name_2``, ``name_3`` ..."""
    yield name
    for i in itertools.count(2):
        yield f"{name}_{i}"


def choose(output: Any, resume_from: str | os.PathLike[str] = "", *, keep: str = "") -> RunFiles:
    """The files of a run that writes with ``output`` (an :class:`~guitrainer.config.OutputConfig`).

    * resuming a state ``<label>_state`` of this output folder: that label (the run writes on into its files);
    * ``output.overwrite``: the output name;
    * ``keep`` (a run that moves to another folder mid-run): that label when it is free there;
    * else the first free label of :func:`labels`.
    """
    folder = expand(str(output.folder))
    fmt = str(output.format)
    name = safe_name(str(output.name), "lora")  # as every system can write it (the config refuses other names)
    if str(resume_from).strip():
        state = expand(str(resume_from))
        label = label_of_state(state)
        if label is not None and path_key(state.parent) == path_key(folder):
            return RunFiles(folder, label, fmt)
    if output.overwrite:
        return RunFiles(folder, name, fmt)
    listing = _Listing.of(folder)
    if keep and not listing.uses(keep):
        return RunFiles(folder, keep, fmt)
    label = next(c for c in labels(name) if not listing.uses(c))
    return RunFiles(folder, label, fmt)


def planned(config: Any, files: RunFiles | None = None) -> list[tuple[str, str]]:
    """(what, path) of every file a run of ``config`` writes, for the Output page's preview.

    ``files``: the names of a run already started; otherwise those the next run would take (:func:`choose`).
    """
    o = config.output
    files = files or choose(o, config.schedule.resume_from)
    out = [("LoRA", str(files.lora_item()))]
    n = int(o.save_every_n_epochs)
    if n:
        keep = f", newest {o.keep_last} kept" if o.keep_last else ""
        out.append((f"Every {n} epoch{'s' if n != 1 else ''}{keep}", str(files.lora_item(f"{n:06d}"))))
    out.append(("State (to resume)", str(files.state)))
    s = config.sampling
    if (int(s.every_n_steps) or bool(getattr(s, "at_start", False))) and any(str(p).strip() for p in s.prompts):
        out.append(("Sample images", str(files.samples / files.sample_pattern())))
    if o.tensorboard:
        out.append(("TensorBoard logs", str(files.folder / LOGS_FOLDER / f"{files.label}_<time>")))
    return out


@dataclass(frozen=True)
class _Listing:
    """The names in an output folder, its samples folder and its logs folder (listed once per choice)."""

    top: frozenset[str]
    samples: frozenset[str]
    logs: frozenset[str]

    @classmethod
    def of(cls, folder: Path) -> _Listing:
        return cls(_names(folder), _names(folder / SAMPLES_FOLDER), _names(folder / LOGS_FOLDER))

    def uses(self, label: str) -> list[str]:
        """The listed names that belong to a run labelled ``label``."""
        lab = re.escape(label)
        top = re.compile(rf"^(?:{lab}(?:-(?:step)?\d{{6}}(?:_\d+)?)?(?:{re.escape(LORA_SUFFIX)})?"
                         rf"|{lab}{STATE_SUFFIX}|\.{lab}{STATE_SUFFIX}\.(?:tmp|old)-\d+)$", re.IGNORECASE)
        sample = re.compile(rf"^{lab}_step\d+_\d+\.png$", re.IGNORECASE)
        logs = re.compile(rf"^{lab}_\d{{14}}$", re.IGNORECASE)
        found = [n for n in self.top if top.match(n)]
        found += [f"{SAMPLES_FOLDER}/{n}" for n in self.samples if sample.match(n)]
        found += [f"{LOGS_FOLDER}/{n}" for n in self.logs if logs.match(n)]
        return sorted(found)


def _names(folder: Path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(folder))
    except OSError:  # not there yet (or not a folder): nothing of any run is in it
        return frozenset()
