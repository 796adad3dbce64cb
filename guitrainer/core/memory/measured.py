"""A measured training step next to the estimate, in words: what the measurement counts that the estimate does
not (and the other way round), and where the two differ.

"Check precisely" (the VRAM meter) measures one step (:mod:`guitrainer.engine.memory`): on a GPU
``torch.cuda.max_memory_allocated``; elsewhere a simulated step whose every tensor is counted. Neither counts the
CUDA context or what the caching allocator keeps unused (the meter adds the estimate's figures for those, on a
CUDA GPU only), nor Python, torch and the app themselves. This module says so next to the two numbers, part by
part, so "586 MB measured against 0.1 GB estimated" is never left unexplained. No torch, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

from guitrainer.base.units import format_bytes
from guitrainer.core.memory.estimate import SYSTEM_RAM_BASELINE, VramBreakdown

#: parts of the estimate alive before the step begins (what the measurement calls ``static``)
STATIC_KEYS = ("unet", "text_encoders", "vae", "lora_weights", "optimizer")


@dataclass(frozen=True)
class Comparison:
    """The measured peak against the estimate.

    Attributes:
        estimated: the estimate's total (what the bar showed).
        measured: the measured peak plus ``added``.
        added: the estimate's CUDA context and allocator slack, added to the measured peak (a CUDA GPU only: the
            measurement does not see them).
        lines: the explanation, sentence by sentence.
    """

    estimated: int
    measured: int
    added: int
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.lines)

    @property
    def relative(self) -> str:
        """"12 % more than estimated", "3 % less than estimated", "as estimated"."""
        return _relative(self.measured, self.estimated)


def compare(breakdown: VramBreakdown, peak: int, static: int, method: str) -> Comparison:
    """``peak`` (and ``static``: live when the step began) of a step measured by ``method`` ("cuda": on the GPU;
    "fake" / "cpu": a simulated step counting every tensor) next to ``breakdown``, the estimate of the same config."""
    added = breakdown.total - breakdown.allocated  # context and slack: only where the estimate has them
    measured = peak + added
    estimated = breakdown.total
    est_static = sum(breakdown.get(k) for k in STATIC_KEYS)
    est_step = breakdown.allocated - est_static
    lines = [f"Estimated {format_bytes(estimated)}, measured {format_bytes(measured)}: {_relative(measured, estimated)}."]
    counted = "the GPU's allocations (max_memory_allocated)" if method == "cuda" else "every tensor of a simulated step"
    lines.append(
        f"The measurement counts {counted} at the step's peak: weights, LoRA and optimizer state "
        f"{format_bytes(static)} (estimated {format_bytes(est_static)}), activations, gradients and temporaries "
        f"{format_bytes(max(peak - static, 0))} (estimated {format_bytes(max(est_step, 0))})."
    )
    if added:
        lines.append(
            f"It cannot see the CUDA context and the allocator's slack: the estimate's {format_bytes(added)} for them "
            "is added."
        )
    else:
        lines.append("There is no CUDA context or allocator slack on this device, in either number.")
    lines.append(
        "Neither number holds Python, torch and the app themselves"
        + (f" (about {format_bytes(SYSTEM_RAM_BASELINE)} of system RAM)." if method != "cuda" else ".")
    )
    return Comparison(estimated, measured, added, tuple(lines))


def _relative(measured: int, estimated: int) -> str:
    """"12 % more than estimated", "3 % less", "as estimated"."""
    if estimated <= 0:
        return "nothing was estimated"
    change = measured / estimated - 1
    if abs(change) < 0.005:
        return "as estimated"
    return f"{abs(change):.0%} {'more' if change > 0 else 'less'} than estimated"
