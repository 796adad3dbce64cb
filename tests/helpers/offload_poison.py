"""A device on the CPU for proving block offload (:mod:`guitrainer.engine.offload`): NaN where a weight is away.

:class:`PoisonTransport` is a :class:`~guitrainer.engine.offload.Transport`: an offloaded parameter holds NaN (a
zero-stride view of one NaN, so it costs no memory), and every copy "to the device" is a fresh clone of the RAM
copy. Any use of a weight while it is offloaded makes the loss or the LoRA gradients NaN, so a run that comes out
bit-identical to the run without offload used every weight only while it was there. Every copy is counted through
a weak reference to its storage: :meth:`PoisonTransport.resident` is what would be on the GPU now (including copies
autograd still holds), :attr:`PoisonTransport.peak` the most at any copy.

Register it for the CPU with ``monkeypatch.setitem(offload.TRANSPORTS, "cpu", PoisonTransport)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch


class PoisonTransport:
    last: ClassVar[PoisonTransport | None] = None  # the newest one (a session makes its own): tests read it here

    def __init__(self, device: torch.device | None = None) -> None:
        self._live: list[tuple[int, int]] = []  # (weak reference to a copy's storage, its bytes)
        self.peak = 0
        self.copies = 0
        PoisonTransport.last = self

    def stash(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().clone()

    def parked(self, host: torch.Tensor) -> torch.Tensor:
        fill = float("nan") if host.is_floating_point() else 0
        return torch.full((), fill, dtype=host.dtype).expand(host.shape)

    def start(self, hosts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        copies = [h.clone() for h in hosts]
        for t in copies:
            self._live.append((t.untyped_storage()._weak_ref(), t.nbytes))
        self.copies += len(copies)
        self.peak = max(self.peak, self.resident())
        return copies

    def finish(self, transfer: object) -> list[torch.Tensor]:
        assert isinstance(transfer, list)
        return transfer

    def resident(self) -> int:
        """Bytes of the copies still alive."""
        alive = []
        for ref, n in self._live:
            if torch.UntypedStorage._expired(ref):
                torch.UntypedStorage._free_weak_ref(ref)
            else:
                alive.append((ref, n))
        self._live = alive
        return sum(n for _, n in alive)

