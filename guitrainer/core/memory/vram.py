"""Live VRAM estimate of a LoRA training run: a sum of named parts, in microseconds, without torch.

The parameter tables below were computed once from the bundled configs (``resources/models``) by
:func:`guitrainer.engine.memory.model_spec.compute_model_spec`; ``tests/test_vram.py`` recomputes them. The activation
constants were fitted by ``bench/vram_calibrate.py`` against measured training steps (``bench/vram_grid.csv``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from guitrainer.base.units import GiB, MiB, format_bytes
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.model.lora_format import TEXT_ENCODER_LORA_TARGETS, UNET_LORA_TARGETS  # noqa: F401 - the one table
from guitrainer.core.model.vae_choice import vae_fp16_safe

if TYPE_CHECKING:  # annotations only: core never imports the config at run time
    from guitrainer.config import TrainingConfig

log = logging.getLogger(__name__)


class HasTotalMemory(Protocol):
    """A device known only by its memory size (the VRAM meter before the probe, tests)."""

    @property
    def total_memory(self) -> int | None: ...


#: what the estimator compares with: a probed DeviceInfo, a bare memory size, or None (unknown)
Device = DeviceInfo | HasTotalMemory | None

CUDA_BLOCK = 512  # the caching allocator rounds allocations up to this
BNB_MIN_8BIT_SIZE = 4096  # bitsandbytes keeps fp32 state for tensors with fewer elements
BNB_BLOCKSIZE = 256  # blockwise quantisation: one fp32 absmax per block
TEXT_TOKENS = 77

LoraTable = tuple[tuple[int, int, int, float], ...]  # (in, out, count, tokens per latent pixel; 0 = text tokens)


@dataclass(frozen=True)
class ModelSpec:
    """Parameter counts of one model family, and the shapes of the layers each LoRA target set trains."""

    family: str
    unet: int
    text_encoders: tuple[int, ...]
    vae_encoder: int  # encoder + quant_conv
    vae_decoder: int  # decoder + post_quant_conv
    vae_channels: int  # channels of the VAE's first (full-resolution) block
    text_encoder_shapes: tuple[tuple[int, int, int], ...]  # (hidden, intermediate, layers) per text encoder
    cross_attention_dim: int
    unet_lora: dict[str, LoraTable] = field(default_factory=dict)
    text_encoder_lora: dict[str, tuple[LoraTable, ...]] = field(default_factory=dict)

    @property
    def vae(self) -> int:
        return self.vae_encoder + self.vae_decoder

    def lora_params_per_rank(self, target: str, text_encoder: bool = False) -> int:
        """Trainable parameters per unit of rank: sum of ``in + out`` over the targeted layers."""
        n = sum(c * (i + o) for i, o, c, _ in self.unet_lora[target])
        if text_encoder:
            n += sum(c * (i + o) for table in self.text_encoder_lora[target] for i, o, c, _ in table)
        return n


# --------------------------------------------------------------------------- tables (generated)
# fmt: off
MODEL_SPECS: dict[str, ModelSpec] = {
    "demo": ModelSpec(
        family='demo',
        unet=1055044,
        text_encoders=(51616,),
        vae_encoder=367344,
        vae_decoder=587223,
        vae_channels=32,
        text_encoder_shapes=((32, 64, 2),),
        cross_attention_dim=32,
        unet_lora={
            "attention": ((32, 32, 6, 0.0), (32, 32, 18, 1.0), (32, 64, 8, 0.0), (64, 64, 24, 0.25)),
            "attention_ff": ((32, 32, 6, 0.0), (32, 32, 18, 1.0), (32, 64, 8, 0.0), (32, 256, 3, 1.0), (64, 64, 24, 0.25), (64, 512, 4, 0.25), (128, 32, 3, 1.0), (256, 64, 4, 0.25)),
            "attention_ff_proj": ((32, 32, 6, 0.0), (32, 32, 24, 1.0), (32, 64, 8, 0.0), (32, 256, 3, 1.0), (64, 64, 32, 0.25), (64, 512, 4, 0.25), (128, 32, 3, 1.0), (256, 64, 4, 0.25)),
        },
        text_encoder_lora={
            "attention": (((32, 32, 8, 0.0),),),
            "attention_ff": (((32, 32, 8, 0.0),),),
            "attention_ff_proj": (((32, 32, 8, 0.0),),),
        },
    ),
    "sd15": ModelSpec(
        family='sd15',
        unet=859520964,
        text_encoders=(123060480,),
        vae_encoder=34163664,
        vae_decoder=49490199,
        vae_channels=128,
        text_encoder_shapes=((768, 3072, 12),),
        cross_attention_dim=768,
        unet_lora={
            "attention": ((320, 320, 30, 1.0), (640, 640, 30, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 1280, 6, 0.015625), (1280, 1280, 30, 0.0625)),
            "attention_ff": ((320, 320, 30, 1.0), (320, 2560, 5, 1.0), (640, 640, 30, 0.25), (640, 5120, 5, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 320, 5, 1.0), (1280, 1280, 6, 0.015625), (1280, 1280, 30, 0.0625), (1280, 10240, 1, 0.015625), (1280, 10240, 5, 0.0625), (2560, 640, 5, 0.25), (5120, 1280, 1, 0.015625), (5120, 1280, 5, 0.0625)),
            "attention_ff_proj": ((320, 320, 40, 1.0), (320, 2560, 5, 1.0), (640, 640, 40, 0.25), (640, 5120, 5, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 320, 5, 1.0), (1280, 1280, 8, 0.015625), (1280, 1280, 40, 0.0625), (1280, 10240, 1, 0.015625), (1280, 10240, 5, 0.0625), (2560, 640, 5, 0.25), (5120, 1280, 1, 0.015625), (5120, 1280, 5, 0.0625)),
        },
        text_encoder_lora={
            "attention": (((768, 768, 48, 0.0),),),
            "attention_ff": (((768, 768, 48, 0.0),),),
            "attention_ff_proj": (((768, 768, 48, 0.0),),),
        },
    ),
    "sdxl": ModelSpec(
        family='sdxl',
        unet=2567463684,
        text_encoders=(123060480, 694659840),
        vae_encoder=34163664,
        vae_decoder=49490199,
        vae_channels=128,
        text_encoder_shapes=((768, 3072, 12), (1280, 5120, 32)),
        cross_attention_dim=2048,
        unet_lora={
            "attention": ((640, 640, 60, 0.25), (1280, 1280, 360, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0)),
            "attention_ff": ((640, 640, 60, 0.25), (640, 5120, 10, 0.25), (1280, 1280, 360, 0.0625), (1280, 10240, 60, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0), (2560, 640, 10, 0.25), (5120, 1280, 60, 0.0625)),
            "attention_ff_proj": ((640, 640, 70, 0.25), (640, 5120, 10, 0.25), (1280, 1280, 372, 0.0625), (1280, 10240, 60, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0), (2560, 640, 10, 0.25), (5120, 1280, 60, 0.0625)),
        },
        text_encoder_lora={
            "attention": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
            "attention_ff": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
            "attention_ff_proj": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
        },
    ),
}
# fmt: on

FAMILY_LABELS = {"demo": "Demo (tiny)", "sd15": "SD 1.5", "sdxl": "SDXL"}

# --------------------------------------------------------------------------- fitted constants
#: activation bytes per sample = px * (a + k * rank * T) + c, where px = latent pixels and T = sum over the
#: targeted layers of tokens per latent pixel; keyed by (family, "half" | "fp32", gradient checkpointing)
#: peak bytes of the VAE encoder (no grad) per image pixel per byte of the VAE's dtype, by family
# >>> fitted by bench/vram_calibrate.py --write
ACTIVATION_FIT: dict[tuple[str, str, bool], tuple[float, float, float]] = {
    ('demo', 'fp32', False): (24090.881, 7.95479, 0.0),
    ('demo', 'fp32', True): (8353.723, 1.71411, 0.0),
    ('demo', 'half', False): (16786.302, 5.96899, 0.0),
    ('demo', 'half', True): (5053.986, 2.4265, 0.0),
    ('sd15', 'fp32', False): (405846.964, 6.67119, 0.0),
    ('sd15', 'fp32', True): (98941.307, 0.0, 0.0),
    ('sd15', 'half', False): (282959.884, 4.47462, 0.0),
    ('sd15', 'half', True): (61577.701, 0.0, 0.0),
    ('sdxl', 'fp32', False): (632146.878, 52.12715, 0.0),
    ('sdxl', 'fp32', True): (36545.36, 0.0, 0.0),
    ('sdxl', 'half', False): (435906.265, 27.08835, 0.0),
    ('sdxl', 'half', True): (20013.668, 0.15394, 0.0),
}
VAE_ENCODE_FIT: dict[str, float] = {'demo': 520.8242, 'sd15': 610.7426, 'sdxl': 576.7054}
# <<< fitted

CUDA_CONTEXT_BYTES = 500 * MiB  # CUDA context + cuBLAS workspace: not in max_memory_allocated
ALLOCATOR_SLACK_FRACTION = 0.10  # reserved but unused memory of the caching allocator (of activations)
ALLOCATOR_SLACK_BYTES = 64 * MiB
SYSTEM_RAM_BASELINE = int(1.5 * GiB)  # Python, torch, diffusers and the GUI before any weights


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class VramPart:
    """One named part of the estimate."""

    key: str  # stable id: "cuda_context", "unet", "text_encoders", "vae", "lora_weights", ...
    label: str  # what the user sees: "UNet weights (fp16)"
    bytes: int
    tooltip: str = ""
    allocated: bool = True  # counted by torch.cuda.max_memory_allocated (False: context, allocator slack)


@dataclass(frozen=True)
class VramBreakdown:
    """The estimate: named parts, their total, and the device it is compared with."""

    parts: tuple[VramPart, ...]
    family: str
    device_total: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(p.bytes for p in self.parts)

    @property
    def allocated(self) -> int:
        """The part comparable with ``torch.cuda.max_memory_allocated`` (no context, no slack)."""
        return sum(p.bytes for p in self.parts if p.allocated)

    @property
    def fraction(self) -> float | None:
        """Total / device memory, or None for an unknown device."""
        return self.total / self.device_total if self.device_total else None

    def part(self, key: str) -> VramPart | None:
        return next((p for p in self.parts if p.key == key), None)

    def get(self, key: str) -> int:
        p = self.part(key)
        return p.bytes if p else 0


@dataclass(frozen=True)
class Hint:
    """A config change that lowers the estimate, and by how much."""

    label: str  # "Gradient checkpointing", "Batch 2 → 1"
    changes: dict[str, Any]  # {config path: new value}
    saving: int  # bytes

    @property
    def text(self) -> str:
        return f"{self.label} −{format_bytes(self.saving)}"


# --------------------------------------------------------------------------- formulas


def _blocks(nbytes: float) -> int:
    return -(-int(nbytes) // CUDA_BLOCK) * CUDA_BLOCK


def resolve_family(family: str, base: str = "") -> str:
    """'auto' is what the base model's files say (:func:`detected_family`); failing that a guess from its name
    (SDXL when it says 'xl'), else SD 1.5."""
    if family in ("demo", "sd15", "sdxl"):
        return family
    return detected_family(base) or ("sdxl" if "xl" in base.lower() else "sd15")


def detected_family(base: str) -> str | None:
    """The family :func:`guitrainer.core.model.checkpoint.detect_model` reads from the base model's files (a folder's
    configs, a checkpoint's tensor names, "demo"); None when they do not say. Cached until the path changes."""
    text = str(base).strip()
    if not text:
        return None
    try:
        stamp = os.stat(os.path.expanduser(text)).st_mtime_ns
    except OSError:
        stamp = None
    return _detected(text, stamp)


@functools.lru_cache(maxsize=16)
def _detected(text: str, _stamp: int | None) -> str | None:
    from guitrainer.core.model.checkpoint import detect_model

    return detect_model(text).family


def lora_tensor_shapes(spec: ModelSpec, target: str, rank: int, text_encoder: bool) -> list[tuple[int, int, int]]:
    """``(rows, cols, count)`` of every trainable tensor: lora_A [rank, in] and lora_B [out, rank]."""
    tables = [spec.unet_lora[target]]
    if text_encoder:
        tables += list(spec.text_encoder_lora[target])
    out: list[tuple[int, int, int]] = []
    for table in tables:
        for i, o, c, _ in table:
            out.append((rank, i, c))
            out.append((o, rank, c))
    return out


def optimizer_state_bytes(name: str, shapes: Iterable[Sequence[int]]) -> int:
    """Optimizer state (bytes, 512-byte blocks) of trainable tensors with the given shapes.

    AdamW: two fp32 states (8 B/param).
    bitsandbytes 8-bit (mirrors ``Optimizer2State.init_state``): tensors under ``min_8bit_size`` (4096
    elements) keep fp32 states; others keep uint8 states plus one fp32 absmax per 256 elements.
    Lion8bit: one state. Adafactor: factored row + column fp32 statistics for matrices.
    Measured from real steps (prodigyopt 1.1, dadaptation 3.2, schedulefree 1.4, came-pytorch 0.1.3), each an fp32
    tensor of the parameter's size unless said: Prodigy 4 (exp_avg, exp_avg_sq, s, p0 = the starting weights),
    DAdaptAdam 3 (exp_avg, exp_avg_sq, s), AdamWScheduleFree 2 (z, exp_avg_sq), CAME 1 (exp_avg) plus two
    row and two column vectors per matrix (exp_avg_sq_*, exp_avg_res_*) and a 0-dim RMS.
    """
    return sum(_state_one(name, tuple(s), 1) for s in shapes)


def _state_one(name: str, shape: tuple[int, ...], count: int, param_bytes: int = 4) -> int:
    """One tensor's optimizer state. torch's AdamW keeps its states in the parameter's dtype (2 bytes for bf16
    LoRA weights); bitsandbytes and transformers' Adafactor keep fp32 statistics whatever the dtype."""
    n = math.prod(shape)
    if name == "AdamW":
        return count * 2 * _blocks(param_bytes * n)
    if name in ("AdamW8bit", "PagedAdamW8bit", "Lion8bit"):
        states = 1 if name == "Lion8bit" else 2
        if n < BNB_MIN_8BIT_SIZE:
            return count * states * _blocks(4 * n)
        blocks = -(-n // BNB_BLOCKSIZE)
        return count * states * (_blocks(n) + _blocks(4 * blocks))
    if name == "Adafactor":
        dims = [d for d in shape if d > 1]
        if len(dims) >= 2:
            return count * (_blocks(4 * n // shape[-1]) + _blocks(4 * n // shape[-2]))
        return count * _blocks(4 * n)
    if name in FULL_STATES:
        return count * FULL_STATES[name] * _blocks(4 * n)
    if name == "CAME":
        if len(shape) >= 2:
            rows, cols = n // shape[-1], n // shape[-2]
            return count * (_blocks(4 * n) + 2 * _blocks(4 * rows) + 2 * _blocks(4 * cols) + _blocks(4))
        return count * (2 * _blocks(4 * n) + _blocks(4))
    raise ValueError(f"unknown optimizer {name!r}")


#: fp32 tensors of the parameter's size each optimizer keeps (measured, see :func:`optimizer_state_bytes`)
FULL_STATES = {"Prodigy": 4, "DAdaptAdam": 3, "AdamWScheduleFree": 2}


def _bytes(dtype: str) -> int:
    return {"fp32": 4, "fp8": 1}.get(dtype, 2)


def sdxl_vae_dtype(family: str, training: str, fp16_safe: bool = False) -> str:
    """The VAE's precision as the trainer runs it on a GPU: SDXL's own VAE overflows in fp16, so it stays fp32
    there, unless the configured VAE is fp16-safe by its config (``force_upcast`` false, as the fp16-fixed one)."""
    return "fp32" if (family == "sdxl" and training == "fp16" and not fp16_safe) else training


def sdxl_vae_fp32_cost(config: TrainingConfig, spec: ModelSpec | None = None) -> int:
    """Bytes the fp32 SDXL VAE adds to the peak against an fp16 one (the fp16-fixed VAE), for ``config``.

    With cached latents the VAE only encodes before training, so the cost is to the caching pass's peak;
    it is measured here the same way, with the latents not cached. 0 when the configured VAE is fp16-safe.
    """
    if spec is None:
        spec = MODEL_SPECS[resolve_family(str(config.model.family), str(config.model.base))]
    if spec.family != "sdxl" or config.precision.training != "fp16":
        return 0
    uncached = config.copy()
    uncached.precision.cache_latents = False
    return estimate(uncached, spec).total - estimate(uncached, spec, vae_dtype="fp16").total


def _vae_fp16_safe(family: str, config: TrainingConfig) -> bool:
    """Whether the configured VAE runs in fp16 (read from its config.json only where it matters: SDXL, fp16)."""
    return family == "sdxl" and config.precision.training == "fp16" and vae_fp16_safe(config)


def _activation_bytes(spec: ModelSpec, config: TrainingConfig) -> int:
    p, net = config.precision, config.network
    px = (config.dataset.resolution // 8) ** 2
    key = (spec.family, "fp32" if p.training == "fp32" else "half", bool(p.gradient_checkpointing))
    a, k, c = ACTIVATION_FIT.get(key, (0.0, 0.0, 0.0))
    tokens = sum(cnt * frac for _, _, cnt, frac in spec.unet_lora[net.target_modules])
    per_sample = px * (a + k * net.rank * tokens) + c
    return int(config.schedule.batch_size * max(per_sample, 0.0))


def _text_encoder_activation_bytes(spec: ModelSpec, config: TrainingConfig) -> int:
    """Saved activations of trained text encoders (not calibrated: ~16 hidden-sized tensors per layer)."""
    if not config.network.train_text_encoder:
        return 0
    b = config.schedule.batch_size
    per_layer_factor = 1 if config.precision.gradient_checkpointing else 16
    width = _bytes(config.precision.training)
    return sum(
        b * TEXT_TOKENS * (hidden * per_layer_factor + inter * 2) * layers * width
        for hidden, inter, layers in spec.text_encoder_shapes
    )


def _vae_encode_bytes(spec: ModelSpec, config: TrainingConfig, vae_width: int) -> int:
    res = config.dataset.resolution
    return int(config.schedule.batch_size * res * res * vae_width * VAE_ENCODE_FIT.get(spec.family, 0.0))


def estimate(
    config: TrainingConfig, spec: ModelSpec | None = None, device: Device = None, *, vae_dtype: str | None = None
) -> VramBreakdown:
    """Estimated peak GPU memory of training ``config`` (a TrainingConfig), as named parts.

    ``precision.base_weights = "fp8"`` stores the frozen UNet and text encoders in 1 byte per parameter (the
    VAE stays in the training precision); ``precision.lora_weights = "bf16"`` keeps the LoRA weights, their
    gradients and AdamW's two states in 2 bytes each.

    Args:
        config: the training settings.
        spec: the base model's spec; by default the table entry of ``config.model.family``.
        device: a probed DeviceInfo, or anything with ``total_memory`` (bytes); None = unknown.
        vae_dtype: the VAE's precision, when not the one the trainer picks (SDXL's VAE stays fp32 under fp16).
    """
    notes: list[str] = []
    if spec is None:
        family = resolve_family(str(config.model.family), str(config.model.base))
        if config.model.family == "auto" and detected_family(str(config.model.base)) is None:
            notes.append(f"model family not known yet: estimated as {FAMILY_LABELS[family]}")
        spec = MODEL_SPECS[family]
    p, net, opt = config.precision, config.network, config.optimizer
    wdt = p.training
    base_dt = "fp8" if getattr(p, "base_weights", "auto") == "fp8" else wdt
    w = _bytes(base_dt)
    vae_dt = vae_dtype or sdxl_vae_dtype(spec.family, wdt, _vae_fp16_safe(spec.family, config))
    te_offloaded = p.cache_text_encoder_outputs and not net.train_text_encoder
    parts: list[VramPart] = [
        VramPart("cuda_context", "CUDA context", CUDA_CONTEXT_BYTES, "CUDA runtime, kernels and cuBLAS workspace.", False),
        VramPart("unet", f"UNet weights ({base_dt})", _blocks(spec.unet * w), f"{spec.unet / 1e6:.0f} M frozen parameters"
                 + (f", stored in fp8 and widened to {wdt} one layer at a time." if base_dt == "fp8" else ".")),
    ]
    if te_offloaded:
        parts.append(VramPart("text_encoders", "Text encoder(s): offloaded", 0, "Embeddings are cached; the encoders leave the GPU."))
    else:
        n_te = sum(spec.text_encoders)
        parts.append(
            VramPart("text_encoders", f"Text encoder(s) ({base_dt})", _blocks(n_te * w), f"{n_te / 1e6:.0f} M parameters.")
        )
    vae_w = _bytes(vae_dt)
    if p.cache_latents:
        parts.append(VramPart("vae", "VAE: offloaded", 0, "Latents are cached; the VAE leaves the GPU."))
    else:
        parts.append(
            VramPart("vae", f"VAE ({vae_dt})", _blocks(spec.vae * vae_w), f"{spec.vae / 1e6:.0f} M parameters; encodes every step.")
        )
    widened = [_fp8_widening(spec, config, wdt)] if base_dt == "fp8" else []
    parts += widened
    lora_parts, lora = _lora_parts(spec, config)
    parts += lora_parts
    act = _activation_bytes(spec, config) + _text_encoder_activation_bytes(spec, config)
    if getattr(net, "type", "lora") != "lora":
        from guitrainer.core.memory import variants as vram_variants

        act += vram_variants.extra_activation_bytes(spec, config)
    act_tip = (
        f"Saved for the backward pass: batch {config.schedule.batch_size}, {config.dataset.resolution} px"
        + (", gradient checkpointing" if p.gradient_checkpointing else "")
        + "."
    )
    if not p.cache_latents:
        vae_peak = _vae_encode_bytes(spec, config, vae_w) - sum(w.bytes for w in widened)  # not at the same time
        if vae_peak > act:
            act_tip += " The VAE encoding each batch needs more than the UNet here."
        act = max(act, vae_peak)
    parts.append(VramPart("activations", "Activations", act, act_tip))
    workspace = 2 * lora if opt.name == "AdamW" else lora // 2
    parts.append(VramPart("workspace", "Temporary workspace", workspace, "Optimizer-step and gradient-clipping temporaries."))
    slack = int(ALLOCATOR_SLACK_FRACTION * act) + ALLOCATOR_SLACK_BYTES
    parts.append(VramPart("slack", "Allocator slack", slack, "Memory the caching allocator reserves but cannot use.", False))
    total_memory = getattr(device, "total_memory", None) if device is not None else None
    return VramBreakdown(tuple(parts), spec.family, int(total_memory) if total_memory else None, tuple(notes))


#: the share of the UNet's weights, widened from fp8 to the compute dtype, alive at the peak: with gradient
#: checkpointing a recomputed block's, kept for its backward; without it every layer's (fp8 then saves nothing).
#: Tracked fp16 steps, bench/RESULTS.md: SD 1.5 0.148-0.149, SDXL 0.128-0.198 with checkpointing; 0.87-0.96 without
FP8_WIDENED_SHARE = {True: 0.15, False: 0.9}


def _fp8_widening(spec: ModelSpec, config: TrainingConfig, compute: str) -> VramPart:
    ckpt = bool(config.precision.gradient_checkpointing)
    tip = f"fp8 weights widened to {compute} as layers compute; " + (
        "a recomputed block's are kept for its backward pass." if ckpt else "without gradient checkpointing every "
        "layer's widened copy is kept for the backward pass, so fp8 storage saves nothing: turn checkpointing on.")
    size = int(FP8_WIDENED_SHARE[ckpt] * spec.unet * _bytes(compute))
    return VramPart("fp8_widening", f"Widened fp8 weights ({compute})", size, tip)


def _lora_parts(spec: ModelSpec, config: TrainingConfig) -> tuple[list[VramPart], int]:
    """The trainable network's weights, gradients and optimizer state; also the weights' bytes alone."""
    p, net, opt = config.precision, config.network, config.optimizer
    if getattr(net, "type", "lora") != "lora":  # LoCon, LoHa, LoKr, DoRA
        from guitrainer.core.memory import variants as vram_variants

        shapes = vram_variants.tensor_shapes(spec, net)
    else:
        shapes = lora_tensor_shapes(spec, net.target_modules, net.rank, net.train_text_encoder)
    lora_dt = getattr(p, "lora_weights", "fp32")
    lw = _bytes(lora_dt)
    lora = sum(c * _blocks(lw * r * k) for r, k, c in shapes)
    n_lora = sum(c * r * k for r, k, c in shapes)
    state = sum(_state_one(opt.name, (r, k), c, lw) for r, k, c in shapes)
    return [
        VramPart("lora_weights", f"LoRA weights ({lora_dt})", lora,
                 f"{n_lora / 1e6:.2f} M trainable parameters, {lora_dt} master copy."),
        VramPart("lora_grads", f"LoRA gradients ({lora_dt})", lora, f"One {lora_dt} gradient per trainable parameter."),
        VramPart("optimizer", f"Optimizer state ({opt.name})", state, _OPT_TIPS.get(opt.name, "")),
    ], lora


_OPT_TIPS = {
    "AdamW": "Two fp32 moments: 8 bytes per trainable parameter.",
    "AdamW8bit": "8-bit moments (~2 B/param); tensors under 4096 elements keep fp32 state (8 B/param).",
    "PagedAdamW8bit": "8-bit moments in paged memory (~2 B/param); small tensors keep fp32 state.",
    "Lion8bit": "One 8-bit moment (~1 B/param); small tensors keep fp32 state.",
    "Adafactor": "Factored second moments: a row and a column vector per matrix.",
    "Prodigy": "Four fp32 tensors per parameter (two moments, its step-size sum, the starting weights): 16 B/param.",
    "DAdaptAdam": "Three fp32 tensors per parameter (two moments, its step-size sum): 12 B/param.",
    "AdamWScheduleFree": "Two fp32 tensors per parameter (the average's partner z, the second moment): 8 B/param.",
    "CAME": "One fp32 moment (4 B/param) plus row and column statistics per matrix.",
}


def peak_system_ram_loading(config: TrainingConfig, spec: ModelSpec | None = None) -> int:
    """Peak system RAM while loading the base model (bytes).

    Loading materialises every component in fp32 on the CPU before the cast and move to the GPU; the
    largest component is briefly held twice (its stored fp16 copy while converting). A single-file
    checkpoint is first read whole (fp16).
    """
    if spec is None:
        spec = MODEL_SPECS[resolve_family(str(config.model.family), str(config.model.base))]
    total = spec.unet + sum(spec.text_encoders) + spec.vae
    peak = SYSTEM_RAM_BASELINE + 4 * total + 2 * max(spec.unet, *spec.text_encoders, spec.vae)
    if str(config.model.base).lower().endswith((".safetensors", ".ckpt")):
        peak += 2 * total
    return peak


# --------------------------------------------------------------------------- hints


def _is_device_info(device: Device) -> bool:
    """A probed :class:`DeviceInfo` (as opposed to None or a bare ``total_memory`` holder)."""
    return isinstance(device, DeviceInfo)


def _candidate_changes(config: TrainingConfig, spec: ModelSpec, device: Device) -> list[tuple[str, dict[str, Any]]]:
    p, net, opt, s = config.precision, config.network, config.optimizer, config.schedule
    out: list[tuple[str, dict[str, Any]]] = []
    if not p.gradient_checkpointing:
        out.append(("Gradient checkpointing", {"precision.gradient_checkpointing": True}))
    if not p.cache_latents:
        out.append(("Cache latents", {"precision.cache_latents": True}))
    if not p.cache_text_encoder_outputs and not net.train_text_encoder and not config.dataset.shuffle_captions:
        out.append(("Cache text embeddings", {"precision.cache_text_encoder_outputs": True}))
    if net.train_text_encoder:
        out.append(("UNet only", {"network.train_text_encoder": False}))
    if opt.name in ("AdamW", "Adafactor"):
        out.append(("AdamW8bit", {"optimizer.name": "AdamW8bit"}))
    if p.training == "fp32":
        if _is_device_info(device):
            from guitrainer.core.precision.advisor import recommended_training

            half = recommended_training(device)  # what the precision picker suggests for this device
        else:
            half = "fp16"  # device unknown: the smallest change that halves the weights
        if half != "fp32":
            out.append((f"{half} AMP", {"precision.training": half}))
    if getattr(p, "base_weights", "auto") != "fp8":  # refused where fp8 cannot run (MPS, old torch): _errors
        out.append(("fp8 frozen weights", {"precision.base_weights": "fp8"}))
    if s.batch_size > 1:
        b = max(1, s.batch_size // 2)
        out.append((f"Batch {s.batch_size} → {b}", {"schedule.batch_size": b}))
    if net.rank >= 64:
        out.append((f"Rank {net.rank} → {net.rank // 2}", {"network.rank": net.rank // 2, "network.alpha": net.alpha / 2}))
    native = {"sd15": 512, "sdxl": 1024}.get(spec.family)
    if native and config.dataset.resolution > native:
        out.append((f"Resolution {config.dataset.resolution} → {native}", {"dataset.resolution": native}))
    return out


def _errors(device: Device, config: TrainingConfig) -> set[str]:
    """The error-level precision advice for ``config`` on ``device`` (none without a probed device)."""
    if not _is_device_info(device):
        return set()
    from guitrainer.core.precision.advisor import advise

    return {a.message for a in advise(device, config) if a.level == "error"}


def hints(config: TrainingConfig, spec: ModelSpec | None = None, device: Device = None, minimum: int = 16 * MiB) -> list[Hint]:
    """Changes that lower the estimate, biggest saving first; each is re-estimated on a modified copy.

    With a probed ``DeviceInfo`` a change is offered only if the precision rules raise no new error
    for it on that device (no 8-bit optimizer without a usable bitsandbytes, no bf16 on a card without
    it), and the precision offered is the one the precision picker recommends there.
    """
    if spec is None:
        spec = MODEL_SPECS[resolve_family(str(config.model.family), str(config.model.base))]
    base = estimate(config, spec, device).total
    known_errors = _errors(device, config)
    out: list[Hint] = []
    for label, changes in _candidate_changes(config, spec, device):
        changed = config.copy()
        try:
            for path, value in changes.items():
                changed.set(path, value)
        except ValueError as e:  # ConfigError: the change is not valid for this config
            log.debug("hint %s skipped: %s", label, e)
            continue
        blocked = _errors(device, changed) - known_errors
        if blocked:
            log.debug("hint %s skipped on this device: %s", label, min(blocked))
            continue
        saving = base - estimate(changed, spec, device).total
        if saving >= minimum:
            out.append(Hint(label, changes, saving))
    out.sort(key=lambda h: -h.saving)
    return out
