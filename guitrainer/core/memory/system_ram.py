"""System RAM of a run, beside the VRAM estimate (DESIGN §6): a sum of named parts, and what this machine has.

Two moments make the peak: **loading** the base model (:func:`~guitrainer.core.memory.estimate.peak_system_ram_loading`:
every part built on the CPU in the dtype it trains in, beside its file's pages), and **training**, which keeps in RAM what the GPU
does not hold: the blocks kept in system RAM (``precision.offload_blocks``; pinned, so the system cannot swap them
out), the VAE and text encoders parked there once their outputs are cached, the CPU copy of every cached latent
and text embedding (:class:`~guitrainer.engine.cache.TensorCache` keeps one in memory, with or without the disk
cache), and the decoded images while they are small enough to keep (:data:`PIXEL_CACHE_BYTES`). On a CPU the
training itself runs in RAM: the VRAM estimate's allocated parts count here, and nothing is parked or offloaded.

The peak is ``baseline + max(loading, training)``: the load's file pages are gone before the caches fill.
Checked against measured peak RSS by ``bench/ram_budget.py`` (bench/RESULTS.md).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from guitrainer.base.units import MiB
from guitrainer.config import TrainingConfig
from guitrainer.core.families.registry import facts
from guitrainer.core.memory import estimate
from guitrainer.core.memory.specs import ModelSpec, spec_for

#: Python, torch, diffusers, peft and accelerate imported, the engine's modules loaded, before any weights: the
#: headless trainer (``guitrainer-train``), measured by bench/ram_budget.py
BASELINE_HEADLESS = 480 * MiB

#: what the window adds to that: Qt, the pages, the thumbnail cache's memory (its LRU bound), the charts
WINDOW_ALLOWANCE = estimate.SYSTEM_RAM_BASELINE - BASELINE_HEADLESS

#: decoded training images are kept in memory (fp32, 3 × H × W) while all of them fit in this many bytes
#: (engine/data.py ``TrainDataset``)
PIXEL_CACHE_BYTES = 256 * MiB


@dataclass(frozen=True)
class RamPart:
    """One named part of the system-RAM estimate. ``loading``: only while the base model loads."""

    key: str  # "baseline", "loading", "pinned_blocks", "parked", "latent_cache", "text_cache", "dataset", "training"
    label: str
    bytes: int
    tooltip: str = ""
    loading: bool = False


@dataclass(frozen=True)
class RamBreakdown:
    """The estimate: the parts, the peak they make, and the machine's RAM (None: unknown)."""

    parts: tuple[RamPart, ...]
    machine_total: int | None = None
    notes: tuple[str, ...] = ()

    def get(self, key: str) -> int:
        return sum(p.bytes for p in self.parts if p.key == key)

    @property
    def training(self) -> int:
        """RAM while training: the baseline and every part that is not the load's."""
        return sum(p.bytes for p in self.parts if not p.loading)

    @property
    def loading(self) -> int:
        """RAM while the base model loads: the baseline and the load's copies."""
        return self.get("baseline") + self.get("loading")

    @property
    def peak(self) -> int:
        return max(self.training, self.loading)

    @property
    def fraction(self) -> float | None:
        return self.peak / self.machine_total if self.machine_total else None


def estimate_ram(
    config: TrainingConfig, spec: ModelSpec | None = None, device: estimate.Device = None, *,
    images: int | None = None, window: bool = True, machine_total: int | None = None,
) -> RamBreakdown:
    """Estimated system RAM of training ``config``, as named parts.

    Args:
        config: the training settings.
        spec: the base model's spec; by default the one of ``config.model.family``.
        device: the device trained on (a DeviceInfo, anything with ``total_memory``, or None: a GPU); a CPU device
            (``kind == "cpu"``) trains in RAM.
        images: training and class images (cached latents and text embeddings scale with it); None: unknown, the
            caches are not counted and a note says so.
        window: the app's window runs in the same process (the GUI) or not (``guitrainer-train``).
        machine_total: the machine's RAM, by default :func:`machine_ram`.
    """
    if spec is None:
        spec = spec_for(config)
    p = config.precision
    notes: list[str] = []
    fam = facts(spec.family)
    width = {"fp32": 4}.get(p.training, 2)
    on_cpu = getattr(device, "kind", "") == "cpu"
    baseline = BASELINE_HEADLESS + (WINDOW_ALLOWANCE if window else 0)
    parts = [RamPart("baseline", "Python, torch and the app", baseline,
                     "The libraries and the app before any weights" + (", with its window." if window else "."))]
    load = estimate.peak_system_ram_loading(config, spec, on_cpu=on_cpu) - estimate.SYSTEM_RAM_BASELINE
    parts.append(RamPart("loading", "Loading the base model", load, _loading_tip(config, spec, on_cpu), loading=True))
    if on_cpu:
        training_cfg = config.copy()
        training_cfg.precision.offload_blocks = 0.0  # nothing to offload: the model is in RAM already
        run = estimate.estimate(training_cfg, spec, device)
        parts.append(RamPart("training", "Training on the CPU", run.allocated,
                             "The CPU is the device: the weights, the LoRA, its optimizer and the activations are here."))
    else:
        off, _note = estimate.offload_plan(config, spec, device)
        if off.active:
            w = 1 if p.base_weights == "fp8" else width
            parts.append(RamPart("pinned_blocks", f"Blocks kept in system RAM ({off.blocks} of {off.total_blocks})",
                                 off.offloaded * w, "Pinned (page-locked): the system cannot swap them out while training runs."))
    parked = _parked(config, spec, width)
    if parked:
        where = "they stay in RAM beside the training" if on_cpu else "moved off the GPU after caching, kept in RAM"
        parts.append(RamPart("parked", "VAE / text encoders (cached)", parked, f"Their outputs are cached: {where}."))
    if images is None:
        notes.append("number of images unknown: caches not counted")
    else:
        parts += _cache_parts(config, spec, fam.latent_channels, fam.latent_downscale, width, images)
    return RamBreakdown(tuple(parts), machine_total if machine_total is not None else machine_ram(), tuple(notes))


def _loading_tip(config: TrainingConfig, spec: ModelSpec, on_cpu: bool) -> str:
    """The loading part's tooltip: the dtype the parts are built in, and the file pages beside them."""
    training = config.precision.training
    w_denoiser, w_vae, _w_text = estimate.load_widths(config, spec, on_cpu)
    vae = ", the VAE in fp32" if w_vae != w_denoiser else ""
    whole = str(config.model.base).lower().endswith((".safetensors", ".ckpt"))
    return (f"Each part built on the CPU in {training}, the dtype it trains in{vae}, beside its file's pages"
            + (" (the checkpoint file read whole first)" if whole else "")
            + "; the pages are let go once it is loaded.")


def _parked(config: TrainingConfig, spec: ModelSpec, width: int) -> int:
    """The frozen modules a run moves to RAM once their outputs are cached (engine/cache.py ``park``)."""
    p, net = config.precision, config.network
    vae_width = 4 if estimate.sdxl_vae_dtype(spec.family, p.training) == "fp32" else width
    te_width = 1 if p.base_weights == "fp8" else width
    out = spec.vae * vae_width if p.cache_latents else 0
    if p.cache_text_encoder_outputs and not net.train_text_encoder and not config.dataset.shuffle_captions:
        out += sum(spec.text_encoders) * te_width
    return out


def _cache_parts(
    config: TrainingConfig, spec: ModelSpec, channels: int, downscale: int, width: int, images: int,
) -> list[RamPart]:
    p, d = config.precision, config.dataset
    side = d.resolution // downscale
    variants = images * (2 if d.flip_augment else 1)
    out: list[RamPart] = []
    if p.cache_latents:
        size = variants * channels * side * side * width
        out.append(RamPart("latent_cache", "Cached latents", size,
                           f"{variants} latents of {channels}×{side}×{side}; a copy stays in RAM, also with the disk cache."))
    elif images * 3 * 4 * d.resolution**2 <= PIXEL_CACHE_BYTES:
        out.append(RamPart("dataset", "Decoded images", images * 3 * 4 * d.resolution**2,
                           f"{images} images decoded once and kept (fp32), as they are small enough."))
    text = p.cache_text_encoder_outputs and not config.network.train_text_encoder and not d.shuffle_captions
    if text:
        size = images * estimate.TEXT_TOKENS * spec.cross_attention_dim * width
        out.append(RamPart("text_cache", "Cached text embeddings", size,
                           f"One embedding per caption ({images} at most); a copy stays in RAM, also with the disk cache."))
    return out


@functools.cache
def machine_ram() -> int | None:
    """This machine's physical RAM in bytes (None when it cannot be read): psutil (it comes with accelerate),
    else ``os.sysconf`` (Linux, macOS), else ``/proc/meminfo``."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except (ImportError, OSError, AttributeError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
