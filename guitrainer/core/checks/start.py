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
from guitrainer.core.dataset.folder_check import FolderLook
from guitrainer.core.device import hardware
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.memory import estimate, system_ram
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


def check_start(config: TrainingConfig, device: DeviceInfo | None = None, *, machine_ram: int | None = None) -> StartCheck:
    """Everything worth knowing before a run starts, in plain words.

    Args:
        config: the settings about to be trained.
        device: the probed machine; None (the device probe failed) checks against :func:`assumed_cpu_device`.
        machine_ram: this computer's RAM in bytes; by default read from the system
            (:func:`~guitrainer.core.memory.system_ram.machine_ram`).
    """
    out = StartCheck()
    for e in config.errors():
        out.errors.append(f"Setting “{e.field}”: {e.message}.")
    looks: list[FolderLook] = []
    for p in disk_problems(config, create_output=True, looks=looks):  # the same checks and words as --check
        (out.errors if p.level == "error" else out.notes).append(p.message)
    listed = len(config.dataset.folders) + len(config.dataset.regularization_folders)
    images = sum(lk.images for lk in looks) if looks and len(looks) == listed else None  # for the RAM estimate
    guessed = device is None
    if device is None:
        device = assumed_cpu_device()
    for_gpu = getattr(device, "for_gpu_index", None)
    if for_gpu is not None:  # the memory check compares with the GPU this run trains on
        device = for_gpu(config.precision.gpu_index)
    _check_device(out, config, device, guessed)
    _check_ram(out, config, device, machine_ram, images)
    return out


#: the one-click-free fixes for a RAM estimate over the machine's, by the part that is too large
RAM_FIXES = {
    "pinned_blocks": "keep fewer blocks in system RAM (Blocks in system RAM, now {share:.0%})",
    "text_cache": "turn off Cache text embeddings (a copy of each stays in RAM, also with the disk cache)",
    "latent_cache": "train at a lower resolution or on fewer images (a copy of each cached latent stays in RAM)",
    "training": "a smaller batch or resolution (on the CPU the training itself is in RAM)",
    "loading": "load a diffusers folder rather than one checkpoint file, which is read whole first",
}


def _check_ram(
    out: StartCheck, config: TrainingConfig, device: DeviceInfo, machine_ram: int | None, images: int | None
) -> None:
    """The system-RAM estimate (core/memory/system_ram.py) against this computer's RAM: over it asks first,
    naming the parts to shrink. ``images``: training and class images (None: unknown)."""
    try:
        ram = system_ram.estimate_ram(config, None, device, images=images, machine_total=machine_ram)
    except Exception:  # noqa: BLE001 - an estimate must not block a run by crashing
        log.exception("system RAM estimate failed")
        return
    total = ram.machine_total
    if not total or ram.peak <= total:
        return
    single_file = str(config.model.base).lower().endswith((".safetensors", ".ckpt"))
    over = [(phase, need) for phase, need in (("while the base model loads", ram.loading), ("while training", ram.training))
            if need > total]
    fixes = []
    for p in sorted(ram.parts, key=lambda p: -p.bytes):
        phase_over = (ram.loading if p.loading else ram.training) > total
        if p.key in RAM_FIXES and p.bytes > 0 and phase_over and (p.key != "loading" or single_file):
            fixes.append(RAM_FIXES[p.key].format(share=config.precision.offload_blocks))
    if ram.get("pinned_blocks") and ram.training > total and config.precision.base_weights != "fp8":
        fixes.append("store the frozen weights in fp8 (Base model weights), which halves the blocks kept in RAM")
    needs = " and ".join(f"{format_bytes(need)} {phase}" for phase, need in over)
    out.confirm.append(
        f"The estimated system RAM need ({needs}) is more than this computer has ({format_bytes(total)}): the run "
        "may be stopped by the system or slow down to a crawl." + (f" To lower it: {'; '.join(fixes)}." if fixes else "")
    )
