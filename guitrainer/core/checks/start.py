"""Can this run start, and why not: the check the Training page runs before every start.

Pure Python (no Qt, no torch at import): the page only shows what :func:`check_start` decides, and the
tests check the decisions without a window. ``errors`` block a start, ``confirm`` needs a yes,
``notes`` are logged.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import os
import platform
from dataclasses import dataclass, field

from guitrainer.base.units import format_bytes
from guitrainer.config import TrainingConfig
from guitrainer.core.checks.inputs import disk_problems
from guitrainer.core.device import hardware
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.memory import estimate
from guitrainer.core.precision import advisor

log = logging.getLogger(__name__)

# Advice that an assumed CPU device cannot back: bitsandbytes was not looked at, and there may be a GPU.
GUESS_UNSURE = frozenset(
    {"eight_bit_unusable", "eight_bit_cpu", "paged_without_cuda", "cpu_training", "torch_cpu_build", "gpu_missing"}
)


@dataclass
class StartCheck:
    """What stands between the settings and a run: ``errors`` block it, ``confirm`` needs a yes."""

    errors: list[str] = field(default_factory=list)
    confirm: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # warnings worth logging, not asking about

    @property
    def ok(self) -> bool:
        return not self.errors


@functools.lru_cache(maxsize=1)
def _torch_version_without_import() -> str:
    """torch's version from its package metadata ("unknown" when only the module is found, "" when absent)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        try:
            return "unknown" if importlib.util.find_spec("torch") is not None else ""
        except (ImportError, ValueError):
            return ""


def assumed_cpu_device() -> DeviceInfo:
    """A CPU-only ``DeviceInfo`` built without importing torch, for when the device probe failed.

    The precision rules then still see the choice (e.g. fp16 on the CPU); facts that need torch or
    bitsandbytes stay unknown.
    """
    why = "the device check did not finish"
    torch_version = _torch_version_without_import()
    return hardware.DeviceInfo(
        cpu=hardware.CpuInfo(name=platform.machine() or "CPU", cores=os.cpu_count() or 1),
        bitsandbytes=hardware.BitsAndBytesInfo(False, reason=f"not checked: {why}"),
        torch_version=torch_version,
        unknown=(("device", why),) + (() if torch_version else (("torch", "it is not installed"),)),
    )


def _check_device(out: StartCheck, config: TrainingConfig, device: DeviceInfo, guessed: bool) -> None:
    """Precision advice (errors block, warnings are notes) and the memory estimate against the GPU."""
    try:
        for a in advisor.advise(device, config):
            if guessed and a.code in GUESS_UNSURE:
                continue
            line = a.message + (f" Suggestion: {a.suggestion_text}." if a.suggestion_text else "")
            if guessed and a.topic != "device":
                line = "The device could not be checked, so the CPU is assumed: " + line
            if a.level == "error":
                out.errors.append(line)
            elif a.level == "warning":
                out.notes.append(line)
    except Exception:  # noqa: BLE001 - advice must not block a run by crashing
        log.exception("precision advice failed")
    available = getattr(device, "total_memory", None)
    if available and getattr(device, "kind", "cuda") != "cpu":
        try:
            total = int(estimate.estimate(config, None, device).total)
        except Exception:  # noqa: BLE001 - an estimate must not block a run by crashing
            log.exception("VRAM estimate failed")
        else:
            if total > available:
                out.confirm.append(
                    f"The estimated memory need ({format_bytes(total)}) is more than your GPU has "
                    f"({format_bytes(available)}). Training will probably run out of memory."
                )


def check_start(config: TrainingConfig, device: DeviceInfo | None = None) -> StartCheck:
    """Everything worth knowing before a run starts, in plain words.

    Args:
        config: the settings about to be trained.
        device: the probed machine; None (the device probe failed) checks against :func:`assumed_cpu_device`.
    """
    out = StartCheck()
    for e in config.errors():
        out.errors.append(f"Setting “{e.field}”: {e.message}.")
    for p in disk_problems(config, create_output=True):  # the same checks and words as guitrainer-train --check
        (out.errors if p.level == "error" else out.notes).append(p.message)
    guessed = device is None
    if device is None:
        device = assumed_cpu_device()
    for_gpu = getattr(device, "for_gpu_index", None)
    if for_gpu is not None:  # the memory check compares with the GPU this run trains on
        device = for_gpu(config.precision.gpu_index)
    _check_device(out, config, device, guessed)
    return out
