"""Block offload on paper (``precision.offload_blocks``): which of the denoiser's repeated blocks live in system RAM,
and what that moves between the GPU and the RAM estimate. The engine (:mod:`guitrainer.engine.offload`) and the
estimator both choose the blocks here, so the estimate names the blocks the run offloads.

A denoiser's repeated blocks come in lists (Flux: the double blocks, the single blocks; a UNet: its ResNets, its
transformer blocks), each block a unit that gradient checkpointing recomputes. Of each list the share
``offload_blocks`` is offloaded, **evenly spread** over it rather than the last blocks first (sd-scripts'
``--blocks_to_swap``): a block's copy to the GPU starts when the offloaded block before it starts computing, so
it hides behind every block between the two, resident ones included. At half the blocks that is two blocks of
compute per copy instead of one; with the last blocks offloaded, each copy has one block to hide behind, in the
forward and again in the backward pass. The bytes saved are the same either way for blocks of one size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: offloaded blocks on the GPU at once: the one computing and the one prefetched for the next (either direction)
BLOCKS_IN_FLIGHT = 2

#: a denoiser's repeated blocks: per list, each block's parameter count in the order the forward runs them
BlockTable = tuple[tuple[int, ...], ...]


def offloaded_indices(count: int, share: float) -> tuple[int, ...]:
    """Which of ``count`` blocks a share ``share`` (0–1) offloads: ``round(share × count)`` of them, evenly spread.

    Block ``j`` of the ``k`` chosen is the middle of the ``j``-th ``count / k`` stretch, so half of 4 blocks is
    blocks 1 and 3; ``k`` rounds half up (0.5 × 19 blocks offloads 10).

    >>> offloaded_indices(4, 0.5), offloaded_indices(5, 0.4), offloaded_indices(3, 1.0), offloaded_indices(8, 0.0)
    ((1, 3), (1, 3), (0, 1, 2), ())
    """
    if count <= 0 or not share > 0:
        return ()
    k = min(count, math.floor(min(share, 1.0) * count + 0.5))
    return tuple(math.floor((j + 0.5) * count / k) for j in range(k)) if k else ()


@dataclass(frozen=True)
class OffloadPlan:
    """What offloading a share of a :data:`BlockTable` moves, in parameters (the estimator multiplies by bytes).

    Attributes:
        offloaded: parameters of the offloaded blocks: they live in pinned system RAM.
        in_flight: parameters of the :data:`BLOCKS_IN_FLIGHT` largest offloaded blocks: at most that much of them
            is on the GPU at once (streamed in, computed, dropped).
        blocks: how many blocks are offloaded, of ``total_blocks``.
    """

    offloaded: int = 0
    in_flight: int = 0
    blocks: int = 0
    total_blocks: int = 0

    @property
    def active(self) -> bool:
        return self.blocks > 0


def plan(table: BlockTable, share: float) -> OffloadPlan:
    """The blocks :func:`offloaded_indices` picks from each list of ``table``, summed."""
    chosen = [sizes[i] for sizes in table for i in offloaded_indices(len(sizes), share)]
    largest = sorted(chosen, reverse=True)[:BLOCKS_IN_FLIGHT]
    return OffloadPlan(sum(chosen), sum(largest), len(chosen), sum(len(sizes) for sizes in table))


def offload_saves_memory(device_kind: str) -> bool:
    """Whether moving blocks to system RAM frees anything on ``device_kind``: not on a CPU (the model is in
    system RAM already) nor on Apple GPUs (``mps``: one memory shared by the CPU and the GPU)."""
    return device_kind not in ("cpu", "mps")
