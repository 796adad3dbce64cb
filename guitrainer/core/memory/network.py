"""The trainable network on paper: the shape of every tensor a LoRA, LoCon, LoHa, LoKr or DoRA network trains,
and the optimizer state each one keeps, in the caching allocator's blocks (no torch).

``tests/test_vram_variants.py`` counts the trainable parameters of real injected models against
:func:`trainable_shapes`; the optimizer-state rules were measured from real steps (see :func:`optimizer_state_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from guitrainer.config import NetworkConfig
from guitrainer.core.memory.specs import ModelSpec, conv_table, text_encoder_mlp_tables

CUDA_BLOCK = 512  # the caching allocator rounds allocations up to this

BNB_MIN_8BIT_SIZE = 4096  # bitsandbytes keeps fp32 state for tensors with fewer elements

BNB_BLOCKSIZE = 256  # blockwise quantisation: one fp32 absmax per block

Shape = tuple[int, int, int]  # (rows, cols, count): one trainable tensor kind, as :func:`lora_tensor_shapes`


def allocated(nbytes: float) -> int:
    """``nbytes`` rounded up to the caching allocator's block (:data:`CUDA_BLOCK`)."""
    return -(-int(nbytes) // CUDA_BLOCK) * CUDA_BLOCK


def lora_tensor_shapes(spec: ModelSpec, target: str, rank: int, text_encoder: bool) -> list[Shape]:
    """``(rows, cols, count)`` of every trainable tensor: lora_A [rank, in] and lora_B [out, rank]."""
    tables = [spec.denoiser_lora[target]]
    if text_encoder:
        tables += list(spec.text_encoder_lora[target])
    out: list[Shape] = []
    for table in tables:
        for i, o, c, _ in table:
            out.append((rank, i, c))
            out.append((o, rank, c))
    return out


def factorization(dimension: int, factor: int = -1) -> tuple[int, int]:
    """LyCORIS' split of ``dimension`` into ``m * n`` with ``m <= n``: ``factor`` if it divides, else the most
    balanced pair with ``m <= factor`` (LoKr's Kronecker factors)."""
    if factor > 0 and dimension % factor == 0:
        m, n = factor, dimension // factor
        return (m, n) if m <= n else (n, m)
    limit = dimension if factor == -1 else factor
    m, n = 1, dimension
    while m < n:
        new_m = m + 1
        while dimension % new_m:
            new_m += 1
        new_n = dimension // new_m
        if new_m + new_n > m + n or new_m > limit:
            break
        m, n = new_m, new_n
    return (m, n) if m <= n else (n, m)


def _layer_shapes(
    kind: str, cin: int, out: int, k: int, rank: int, factor: int, count: int, dora_layout: str = "column"
) -> list[Shape]:
    flat = cin * k * k
    if kind in ("lora", "locon", "dora"):
        shapes = [(rank, flat, count), (out, rank, count)]
        magnitude = (out, 1, count) if dora_layout == "row" else (1, cin, count)  # dora_scale [out, 1] or [1, in]
        return shapes + ([magnitude] if kind == "dora" else [])
    if kind == "loha":
        return [(out, rank, count), (rank, flat, count)] * 2
    # LoKr (peft / LyCORIS): w1 whole [out_l, in_m]; w2 whole or split at ``rank``
    in_m, in_n = factorization(cin, factor)
    out_l, out_k = factorization(out, factor)
    shapes = [(out_l, in_m, count)]
    if rank >= max(out_k, in_n) / 2:
        return shapes + [(out_k, in_n * k * k, count)]
    return shapes + [(out_k, rank, count), (rank, in_n * k * k, count)]


def variant_tensor_shapes(spec: ModelSpec, network: NetworkConfig) -> list[Shape]:
    """Every trainable tensor of ``network`` (a NetworkConfig whose ``type`` is not plain LoRA) on ``spec``."""
    kind, rank, factor = network.type, int(network.rank), int(network.lokr_factor)
    conv_rank, layout = int(network.conv_rank), network.dora_layout
    out: list[Shape] = []
    for i, o, c, _ in spec.denoiser_lora[network.target_modules]:
        out += _layer_shapes(kind, i, o, 1, rank, factor, c, layout)
    for cin, o, k, c, _ in conv_table(spec.family):
        out += _layer_shapes(kind, cin, o, k, conv_rank if k > 1 else rank, factor, c, layout)
    if network.train_text_encoder:
        tables = list(spec.text_encoder_lora[network.target_modules])
        tables += [tuple((i, o, c, 0.0) for i, o, c in t) for t in text_encoder_mlp_tables(spec.family)]
        for table in tables:
            for i, o, c, _ in table:
                out += _layer_shapes(kind, i, o, 1, rank, factor, c, layout)
    return out


def trainable_shapes(spec: ModelSpec, network: NetworkConfig) -> list[Shape]:
    """Every trainable tensor of ``network`` on ``spec``, whatever its type."""
    if network.type == "lora":
        return lora_tensor_shapes(spec, network.target_modules, network.rank, network.train_text_encoder)
    return variant_tensor_shapes(spec, network)


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
    return sum(tensor_state_bytes(name, tuple(s), 1) for s in shapes)


def tensor_state_bytes(name: str, shape: tuple[int, ...], count: int, param_bytes: int = 4) -> int:
    """One tensor's optimizer state. torch's AdamW keeps its states in the parameter's dtype (2 bytes for bf16
    LoRA weights); bitsandbytes and transformers' Adafactor keep fp32 statistics whatever the dtype."""
    n = math.prod(shape)
    if name == "AdamW":
        return count * 2 * allocated(param_bytes * n)
    if name in ("AdamW8bit", "PagedAdamW8bit", "Lion8bit"):
        states = 1 if name == "Lion8bit" else 2
        if n < BNB_MIN_8BIT_SIZE:
            return count * states * allocated(4 * n)
        blocks = -(-n // BNB_BLOCKSIZE)
        return count * states * (allocated(n) + allocated(4 * blocks))
    if name == "Adafactor":
        dims = [d for d in shape if d > 1]
        if len(dims) >= 2:
            return count * (allocated(4 * n // shape[-1]) + allocated(4 * n // shape[-2]))
        return count * allocated(4 * n)
    if name in FULL_STATES:
        return count * FULL_STATES[name] * allocated(4 * n)
    if name == "CAME":
        if len(shape) >= 2:
            rows, cols = n // shape[-1], n // shape[-2]
            return count * (allocated(4 * n) + 2 * allocated(4 * rows) + 2 * allocated(4 * cols) + allocated(4))
        return count * (2 * allocated(4 * n) + allocated(4))
    raise ValueError(f"unknown optimizer {name!r}")

#: fp32 tensors of the parameter's size each optimizer keeps (measured, see :func:`optimizer_state_bytes`)
FULL_STATES = {"Prodigy": 4, "DAdaptAdam": 3, "AdamWScheduleFree": 2}
