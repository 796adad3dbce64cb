"""Live memory estimate of a LoRA training run: a sum of named parts, in microseconds, without torch.

The activation constants were fitted by ``bench/vram_calibrate.py`` against measured training steps
(``bench/vram_grid.csv``), the transformer families' by ``bench/transformer_vram.py``; the parameter tables are in :mod:`~guitrainer.core.memory.specs`, the trainable
tensors in :mod:`~guitrainer.core.memory.network`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from guitrainer.base.units import GiB, MiB
from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.families.registry import facts
from guitrainer.core.memory import load_files, offload, quantised
from guitrainer.core.memory.network import allocated, tensor_state_bytes, trainable_shapes
from guitrainer.core.memory.specs import (
    ModelSpec,
    conv_table,
    detected_family,
    family_label,
    resolve_family,
    spec_for,
)
from guitrainer.core.model.vae_choice import vae_fp16_safe


class HasTotalMemory(Protocol):
    """A device known only by its memory size (the VRAM meter before the probe, tests)."""

    @property
    def total_memory(self) -> int | None: ...

#: what the estimator compares with: a probed DeviceInfo, a bare memory size, or None (unknown)
Device = DeviceInfo | HasTotalMemory | None

#: the device kinds with a CUDA context and torch's caching allocator (ROCm too: torch runs HIP as "cuda"); their
#: sizes were measured on CUDA. Other devices (a CPU, Apple's MPS, Intel's XPU) have neither part here.
GPU_RUNTIME_KINDS = ("cuda",)


def device_kind(device: Device) -> str:
    """"cuda" (also ROCm), "xpu", "mps" or "cpu"; "" while the device is not known (before the probe answers).
    A device known only by its memory size is a CUDA GPU (a card picked by size, the benches, tests)."""
    if device is None:
        return ""
    kind = getattr(device, "kind", "")
    if kind:
        return str(kind)
    return "cuda" if getattr(device, "total_memory", None) else ""

TEXT_TOKENS = 77

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

#: transformer families (Flux.1, SD 3.5): activation bytes = batch * N * (sum_j a_j * blocks_j + p) + sum_j c_j *
#: blocks_j, where N = image tokens + text tokens (``FamilyFacts.text_tokens``), blocks_j the count of block list j
#: (``ModelSpec.blocks``: Flux's double and single, SD 3's joint), a_j what one block of list j keeps per token for the
#: backward pass (with checkpointing: its input), p the rest (embedders, loss; with checkpointing the recomputed
#: block's peak) and c_j a per-block amount that grows neither with the tokens nor with the batch (negative: parts
#: the estimate counts apart, the optimizer's workspace and some LoRA gradients, are not alive at the backward pass's
#: peak).
#: Keyed by (family, gradient checkpointing): (a, p, c); bf16 / fp16 compute (fp32 is counted twice as wide). Fitted
#: by least squares on the relative error from tracked steps at reduced depth (full width) and 256-512 px (the points
#: are in bench/RESULTS.md, "VRAM estimate for Flux.1 and SD 3.5 (issue 29)"); checked there at full size.
# >>> fitted by bench/transformer_vram.py --write
TRANSFORMER_ACTIVATION_FIT: dict[tuple[str, bool], tuple[tuple[float, ...], float, tuple[float, ...]]] = {
    ('chroma', False): ((121204.2, 104020.2), 82133.5, (-5487013.8, -2067570.2)),
    ('chroma', True): ((6043.3, 6113.6), 192347.8, (-7603977.3, -2896538.9)),
    ('flux1', False): ((122153.5, 104389.6), 85255.5, (-6552026.3, -2452760.6)),
    ('flux1', True): ((6041.1, 6113.2), 192551.4, (-7749957.3, -2914710.3)),
    ('qwenimage', False): ((130606.3,), 81455.8, (-3968705.2,)),
    ('qwenimage', True): ((5280.1,), 216635.3, (-6428215.7,)),
    ('sd35', False): ((116095.8,), 20322.0, (-13082749.7,)),
    ('sd35', True): ((6336.6,), 129392.0, (-5697145.6,)),
    ('zimage', False): ((126771.8, 126771.8, 261624.7), 63385.9, (-4825170.1, -4825170.1, -4880078.5)),
    ('zimage', True): ((75460.6, 75460.6, 7680.0), 37730.3, (-4585004.1, -4585004.1, -4910599.2)),
}
# <<< fitted

CUDA_CONTEXT_BYTES = 500 * MiB  # CUDA context + cuBLAS workspace: not in max_memory_allocated

ALLOCATOR_SLACK_FRACTION = 0.10  # reserved but unused memory of the caching allocator (of activations)

ALLOCATOR_SLACK_BYTES = 64 * MiB

SYSTEM_RAM_BASELINE = int(1.5 * GiB)  # Python, torch, diffusers and the GUI before any weights


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


def _bytes(dtype: str) -> int:
    """Bytes per parameter of a plain dtype (the quantised formats' sizes are in :mod:`.quantised`)."""
    return {"fp32": 4, "fp8": 1, "int8": 1}.get(dtype, 2)


def _frozen_bytes(spec: ModelSpec, part: int, params: int, stored: str, compute: str) -> int:
    """Bytes of ``params`` frozen parameters of part ``part`` (0 the denoiser, then the text encoders) stored in
    ``stored``: under fp8 the share the family's fp8 storage leaves in the compute dtype (``spec.fp8_stored``: norms,
    embeddings, the skipped layers) is counted in it; without that table every parameter is counted in fp8."""
    if stored != "fp8" or part >= len(spec.fp8_stored):
        return allocated(params * _bytes(stored))
    total = spec.denoiser if part == 0 else spec.text_encoders[part - 1]
    in_fp8 = min(params, round(spec.fp8_stored[part] * params / total)) if total else params  # offload: pro rata
    return allocated(in_fp8 * _bytes("fp8") + (params - in_fp8) * _bytes(compute))


def sdxl_vae_dtype(family: str, training: str, fp16_safe: bool = False) -> str:
    """The VAE's precision as the trainer runs it on a GPU: SDXL's own VAE overflows in fp16, so it stays fp32
    there, unless the configured VAE is fp16-safe by its config (``force_upcast`` false, as the fp16-fixed one)."""
    upcasts = facts(family).precision.vae_upcast
    return "fp32" if (upcasts and training == "fp16" and not fp16_safe) else training


def sdxl_vae_fp32_cost(config: TrainingConfig, spec: ModelSpec | None = None) -> int:
    """Bytes the fp32 SDXL VAE adds to the peak against an fp16 one (the fp16-fixed VAE), for ``config``.

    With cached latents the VAE only encodes before training, so the cost is to the caching pass's peak;
    it is measured here the same way, with the latents not cached. 0 when the configured VAE is fp16-safe.
    """
    if spec is None:
        spec = spec_for(config)
    if not facts(spec.family).precision.vae_upcast or config.precision.training != "fp16":
        return 0
    uncached = config.copy()
    uncached.precision.cache_latents = False
    return estimate(uncached, spec).total - estimate(uncached, spec, vae_dtype="fp16").total


def _vae_fp16_safe(family: str, config: TrainingConfig) -> bool:
    """Whether the configured VAE runs in fp16 (read from its config.json only where it matters: SDXL, fp16)."""
    return facts(family).precision.vae_upcast and config.precision.training == "fp16" and vae_fp16_safe(config)


def _transformer_activation_bytes(spec: ModelSpec, config: TrainingConfig) -> int:
    """:data:`TRANSFORMER_ACTIVATION_FIT` for ``config`` (0 for a family without a fit)."""
    p = config.precision
    fit = TRANSFORMER_ACTIVATION_FIT.get((spec.family, bool(p.gradient_checkpointing)))
    if fit is None:
        return 0
    per_block, rest, fixed = fit
    fam = facts(spec.family)
    res = config.dataset.resolution
    tokens = fam.image_tokens(res, res) + fam.text_tokens
    per_token = sum(a * count for a, (count, _, _) in zip(per_block, spec.blocks)) + rest
    per_block_fixed = sum(c * count for c, (count, _, _) in zip(fixed, spec.blocks))  # once per step, not per sample
    width = 2.0 if p.training == "fp32" else 1.0
    return int(max(config.schedule.batch_size * tokens * per_token + per_block_fixed, 0.0) * width)


def _activation_bytes(spec: ModelSpec, config: TrainingConfig) -> int:
    if spec.blocks:
        return _transformer_activation_bytes(spec, config)
    p, net = config.precision, config.network
    px = (config.dataset.resolution // 8) ** 2
    key = (spec.family, "fp32" if p.training == "fp32" else "half", bool(p.gradient_checkpointing))
    a, k, c = ACTIVATION_FIT.get(key, (0.0, 0.0, 0.0))
    tokens = sum(cnt * frac for _, _, cnt, frac in spec.denoiser_lora[net.target_modules])
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


#: DoRA's measured extra activations (bench/vram_variants.py, SD 1.5 rank 16 fp16 512 px, with and without
#: checkpointing: +122 / +258 MiB over LoCon) solved for these two constants: half of the adapted layers'
#: inputs stay saved a second time as scaled inputs, and 1.5 fp32 copies of the largest weight are held
DORA_INPUT_SHARE = 0.5

DORA_TRANSIENT_WEIGHTS = 1.5


def extra_activation_bytes(spec: ModelSpec, config: TrainingConfig) -> int:
    """Activations plain LoRA does not have, saved for the backward pass.

    Conv adapters save their ``[batch, rank, H, W]`` middle (LoCon, DoRA); DoRA saves each adapted layer's
    scaled input (``x * magnitude / norm``): :data:`DORA_INPUT_SHARE` of the inputs' size stays alive at the
    peak (the row layout scales the output instead: the same share of the outputs' size, not measured apart), plus :data:`DORA_TRANSIENT_WEIGHTS` fp32 copies of the largest layer's weight while it takes the norm.
    With gradient checkpointing only the recomputed block's share stays alive: the same fraction the plain-LoRA
    fit finds between checkpointing and not. LoHa / LoKr rebuild each adapted weight in the forward pass
    (in the compute dtype) and keep it for the backward pass: the adapted layers' weights once more, with the
    same checkpointing share.
    """
    net, p = config.network, config.precision
    if net.type == "lora":
        return 0
    px = (config.dataset.resolution // 8) ** 2
    width = 2 if p.training != "fp32" else 4
    per_sample = 0.0
    if net.type in ("locon", "dora"):
        per_sample += sum(c * f * px * net.conv_rank for _, _, k, c, f in conv_table(spec.family) if k > 1)
    transient = 0.0
    if net.type == "dora":
        row = net.dora_layout == "row"  # the row layout scales each layer's output, the column layout its input
        layers = [(o if row else i, c, f) for i, o, c, f in spec.denoiser_lora[net.target_modules]]
        layers += [(o if row else cin, c, f) for cin, o, _, c, f in conv_table(spec.family)]
        per_sample += DORA_INPUT_SHARE * sum(c * f * px * i for i, c, f in layers)
        transient = DORA_TRANSIENT_WEIGHTS * 4 * max(cin * o * k * k for cin, o, k, _, _ in (conv_table(spec.family) or ((0, 0, 0, 0, 0.0),)))
    if net.type in ("loha", "lokr"):
        rebuilt = sum(i * o * c for i, o, c, _ in spec.denoiser_lora[net.target_modules])
        rebuilt += sum(cin * o * k * k * c for cin, o, k, c, _ in conv_table(spec.family))
        per_weight = rebuilt * width
    else:
        per_weight = 0
    share = 1.0
    if p.gradient_checkpointing:
        group = "fp32" if p.training == "fp32" else "half"
        plain = ACTIVATION_FIT.get((spec.family, group, False), (1.0, 0.0, 0.0))[0]
        ckpt = ACTIVATION_FIT.get((spec.family, group, True), (1.0, 0.0, 0.0))[0]
        share = ckpt / plain if plain else 1.0
    return int((config.schedule.batch_size * per_sample * width + per_weight) * share + transient)


def estimate(
    config: TrainingConfig, spec: ModelSpec | None = None, device: Device = None, *, vae_dtype: str | None = None
) -> VramBreakdown:
    """Estimated peak GPU memory of training ``config`` (a TrainingConfig), as named parts.

    ``precision.base_weights = "fp8"`` stores the frozen UNet and text encoders in 1 byte per parameter (the
    VAE stays in the training precision; a transformer's table says which parameters its family keeps in the compute
    dtype, ``ModelSpec.fp8_stored``); ``"int8"`` / ``"nf4"`` store the denoiser's quantisable Linear weights
    in about 1 / 0.52 byte (:mod:`.quantised`), the rest of it and the text encoders in the training precision;
    ``precision.lora_weights = "bf16"`` keeps the LoRA weights, their gradients and AdamW's two states in 2 bytes
    each.

    The CUDA context and the caching allocator's slack are parts only on a CUDA (or ROCm) device
    (:data:`GPU_RUNTIME_KINDS`): a CPU run has neither (they were 73 % of a demo run's bar there). While the device
    is not known (``device`` None, the first seconds of a start) they are left out, not guessed: the bar then shows
    what every device needs, and grows by them when the probe finds a CUDA GPU, rather than showing a 500 MB "CUDA
    context" on a machine that may have none.

    Args:
        config: the training settings.
        spec: the base model's spec; by default the table entry of ``config.model.family``.
        device: a probed DeviceInfo, or anything with ``total_memory`` (bytes: a CUDA GPU); None = unknown.
        vae_dtype: the VAE's precision, when not the one the trainer picks (SDXL's VAE stays fp32 under fp16).
    """
    notes: list[str] = []
    if spec is None:
        family = resolve_family(str(config.model.family), str(config.model.base))
        if config.model.family == "auto" and detected_family(str(config.model.base)) is None:
            notes.append(f"model family not known yet: estimated as {family_label(family)}")
        spec = spec_for(config)
    p, net, opt = config.precision, config.network, config.optimizer
    wdt = p.training
    quant = p.base_weights in quantised.FORMATS
    base_dt = p.base_weights if p.base_weights == "fp8" or quant else wdt
    te_dt = "fp8" if p.base_weights == "fp8" else wdt  # int8 / nf4 quantise the denoiser only
    w = _bytes(wdt if quant else base_dt)  # per parameter: where quantised, of what stays in the compute dtype
    vae_dt = vae_dtype or sdxl_vae_dtype(spec.family, wdt, _vae_fp16_safe(spec.family, config))
    te_offloaded = p.cache_text_encoder_outputs and not net.train_text_encoder
    off, off_note = offload_plan(config, spec, device)
    if off_note:
        notes.append(off_note)
    resident = spec.denoiser - off.offloaded
    gpu_runtime = device_kind(device) in GPU_RUNTIME_KINDS
    buffers = allocated(spec.denoiser_buffers * _bytes(wdt))  # never stored in fp8 (SD 3's position grid)
    parts: list[VramPart] = [
        _quantised_denoiser(spec, p.base_weights, wdt) if quant else
        VramPart("unet", f"{denoiser_label(spec)} weights ({base_dt})", _frozen_bytes(spec, 0, resident, base_dt, wdt) + buffers,
                 f"{resident / 1e6:.0f} M frozen parameters"
                 + (f", stored in fp8 and widened to {wdt} one layer at a time" if base_dt == "fp8" else "")
                 + (f", and {spec.denoiser_buffers / 1e6:.0f} M buffer values in {wdt}" if buffers else "")
                 + (f"; {off.offloaded / 1e6:.0f} M more in {off.blocks} blocks kept in system RAM." if off.active else ".")),
    ]
    if gpu_runtime:
        parts.insert(0, VramPart("cuda_context", "CUDA context", CUDA_CONTEXT_BYTES,
                                 "CUDA runtime, kernels and cuBLAS workspace.", False))
    if off.active:
        parts.append(VramPart(
            "offload_stream", "Blocks streamed from RAM", allocated(off.in_flight * w),
            f"{offload.BLOCKS_IN_FLIGHT} of the {off.blocks} blocks kept in system RAM are on the GPU at once: the one "
            "computing and the next, copied in meanwhile."))
    if te_offloaded:
        parts.append(VramPart("text_encoders", "Text encoder(s): offloaded", 0, "Embeddings are cached; the encoders leave the GPU."))
    else:
        n_te = sum(spec.text_encoders)
        te_bytes = sum(_frozen_bytes(spec, i + 1, n, te_dt, wdt) for i, n in enumerate(spec.text_encoders))
        parts.append(
            VramPart("text_encoders", f"Text encoder(s) ({te_dt})", te_bytes, f"{n_te / 1e6:.0f} M parameters.")
        )
    vae_w = _bytes(vae_dt)
    if p.cache_latents:
        parts.append(VramPart("vae", "VAE: offloaded", 0, "Latents are cached; the VAE leaves the GPU."))
    else:
        parts.append(
            VramPart("vae", f"VAE ({vae_dt})", allocated(spec.vae * vae_w), f"{spec.vae / 1e6:.0f} M parameters; encodes every step.")
        )
    widened = [_fp8_widening(spec, config, wdt)] if base_dt == "fp8" else []
    if quant:
        widened = [_dequantised_layer(spec, p.base_weights, wdt)]
    parts += widened
    lora_parts, lora = _lora_parts(spec, config)
    parts += lora_parts
    act = _activation_bytes(spec, config) + _text_encoder_activation_bytes(spec, config)
    act += extra_activation_bytes(spec, config)
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
    if gpu_runtime:
        slack = int(ALLOCATOR_SLACK_FRACTION * act) + ALLOCATOR_SLACK_BYTES
        parts.append(VramPart("slack", "Allocator slack", slack, "Memory the caching allocator reserves but cannot use.", False))
    total_memory = getattr(device, "total_memory", None) if device is not None else None
    return VramBreakdown(tuple(parts), spec.family, int(total_memory) if total_memory else None, tuple(notes))

#: the share of the UNet's weights, widened from fp8 to the compute dtype, alive at the peak: with gradient
#: checkpointing a recomputed block's, kept for its backward; without it every layer's (fp8 then saves nothing).
#: Tracked fp16 steps, bench/RESULTS.md: SD 1.5 0.148-0.149, SDXL 0.128-0.198 with checkpointing; 0.87-0.96 without.
#: A transformer (``spec.blocks``) is counted by its blocks instead: the largest block's weights with checkpointing,
#: every block's without; the adaLN modulation Linears, fed one vector per image that needs no gradient, never keep
#: theirs (bench/RESULTS.md, issue 29)
FP8_WIDENED_SHARE = {True: 0.15, False: 0.9}


def _fp8_widening(spec: ModelSpec, config: TrainingConfig, compute: str) -> VramPart:
    ckpt = bool(config.precision.gradient_checkpointing)
    tip = f"fp8 weights widened to {compute} as layers compute; " + (
        "a recomputed block's are kept for its backward pass." if ckpt else "without gradient checkpointing every "
        "layer's widened copy is kept for the backward pass, so fp8 storage saves nothing: turn checkpointing on.")
    if spec.blocks:  # a transformer: one block recomputed at a time, or every block's copy kept (not the modulation's)
        widened = max(p - m for _, p, m in spec.blocks) if ckpt else sum(n * (p - m) for n, p, m in spec.blocks)
    else:
        widened = FP8_WIDENED_SHARE[ckpt] * spec.denoiser
    size = int(widened * _bytes(compute))
    return VramPart("fp8_widening", f"Widened fp8 weights ({compute})", size, tip)


def _quantised_denoiser(spec: ModelSpec, fmt: str, compute: str) -> VramPart:
    """The denoiser's part under int8 / nf4: the quantised Linear weights with their scales, and the rest of it
    (their biases, the kept layers, convs, norms) in the compute dtype."""
    q = quantised.quantisable(spec)
    stored, rest = quantised.denoiser_bytes(spec, fmt, _bytes(compute))
    how = ("8 bits with an fp32 scale per row" if fmt == "int8" else
           "4-bit NF4, an 8-bit absmax per 64 weights (double quantisation)")
    tip = (f"{q.weights / 1e6:.0f} M weights of {q.layers} Linear layers in {how}: {stored / max(q.weights, 1):.3f} "
           f"byte each; the other {(spec.denoiser - q.weights) / 1e6:.0f} M parameters (embedders, final layers, "
           f"convs, norms, biases) in {compute}.")
    if spec.quantisable is None:
        tip += " This model's quantisable layers are not counted: estimated as if every weight were."
    return VramPart("unet", f"{denoiser_label(spec)} weights ({fmt})", allocated(stored) + allocated(rest), tip)


def denoiser_label(spec: ModelSpec) -> str:
    """What the user calls the spec's denoiser: "UNet" (SD 1.5, SDXL, the demo) or "Transformer" (Flux.1, SD 3.5)."""
    try:
        return "Transformer" if facts(spec.family).architecture == "transformer" else "UNet"
    except KeyError:  # a spec of a family no longer registered: the older word
        return "UNet"


def _dequantised_layer(spec: ModelSpec, fmt: str, compute: str) -> VramPart:
    """One layer's weight dequantised to the compute dtype while it computes (forward and backward alike):
    bitsandbytes keeps no dequantised copy for the backward pass, so one layer's is alive at a time."""
    q = quantised.quantisable(spec)
    return VramPart("dequantised_layer", f"Dequantised layer ({compute})", allocated(q.largest * _bytes(compute)),
                    f"The largest {fmt} layer's weight widened to {compute} for its matmul; one layer at a time.")


def _lora_parts(spec: ModelSpec, config: TrainingConfig) -> tuple[list[VramPart], int]:
    """The trainable network's weights, gradients and optimizer state; also the weights' bytes alone."""
    p, net, opt = config.precision, config.network, config.optimizer
    shapes = trainable_shapes(spec, net)
    lora_dt = p.lora_weights
    lw = _bytes(lora_dt)
    lora = sum(c * allocated(lw * r * k) for r, k, c in shapes)
    n_lora = sum(c * r * k for r, k, c in shapes)
    state = sum(tensor_state_bytes(opt.name, (r, k), c, lw) for r, k, c in shapes)
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


def offload_plan(config: TrainingConfig, spec: ModelSpec, device: Device = None) -> tuple[offload.OffloadPlan, str]:
    """What ``precision.offload_blocks`` moves off the GPU for ``config`` (nothing where the run offloads nothing),
    and a note when the share is set but not counted: without gradient checkpointing (the run is refused), on an
    Apple GPU (one memory), or for a family without a block table."""
    share = float(config.precision.offload_blocks)
    if share <= 0:
        return offload.OffloadPlan(), ""
    if not config.precision.gradient_checkpointing:
        return offload.OffloadPlan(), "blocks in system RAM need gradient checkpointing: not counted"
    if getattr(device, "kind", "") == "mps":
        return offload.OffloadPlan(), "blocks in system RAM save nothing on an Apple GPU: not counted"
    if not spec.offload_blocks:
        return offload.OffloadPlan(), f"no block table for {family_label(spec.family)}: blocks in system RAM not counted"
    return offload.plan(spec.offload_blocks, share), ""


def load_widths(config: TrainingConfig, spec: ModelSpec, on_cpu: bool = False) -> tuple[int, int, int]:
    """Bytes per parameter the base model's parts are built in (denoiser, VAE, text encoders): the dtype the run
    places them in (``engine/models/loading.py`` ``load_dtypes``), the compute dtype's; the VAE fp32 under fp16 where
    the run may keep it there (a family whose VAE upcasts, decided by its config after the load; any VAE on a CPU)."""
    training = config.precision.training
    width = _bytes(training)
    vae = 4 if training == "fp16" and (on_cpu or facts(spec.family).precision.vae_upcast) else width
    return width, vae, width


def peak_system_ram_loading(config: TrainingConfig, spec: ModelSpec | None = None, *, on_cpu: bool = False) -> int:
    """Peak system RAM while loading the base model (bytes), with the app's baseline (:data:`SYSTEM_RAM_BASELINE`).

    Each part is built on the CPU in the dtype the run places it in (:func:`load_widths`: bf16 / fp16 2 bytes per
    parameter, fp32 4; nothing is made in fp32 first), in the order the families load them: the denoiser, then the
    VAE, then the text encoders. While a part loads, its file's pages (fp16, memory-mapped: 2 bytes per parameter)
    are mapped beside the copies of it and of every part before it, so the peak is the largest of
    ``w × (the parts so far) + 2 × (the one loading)`` — for the UNets at the UNet: 6 bytes per UNet parameter in
    fp32 (measured by bench/ram_budget.py: SD 1.5 from fp16 files, the file's pages and the fp32 UNet at the same
    moment), 4 in bf16. A single-file checkpoint (or split files) is read whole first: what that holds comes from
    the files' headers (:func:`~guitrainer.core.memory.load_files.read_whole_bytes`: a tensor already in the
    training dtype is not copied, its pages are its weight); without readable headers every part's fp16 pages stay
    mapped beside its copy until the load ends: ``w × (every part) + 2 × (every part)``. A diffusers folder on disk
    is counted from its files' headers the same way, part by part
    (:func:`~guitrainer.core.memory.load_files.folder_bytes`); the formula above is for a hub id, the demo, or a
    folder whose headers cannot be read. ``on_cpu``: the run trains on the CPU (an fp16 run keeps its VAE in fp32
    there).
    """
    if spec is None:
        spec = spec_for(config)
    w_denoiser, w_vae, w_text = load_widths(config, spec, on_cpu)
    parts = ((spec.denoiser, w_denoiser), (spec.vae, w_vae), *((t, w_text) for t in spec.text_encoders))
    whole = load_files.files_read_whole(config)
    if whole:
        found = load_files.read_whole_bytes(whole, config.precision.training)
        return SYSTEM_RAM_BASELINE + (found if found is not None else sum((width + 2) * part for part, width in parts))
    folder = load_files.folder_parts(config)
    found = load_files.folder_bytes(folder, config.precision.training) if folder else None
    if found is not None:
        return SYSTEM_RAM_BASELINE + found
    loaded = peak = 0
    for part, width in parts:
        loaded += width * part
        peak = max(peak, loaded + 2 * part)
    return SYSTEM_RAM_BASELINE + peak
