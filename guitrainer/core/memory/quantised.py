"""The size of a denoiser whose Linear weights are stored in int8 or nf4 (bitsandbytes), part by part.

As :mod:`guitrainer.engine.network.quantised_storage` stores them (bitsandbytes 0.50's layouts, checked against
its tensors in ``tests/test_quantised_base.py``):

- **int8** (``Linear8bitLt``, LLM.int8()): 1 byte per weight, and one fp32 scale per output row (``SCB``).
- **nf4** (``Linear4bit``, NF4 with QLoRA's double quantisation): 0.5 byte per weight (two to a byte); one 8-bit
  absmax per block of 64 weights (1/64 byte per weight); one fp32 scale per 256 of those blocks (4/16384 byte per
  weight); per layer the 16-entry NF4 code, the 256-entry code of the 8-bit absmax and an offset (fp32):
  about 0.516 byte per weight in all. Without double quantisation the absmax would be fp32 (4/64 byte per weight,
  0.5625 in all).

Everything else of the denoiser stays in the compute dtype: the quantised layers' biases, the Linears the
family keeps (embedders, final layers), convs, norms. The text encoders are not quantised.
"""

from __future__ import annotations

import math

from guitrainer.core.families.facts import ModelSpec, QuantisableLinears

FORMATS = ("int8", "nf4")
NF4_BLOCK = 64  # weights per absmax (bitsandbytes' and QLoRA's default)
NF4_NESTED_BLOCK = 256  # absmax values per fp32 scale under double quantisation
#: per nf4 layer: the NF4 code (16 fp32), the absmax's 8-bit code (256 fp32) and the absmax offset (1 fp32)
NF4_LAYER_CONSTANTS = 4 * (16 + 256 + 1)


def quantised_bytes(q: QuantisableLinears, fmt: str) -> int:
    """Bytes of the quantised weight matrices ``q`` in ``fmt`` ("int8" or "nf4"), their scales included."""
    if fmt == "int8":
        return q.weights + 4 * q.rows
    if fmt == "nf4":
        blocks = math.ceil(q.weights / NF4_BLOCK)
        return math.ceil(q.weights / 2) + blocks + 4 * math.ceil(blocks / NF4_NESTED_BLOCK) + q.layers * NF4_LAYER_CONSTANTS
    raise ValueError(f"`precision.base_weights`: {fmt!r} is not a quantised format ({', '.join(FORMATS)})")


def quantisable(spec: ModelSpec) -> QuantisableLinears:
    """The spec's quantisable Linears; where a spec does not count them, every denoiser parameter (an upper bound
    of what quantisation saves, said in the estimate's tip)."""
    return spec.quantisable or QuantisableLinears(weights=spec.denoiser, rows=0, layers=0, largest=0)


def denoiser_bytes(spec: ModelSpec, fmt: str, compute_width: int) -> tuple[int, int]:
    """(bytes of the quantised Linear weights, bytes of the rest of the denoiser in the compute dtype)."""
    q = quantisable(spec)
    return quantised_bytes(q, fmt), (spec.denoiser - q.weights) * compute_width

