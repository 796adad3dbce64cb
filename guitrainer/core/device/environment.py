"""First-run environment check: what this machine can do, and for each problem the fix in plain words.

Pure logic over a :class:`~guitrainer.core.device.hardware.DeviceInfo` plus free-disk figures, so it
is testable with fake devices. Shown on first start and under Help ▸ Environment.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from guitrainer.base.units import format_bytes
from guitrainer.config.precision_choices import choice_label
from guitrainer.core.device.builds import cuda_install_hint
from guitrainer.core.device.hardware import DeviceInfo
from guitrainer.core.model import vae_choice
from guitrainer.core.precision.measurements import MeasurementStore
from guitrainer.core.precision.rules import (
    CPU_SMALL_FAMILIES,
    build_problem,
    eight_bit_status,
    fp8_storage_unavailable,
    recommended_training,
)

Level = Literal["ok", "info", "warning", "error"]

MIN_FREE_DISK = 5 * 1024**3  # a LoRA run with states and samples; base models need far more
LOW_VRAM = 6 * 1024**3


@dataclass(frozen=True)
class EnvItem:
    label: str
    value: str
    level: Level = "ok"
    fix: str = ""  # what to do, in plain words; empty when nothing is wrong


def free_disk(path: str | Path) -> int | None:
    """Free bytes on the disk holding ``path`` (or its nearest existing parent)."""
    p = Path(path).expanduser()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def check(device: DeviceInfo, folders: dict[str, Path | str], store: MeasurementStore | None = None) -> list[EnvItem]:
    """One row per fact; problems carry a level and a fix. ``store``: the precision lab's measurements (default:
    the user's), which outrank the rules in the "Precision" row."""
    items: list[EnvItem] = []
    if not device.torch_ok:
        reason = dict(device.unknown).get("torch", "")
        items.append(
            EnvItem("PyTorch", "not available" + (f" ({reason})" if reason else ""), "error",
                    "Reinstall the app, or in its environment: pip install torch")
        )
    else:
        backend = device.cuda_version and f"CUDA {device.cuda_version}" or device.hip_version and f"ROCm {device.hip_version}"
        build = backend or ("MPS" if device.kind == "mps" else "CPU only")
        if device.nvidia_gpu_unused:
            hint = cuda_install_hint(device.unused_nvidia_capability, machine=device.machine)
            items.append(
                EnvItem("PyTorch", f"{device.torch_version} ({build})", "error",
                        "This computer has an NVIDIA GPU, but your torch build is CPU-only: training will be very slow. "
                        f"Install the CUDA build with: {hint.command} ({hint.why})")
            )
        else:
            items.append(EnvItem("PyTorch", f"{device.torch_version} ({build})"))
    if device.gpus:
        for g in device.gpus:
            value = f"{g.name}, {g.arch_label}, {format_bytes(g.total_memory)}"
            problem = build_problem(device, g)
            if problem is not None:
                message, command = problem
                items.append(EnvItem(f"GPU {g.index}", value, "error", message + (f" Command: {command}" if command else "")))
            elif g.total_memory <= LOW_VRAM:
                items.append(
                    EnvItem(f"GPU {g.index}", value, "warning",
                            "6 GB or less: use the 'SD 1.5 character — 6 GB' preset, gradient checkpointing and 8-bit AdamW.")
                )
            else:
                items.append(EnvItem(f"GPU {g.index}", value))
    elif device.kind == "mps":
        items.append(EnvItem("GPU", "Apple GPU (MPS)", "info", "Works, slower than NVIDIA cards; 8-bit optimizers are not available."))
    elif device.torch_ok and not device.nvidia_gpu_unused:
        items.append(
            EnvItem("GPU", "none found", "warning",
                    "Training runs on the CPU: fine for the Demo preset, far too slow for SD 1.5 or SDXL. "
                    "An NVIDIA GPU with 6 GB or more is recommended.")
        )
    if device.torch_ok:
        items += _precision_items(device, store)
    bnb = device.bitsandbytes
    level, reason = eight_bit_status(device)
    if level is None or (bnb.available and not device.gpus and level != "error"):
        items.append(EnvItem("bitsandbytes", bnb.label()))
    else:
        items.append(
            EnvItem("bitsandbytes", bnb.label(), "warning" if device.gpus else "info",
                    f"8-bit optimizers (AdamW8bit, Lion8bit): {reason}. pip install -U bitsandbytes may help; "
                    "AdamW works without it.")
        )
    for label, folder in folders.items():
        free = free_disk(folder)
        if free is None:
            items.append(EnvItem(f"Free disk ({label})", "unknown", "info", f"Could not read the free space of {folder}."))
        elif free < MIN_FREE_DISK:
            items.append(
                EnvItem(f"Free disk ({label})", f"{format_bytes(free)} at {folder}", "warning",
                        "Less than 5 GB free: saves may fail. Free some space or choose another folder.")
            )
        else:
            items.append(EnvItem(f"Free disk ({label})", f"{format_bytes(free)} at {folder}"))
    return items


def _best_here(device: DeviceInfo, store: MeasurementStore | None) -> str:
    """"best here: …" from the precision lab's measurements of this device where they exist (they outrank the rules,
    DESIGN §5), else from the rules; a CPU's best depends on the model's size, and says so."""
    label = lambda t: choice_label("precision.training", t)  # noqa: E731 - three uses below
    reports = (store or MeasurementStore()).for_device(device)
    measured = []
    for r in reports:
        best = r.recommended()
        if best is not None:
            measured.append(f"{best.candidate.label} for {r.family} at {r.resolution} px (measured {r.measured_at[:10]})")
    if measured:
        return "best here: " + "; ".join(measured) + f"; the rules alone say {label(recommended_training(device))}"
    if device.kind == "cpu":
        small, full = (recommended_training(device, f) for f in (min(CPU_SMALL_FAMILIES), ""))
        if small != full:
            return f"best here: {label(full)} for SD 1.5 / SDXL, {label(small)} for the demo model"
    return f"best here: {label(recommended_training(device))}"


def _precision_items(device: DeviceInfo, store: MeasurementStore | None) -> list[EnvItem]:
    """What this device does with each precision (the precision picker's rules, or what the precision lab measured
    here), and the fp16-fixed SDXL VAE."""
    native = device.bf16_native
    bf16 = "in hardware" if native else "emulated (slow)" if native is False else "not known"
    fp8 = fp8_storage_unavailable(device)
    value = (f"{_best_here(device, store)}; bf16 {bf16}; "
             f"fp8 base weights {'possible' if not fp8 else 'not possible: ' + fp8.split(' (')[0]}")
    items = [EnvItem("Precision", value)]
    if vae_choice.hub_snapshots(vae_choice.FP16_FIX_REPO):
        items.append(EnvItem("SDXL fp16 VAE", f"{vae_choice.FP16_FIX_REPO}, in the Hugging Face cache"))
    else:
        items.append(EnvItem("SDXL fp16 VAE", "not downloaded", "info",
                             "Only for SDXL in fp16: it saves up to about 1.4 GB (1024 px, latents not cached; the "
                             "Model & Precision page says the cost for your settings). " + vae_choice.FP16_FIX_DOWNLOAD))
    return items


def worst(items: list[EnvItem]) -> Level:
    order = {"ok": 0, "info": 1, "warning": 2, "error": 3}
    return max((i.level for i in items), key=order.__getitem__, default="ok")
