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
from guitrainer.core.device.hardware import DeviceInfo
from guitrainer.core.model import vae_choice
from guitrainer.core.precision.rules import (
    TORCH_FLOAT8,
    build_is_older_than,
    eight_bit_status,
    recommended_training,
    torch_install_hint,
)

Level = Literal["ok", "info", "warning", "error"]

CUDA_INSTALL = "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128"
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


def check(device: DeviceInfo, folders: dict[str, Path | str]) -> list[EnvItem]:
    """One row per fact; problems carry a level and a fix."""
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
            items.append(
                EnvItem("PyTorch", f"{device.torch_version} ({build})", "error",
                        "This computer has an NVIDIA GPU, but your torch build is CPU-only: training will be very slow. "
                        f"Install the CUDA build with: {CUDA_INSTALL} (for a GTX 10-series or older card, "
                        "cu126 instead of cu128: the cu128 builds dropped those cards)")
            )
        else:
            items.append(EnvItem("PyTorch", f"{device.torch_version} ({build})"))
    if device.gpus:
        for g in device.gpus:
            value = f"{g.name}, {g.arch_label}, {format_bytes(g.total_memory)}"
            if g.kernels_in_build is False:
                older = build_is_older_than(g, device.arch_list)
                items.append(
                    EnvItem(f"GPU {g.index}", value, "error",
                            f"This torch build has no kernels for {g.arch} (it has {', '.join(device.arch_list) or 'none'}): "
                            f"the card is {'older' if older else 'newer'} than the build supports. Install the build "
                            f"for it: {torch_install_hint(g.capability)}")
                )
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
        items += _precision_items(device)
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


def _precision_items(device: DeviceInfo) -> list[EnvItem]:
    """What this device does with each precision (the precision picker's rules), and the fp16-fixed SDXL VAE."""
    best = recommended_training(device)
    native = device.bf16_native
    bf16 = "in hardware" if native else "emulated (slow)" if native is False else "not known"
    fp8 = device.kind != "mps" and device.torch_tuple >= TORCH_FLOAT8
    value = (f"best here: {'fp32' if best == 'fp32' else best + ' AMP'}; bf16 {bf16}; "
             f"fp8 base weights {'possible' if fp8 else 'not possible'}")
    items = [EnvItem("Precision", value)]
    if vae_choice.hub_snapshots(vae_choice.FP16_FIX_REPO):
        items.append(EnvItem("SDXL fp16 VAE", f"{vae_choice.FP16_FIX_REPO}, in the Hugging Face cache"))
    else:
        items.append(EnvItem("SDXL fp16 VAE", "not downloaded", "info",
                             "Only for SDXL in fp16: it saves up to about 1.4 GB (1024 px, latents not cached; the "
                             "Model page says the cost for your settings). " + vae_choice.FP16_FIX_DOWNLOAD))
    return items


def worst(items: list[EnvItem]) -> Level:
    order = {"ok": 0, "info": 1, "warning": 2, "error": 3}
    return max((i.level for i in items), key=order.__getitem__, default="ok")
