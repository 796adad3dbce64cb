"""Numerics monitor, the plain-data half: which steps are sampled, how modules group into blocks, what a
non-finite value and an fp16 save check found, and the words the log, the status and the advice use.

No torch here (the UI and the CLI read these types without loading it); the hooks that measure live in
:mod:`guitrainer.engine.numerics`.

Vocabulary:

* **headroom** of a block: the compute dtype's largest finite value divided by the largest absolute
  activation seen in that block on a sampled step. 1x means the limit is reached (fp16: 65,504); under 4x
  the chart draws the eye.
* **gradient underflow**: the share of the LoRA gradients' values that are zero or subnormal in fp16
  after loss scaling (below 2**-14, fp16's smallest normal number): precision lost before the update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from guitrainer.base.constants import FP16_MAX

#: fp16's smallest normal number: smaller magnitudes are subnormal (fewer bits) or zero
FP16_TINY = 2.0**-14
#: the largest finite value of each compute dtype (torch.finfo(...).max, written out: no torch here)
DTYPE_MAX = {"fp16": FP16_MAX, "bf16": 3.3895313892515355e38, "fp32": 3.4028234663852886e38}
DEFAULT_EVERY = 50
#: a block whose headroom falls under this draws the eye (the tab turns to the warning colour)
HEADROOM_WARN = 4.0
#: ... and so does a gradient underflow share over this
UNDERFLOW_WARN = 0.05

#: a transformer's repeated block lists (diffusers' attribute names) -> the name the Numerics tab shows
_TRANSFORMER_STACKS = {
    "transformer_blocks": "block", "single_transformer_blocks": "single", "layers": "block",
    "noise_refiner": "refiner", "context_refiner": "refiner",
}
_UNET_KINDS = {"attentions": "attn", "resnets": "res", "downsamplers": "res", "upsamplers": "res"}
KIND_TITLES = {"attn": "attention", "ff": "feed-forward", "res": "resnet", "io": "in/out"}


def is_sampled(step: int, every: int = DEFAULT_EVERY) -> bool:
    """Whether 1-based ``step`` is measured: the first step, then every ``every`` steps (0: never)."""
    return every > 0 and (step == 1 or step % every == 0)


def block_of(model: str, path: str) -> str:
    """The block a module belongs to: ``"<model>.<place>.<kind>"``.

    UNet (diffusers names): place ``down.<i>`` / ``mid`` / ``up.<i>``, kind ``attn`` (the transformer:
    self- and cross-attention, norms, projections), ``ff`` (its feed-forward), ``res`` (resnets, down- and
    upsamplers), and ``<model>.io`` for the rest (conv_in, time embedding, conv_out). Text encoders (CLIP)
    and anything else: ``<model>.attn`` (``self_attn``), ``<model>.ff`` (``mlp``), else ``<model>.io``, all
    layers together (SDXL's second encoder alone has 32 layers: one line each would hide everything).

    Transformers (diffusers names): place ``block.<i>`` per repeated block (``transformer_blocks``: Flux's
    double-stream blocks, SD 3.5's joint blocks; ``layers``) and ``single.<i>`` for Flux's single-stream blocks,
    kind ``ff`` (its feed-forward) or ``attn`` (the rest of the block), and ``<model>.io`` outside the blocks
    (embedders, the final layer).

    >>> block_of("unet", "up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v")
    'unet.up.1.attn'
    >>> block_of("transformer", "single_transformer_blocks.3.proj_mlp")
    'transformer.single.3.ff'
    """
    parts = path.split(".")
    if model == "transformer" and len(parts) > 1 and parts[0] in _TRANSFORMER_STACKS and parts[1].isdigit():
        kind = "ff" if any(p in ("ff", "ff_context", "mlp", "proj_mlp", "feed_forward") for p in parts[2:]) else "attn"
        return f"{model}.{_TRANSFORMER_STACKS[parts[0]]}.{parts[1]}.{kind}"
    if model == "unet" and parts[0] in ("down_blocks", "up_blocks", "mid_block"):
        if parts[0] == "mid_block":
            place, rest = "mid", parts[1:]
        elif len(parts) > 1:
            place, rest = f"{parts[0][:-7]}.{parts[1]}", parts[2:]
        else:
            return f"{model}.io"
        kind = "ff" if "ff" in rest else _UNET_KINDS.get(rest[0], "res") if rest else "res"
        return f"{model}.{place}.{kind}"
    if "mlp" in parts or "ff" in parts:
        return f"{model}.ff"
    if "self_attn" in parts or "attn" in parts:
        return f"{model}.attn"
    return f"{model}.io"


def block_title(key: str) -> str:
    """``"unet.up.1.attn"`` -> ``"unet up 1 attention"`` (chart legends, tooltips)."""
    *where, kind = key.split(".")
    return " ".join([*where, KIND_TITLES.get(kind, kind)]).replace(".", " ")


def format_value(x: float) -> str:
    """7.1e4, 7,900, 0.5, 3.2e-8, inf, nan: short enough for a log line, exact enough to compare with a limit."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if 1e-2 <= abs(x) < 1e3:
        return f"{x:.3g}"
    if 1e3 <= abs(x) < 1e4:
        return f"{x:,.0f}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def format_limit(precision: str) -> str:
    """65,504 for fp16; 3.4e38 for bf16 / fp32."""
    limit = DTYPE_MAX[precision]
    return f"{limit:,.0f}" if limit < 1e6 else format_value(limit)


#: a headroom at least this large is no concern in any precision: a value would have to grow a millionfold to overflow
HEADROOM_NO_CONCERN = 1e6


def format_headroom(x: float) -> str:
    """A headroom as the Numerics tab shows it: "16×", "1,259×", "1.6e5×", never fp32's 38 digits."""
    if not math.isfinite(x):
        return f"{format_value(x)}×"
    if x < 10:
        return f"{x:.1f}×"
    if x < 1e5:
        return f"{x:,.0f}×"
    return f"{format_value(x)}×"


def headroom_readout(precision: str, latest: dict[str, float], underflow: float | None = None, skipped: int = 0) -> str:
    """The Numerics tab's line over its charts: the lowest headrooms (the blocks nearest the limit), the gradient
    underflow (%), the skipped steps; "" while nothing was sampled.

    In fp32 and bf16 (limit 3.4e38) a healthy run's headrooms are 30-odd digits long: it says "fp32: headroom not a
    concern (max 3.4e38)" instead, with the lowest one, unless a block came within :data:`HEADROOM_NO_CONCERN`."""
    parts = []
    finite = {b: h for b, h in latest.items() if math.isfinite(h)}
    if finite:
        low = sorted(finite, key=finite.__getitem__)[:3]
        if DTYPE_MAX.get(precision, FP16_MAX) > 1e30 and finite[low[0]] >= HEADROOM_NO_CONCERN:
            parts.append(f"{precision}: headroom not a concern (max {format_limit(precision)}; lowest "
                         f"{format_headroom(finite[low[0]])}, {block_title(low[0])})")
        else:
            parts.append("lowest headroom " + ", ".join(f"{block_title(b)} {format_headroom(finite[b])}" for b in low))
    if underflow is not None:
        parts.append(f"gradient underflow {underflow:.2f} %")
    if skipped:
        parts.append(f"{skipped} skipped step{'s' if skipped != 1 else ''}")
    return " · ".join(parts)


@dataclass(frozen=True)
class NonFinite:
    """Where an inf or NaN was first seen in a step.

    Attributes:
        module: ``<model>.<module path>`` in forward order, e.g. ``unet.up_blocks.1....attn2.to_v``.
        kind: "inf" or "nan".
        where: "activation" (a module's output in the forward pass) or "gradient" (the gradient of a
            module's output, met first in the backward pass).
        precision: the compute dtype ("fp16", "bf16", "fp32").
        value: for an activation, its largest magnitude recomputed in fp32 (None when unknown, or when
            fp32 is non-finite too); for a gradient, None.
        inside: set when the module's inputs were already non-finite although every earlier module's
            output was finite: the value was born between modules, in this parent's own code (e.g. the
            attention scores of a softmax).
        scale: the GradScaler's loss scale of the step (gradients are scaled by it), when there is one.
    """

    module: str
    kind: str
    where: str
    precision: str
    value: float | None = None
    inside: str = ""
    scale: float | None = None

    @property
    def model(self) -> str:
        return self.module.split(".", 1)[0]

    def describe(self) -> str:
        """``inf first seen in unet.up_blocks.1.attentions.0....to_v (fp16 activation 7.1e4 > 65,504)``."""
        place = f"{self.inside} (in its own code, before {self.module})" if self.inside else self.module
        text = f"{self.kind} first seen in {place}"
        if self.where == "activation":
            if self.value is not None and math.isfinite(self.value):
                limit = DTYPE_MAX.get(self.precision, FP16_MAX)
                relation = ">" if self.value > limit else "<="
                text += f" ({self.precision} activation {format_value(self.value)} {relation} {format_limit(self.precision)})"
            else:
                text += f" ({self.precision} activation)"
        else:
            scaled = f", loss scale {self.scale:,.0f}" if self.scale else ""
            text += f" (gradient of its output{scaled})"
        return text


def skip_message(step: int, found: NonFinite | None, scale_after: float | None = None) -> str:
    """The log and status line of a skipped step: ``step 812 skipped: inf first seen in ...``."""
    if found is None:
        return f"step {step} skipped: inf/NaN gradients (no module's output or gradient was non-finite when replayed)"
    text = f"step {step} skipped: {found.describe()}"
    if found.where == "gradient" and found.scale and scale_after:
        text += f"; loss scale lowered to {scale_after:,.0f}"
    return text


def nan_advice(found: NonFinite | None, precision: str, base_weights: str = "auto") -> tuple[str, ...]:
    """What to do after a NaN stop (or a run of skipped steps), naming the module where it was born.

    ``base_weights``: ``precision.base_weights`` ("fp8" / "int8": the frozen weights are stored in 8 bits, "nf4":
    in 4)."""
    name = found.module if found is not None else "the model"
    advice: list[str] = []
    if found is not None and found.model == "vae":
        advice.append(
            f"the VAE overflowed ({name}): keep the VAE in fp32, or set an fp16-safe VAE as the model's VAE "
            "(Model & Precision page, VAE; SDXL's own VAE overflows in fp16; madebyollin/sdxl-vae-fp16-fix does not)"
        )
    if precision == "fp16":
        advice.append(
            "switch to bf16 AMP where your GPU supports it (NVIDIA RTX 30 / A100 and newer, AMD RDNA3, Apple M3 on): "
            f"it has fp32's range, so {name} would not overflow"
        )
    advice.append(f"lower the learning rate (e.g. by 10x): a fast-growing LoRA drives {name} out of range")
    advice.append("keep gradient clipping on (max grad norm 1.0)")
    if precision != "fp32":
        advice.append("train in fp32 once to tell a precision problem from a data or learning-rate one")
    if base_weights in ("fp8", "int8", "nf4"):
        bits = "4-bit" if base_weights == "nf4" else "8-bit"
        advice.append(
            f"store the frozen weights as in training (Base model weights: Same as training), not in {base_weights}: "
            f"{bits} weights add error in every layer, {name} included"
        )
    else:
        advice.append("use a base model file saved in fp16, bf16 or fp32, not an fp8 checkpoint")
    return tuple(advice)


# --------------------------------------------------------------------------- save precision report


@dataclass(frozen=True)
class TensorFinding:
    """What casting one tensor to the save precision does to it.

    Attributes:
        name: the key in the LoRA file.
        values: number of elements.
        peak: largest absolute value (before casting).
        over_max: values beyond ±65,504 (they become ±inf in fp16).
        to_zero: non-zero values that become 0.
        subnormal: values that land among fp16's subnormal numbers (|x| < 2**-14: fewer significant bits).
        nonzero: non-zero values before casting (the base of the shares).
    """

    name: str
    values: int
    peak: float
    over_max: int = 0
    to_zero: int = 0
    subnormal: int = 0
    nonzero: int = 0

    @property
    def zero_share(self) -> float:
        return self.to_zero / self.nonzero if self.nonzero else 0.0

    @property
    def harmed(self) -> bool:
        return bool(self.over_max or self.to_zero or self.subnormal)


@dataclass(frozen=True)
class SaveReport:
    """The fp16 save check of one written LoRA and the choice it made.

    Attributes:
        path: the file (or diffusers folder) written.
        requested: the save precision asked for.
        used: the precision written ("fp16" kept, or "bf16" / "fp32" after an overflow).
        tensors: findings for every floating tensor (empty when no check ran: bf16 and fp32 always fit).
        checked: whether the fp16 check ran.
    """

    path: str
    requested: str
    used: str
    tensors: tuple[TensorFinding, ...] = ()
    checked: bool = True
    step: int = 0

    @property
    def harmed(self) -> tuple[TensorFinding, ...]:
        return tuple(t for t in self.tensors if t.harmed)

    @property
    def over_max(self) -> int:
        return sum(t.over_max for t in self.tensors)

    @property
    def to_zero(self) -> int:
        return sum(t.to_zero for t in self.tensors)

    @property
    def subnormal(self) -> int:
        return sum(t.subnormal for t in self.tensors)

    @property
    def values(self) -> int:
        return sum(t.values for t in self.tensors)

    @property
    def peak(self) -> float:
        return max((t.peak for t in self.tensors), default=0.0)

    @property
    def choice(self) -> str:
        """In words: kept fp16, switched to bf16, kept fp16 despite the overflow, or bf16/fp32 (always fits)."""
        if not self.checked:
            return f"{self.used}: always fits (fp32's range)"
        if self.used != self.requested:
            return f"switched to {self.used}"
        if self.over_max:
            return f"kept {self.used} despite the overflow"
        return f"kept {self.used}"

    def headline(self) -> str:
        """One sentence with the numbers, for the Output page and the log."""
        if not self.checked:
            return f"Saved as {self.used}: nothing to check (bf16 and fp32 hold every fp32 value's range)."
        n = len(self.tensors)
        if self.over_max:
            over = sum(1 for t in self.tensors if t.over_max)
            text = (
                f"{self.over_max:,} values in {over} of {n} tensors exceed 65,504 (largest {format_value(self.peak)}): "
                f"{self.choice}."
            )
        else:
            text = f"Every value fits in fp16 (largest {format_value(self.peak)} of 65,504): {self.choice}."
        lost = []
        for count, what in ((self.to_zero, "zero"), (self.subnormal, "subnormal")):
            if count:
                lost.append(f"{count:,} {'becomes' if count == 1 else 'become'} {what}")
        if lost:
            text += f" Of {self.values:,} values, " + " and ".join(lost) + "."
        return text


@dataclass(frozen=True)
class NumericsSnapshot:
    """One sampled step, as plain data (what goes into :class:`~guitrainer.core.events.StepMetrics`)."""

    step: int
    precision: str
    headroom: tuple[tuple[str, float], ...] = ()
    grad_underflow: float | None = None
    nonfinite: NonFinite | None = None

    @property
    def min_headroom(self) -> float | None:
        values = [h for _, h in self.headroom]
        return min(values) if values else None


def alarm(headroom: float | None, underflow: float | None) -> bool:
    """Whether the Numerics tab should draw the eye: headroom under 4x, or underflow over 5 %."""
    return (headroom is not None and headroom < HEADROOM_WARN) or (underflow is not None and underflow > UNDERFLOW_WARN)
