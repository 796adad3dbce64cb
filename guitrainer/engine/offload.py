"""Block offload to system RAM (``precision.offload_blocks``, DESIGN §5): the frozen weights of a share of the
denoiser's repeated blocks live in pinned CPU memory and are copied to the GPU just ahead of use, on a side
stream, overlapped with the blocks computing before them. The result equals the run without offload: the copies
are exact, and every use of a weight finds it on the GPU.

Which blocks: the model's family names its repeated blocks (:meth:`~guitrainer.engine.families.base.Family.offload_blocks`),
:func:`guitrainer.core.memory.offload.offloaded_indices` picks the share of each list, evenly spread.

What moves: only the frozen parameters of those blocks (the base weights, stored in fp8 or not). The LoRA's
parameters, their gradients and the optimizer's state stay on the GPU: they are small, and an optimizer must keep
updating the same tensors. Nothing is ever copied back: the RAM copy of a frozen weight is its only lasting copy.

When: a block comes to the GPU when it starts computing — in the forward pass, in its recomputation
(checkpointing) and when its backward pass begins — and the next offloaded block in that direction is copied at the
same time; it leaves again when it is done:

* forward: after its forward, but not after a recomputation inside the backward pass: when checkpointing recomputes
  a block to its end (its early stop off), the backward still reads the norms' weights (saved as the parameters
  themselves) afterwards. The last block stays: the backward pass starts with it.
* backward: when the next block's backward begins (autograd runs a block's backward only after every block that
  used its output, so the blocks after it are done), and at the end of the backward pass. Not at the end of the
  block's own backward, for which torch's module hooks have no reliable moment: a module's full backward hook
  fires as soon as its *input* gradients exist, which for a block whose inputs need none (Flux's first block) is
  before its own backward and recomputation ran, so the block came back and stayed (``tests/test_offload.py``);
  and those hooks wrap a block's outputs in views that a caller may not modify in place. The backward's start is
  a hook on each output tensor instead.
* never by writing into a buffer autograd may still read: each copy to the GPU is a fresh tensor, and an old one
  is freed only when nothing references it (a norm's saved weight reads the parameter itself, so it must be on the
  GPU again before that backward runs — which the schedule above guarantees).

Why gradient checkpointing is required: without it autograd keeps every block's weights for the backward pass, so
offloading them frees nothing (and costs the copies); the session refuses the combination
(:func:`guitrainer.engine.session.offload_choice`). With it, a block's weights are held only while it computes or
is recomputed.

Devices: CUDA (and ROCm, which torch drives through the same API) streams from pinned memory
(:class:`CudaTransport`). On a CPU the model is in system RAM already, and Apple GPUs share one memory with the
CPU: there offload has nothing to free and the session says so and trains without it. Tests put a
:class:`Transport` of their own in :data:`TRANSPORTS` (``tests/helpers/offload_poison.py`` emulates a device on
the CPU whose offloaded weights are NaN).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from guitrainer.core.memory.offload import offloaded_indices


class Transfer(Protocol):
    """Copies to the device under way (what :meth:`Transport.start` returns and :meth:`Transport.finish` takes)."""


class Transport(Protocol):
    """How a device holds offloaded weights and copies them in."""

    def stash(self, tensor: torch.Tensor) -> torch.Tensor:
        """The lasting RAM copy of a frozen weight (pinned, on CUDA); ``tensor`` may be freed afterwards."""
        ...

    def parked(self, host: torch.Tensor) -> torch.Tensor:
        """What the parameter holds while offloaded (the RAM copy itself: a use on the GPU fails loudly)."""
        ...

    def start(self, hosts: Sequence[torch.Tensor]) -> Transfer:
        """Begin copying ``hosts`` to the device, without waiting."""
        ...

    def finish(self, transfer: Transfer) -> list[torch.Tensor]:
        """The device copies of a started transfer, ready for the computation that comes next."""
        ...


@dataclass
class _CudaTransfer:
    copies: list[torch.Tensor]
    done: Any  # torch.cuda.Event


class CudaTransport:
    """Pinned RAM copies, copied in on a side stream; the compute stream waits for an event, not the CPU.

    Each copy is recorded on the compute stream (``record_stream``), so the allocator reuses its memory only after
    the kernels queued on it when it was freed have run.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def stash(self, tensor: torch.Tensor) -> torch.Tensor:
        host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=True)
        host.copy_(tensor)
        return host

    def parked(self, host: torch.Tensor) -> torch.Tensor:
        return host

    def start(self, hosts: Sequence[torch.Tensor]) -> _CudaTransfer:
        with torch.cuda.stream(self.stream):
            copies = [h.to(self.device, non_blocking=True) for h in hosts]
            done = torch.cuda.Event()
            done.record(self.stream)
        return _CudaTransfer(copies, done)

    def finish(self, transfer: Transfer) -> list[torch.Tensor]:
        assert isinstance(transfer, _CudaTransfer)
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(transfer.done)
        for t in transfer.copies:
            t.record_stream(compute)
        return transfer.copies


#: device type -> the transport that offloads on it; a device type not here has nothing to gain (CPU, MPS)
TRANSPORTS: dict[str, Callable[[torch.device], Transport]] = {"cuda": CudaTransport}


def transport_for(device: torch.device) -> Transport | None:
    """The transport for ``device``, or None where offload frees nothing."""
    make = TRANSPORTS.get(device.type)
    return make(device) if make is not None else None


# --------------------------------------------------------------------------- the blocks


@dataclass
class _Slot:
    """One frozen parameter of an offloaded block: where the module holds it, the parameter, its RAM copy."""

    module: nn.Module
    key: str
    param: nn.Parameter
    host: torch.Tensor | None = None


@dataclass(eq=False)
class _Block:
    module: nn.Module
    slots: list[_Slot]
    position: int = -1  # in the forward order, learned from the first forward pass
    resident: bool = False
    pending: Transfer | None = None

    @property
    def nbytes(self) -> int:
        return sum(s.param.numel() * s.param.element_size() for s in self.slots)


@dataclass
class OffloadStats:
    """What the offloader did, counted (tests and the log read it; no timings)."""

    onloads: int = 0  # blocks brought to the device
    prefetched: int = 0  # of them, copied ahead of need
    waited: int = 0  # of them, copied when already needed (nothing in flight)
    offloads: int = 0
    backward_passes: int = 0


def _in_backward() -> bool:
    """Whether autograd is running a backward pass now (a checkpointed block's recomputation runs inside one)."""
    return torch._C._current_graph_task_id() != -1


class BlockOffloader:
    """Keeps the frozen weights of ``blocks`` in RAM and brings each to the device around its use.

    ``blocks`` must be units that gradient checkpointing recomputes (the family names them). Install with
    :func:`offload`; :meth:`remove` puts every weight back on the device and the hooks away.
    """

    def __init__(self, blocks: Sequence[nn.Module], transport: Transport, device: torch.device) -> None:
        self.transport = transport
        self.device = device
        self.stats = OffloadStats()
        self._blocks: dict[nn.Module, _Block] = {}
        self._order: list[_Block] = []
        self._hooks: list[Any] = []
        self._backward_task: int | None = None  # the backward pass whose end is already queued
        self.kept_on_device = 0  # frozen tensors of other kinds (a quantised format's subclass) left resident
        shared = _shared_parameters(blocks)
        for module in blocks:
            slots = []
            for sub in module.modules():
                for key, p in sub._parameters.items():
                    if p is None or p.requires_grad:
                        continue
                    if id(p) in shared or type(p.data) is not torch.Tensor:  # tied, or a tensor subclass
                        self.kept_on_device += 1
                        continue
                    slots.append(_Slot(sub, key, p))
            self._blocks[module] = _Block(module, slots)

    # ------------------------------------------------------------------ set-up
    def install(self) -> None:
        """Stash every offloaded weight in RAM, free its device copy, and hook the blocks."""
        for block in self._blocks.values():
            for slot in block.slots:
                slot.host = self.transport.stash(slot.param.data)
                slot.param.data = self.transport.parked(slot.host)
            m = block.module
            self._hooks.append(m.register_forward_pre_hook(lambda mod, _args, b=block: self._forward_pre(b)))
            self._hooks.append(m.register_forward_hook(lambda mod, _args, out, b=block: self._forward_post(b, out)))

    def remove(self) -> None:
        """Every offloaded weight back on the device for good, the hooks removed."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        for block in self._blocks.values():
            self._ensure(block)
            block.resident = False  # nothing manages it any more
            for slot in block.slots:
                slot.host = None

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self._blocks)

    @property
    def offloaded_bytes(self) -> int:
        """Bytes of frozen weights that live in RAM."""
        return sum(b.nbytes for b in self._blocks.values())

    # ------------------------------------------------------------------ the hooks
    def _forward_pre(self, block: _Block) -> None:
        backward = _in_backward()
        if block.position < 0 and not backward:  # the first forward pass: learn the order
            block.position = len(self._order)
            self._order.append(block)
        nxt = self._neighbour(block, -1 if backward else +1)
        self._settle(keep=(block, nxt))
        self._ensure(block)
        self._prefetch(nxt)

    def _forward_post(self, block: _Block, output: Any) -> None:
        if _in_backward():
            return  # a recomputation inside the backward pass: the backward itself is still to come
        needs_backward = False
        if torch.is_grad_enabled():
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(lambda _grad, b=block: self._backward_pre(b))
                    needs_backward = True
        last = block.position == len(self._order) - 1 and self._order[-1] is block
        if not (needs_backward and last):  # the last block stays: the backward pass begins with it
            self._offload(block)

    def _backward_pre(self, block: _Block) -> None:
        task = torch._C._current_graph_task_id()
        if task != self._backward_task:
            self._backward_task = task
            self.stats.backward_passes += 1
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
        prev = self._neighbour(block, -1)
        self._settle(keep=(block, prev))
        self._ensure(block)
        self._prefetch(prev)

    def _backward_done(self) -> None:
        self._backward_task = None
        self._settle(keep=())

    # ------------------------------------------------------------------ moving
    def _neighbour(self, block: _Block, step: int) -> _Block | None:
        i = block.position + step
        return self._order[i] if block.position >= 0 and 0 <= i < len(self._order) else None

    def _settle(self, keep: Iterable[_Block | None]) -> None:
        """Offload every block on the device (or on its way) but ``keep``."""
        wanted = {id(b) for b in keep if b is not None}
        for b in self._blocks.values():
            if (b.resident or b.pending is not None) and id(b) not in wanted:
                self._offload(b)

    def _prefetch(self, block: _Block | None) -> None:
        if block is None or block.resident or block.pending is not None or not block.slots:
            return
        block.pending = self.transport.start([s.host for s in block.slots if s.host is not None])

    def _ensure(self, block: _Block) -> None:
        if block.resident or not block.slots or block.slots[0].host is None:
            return
        if block.pending is None:
            transfer = self.transport.start([s.host for s in block.slots if s.host is not None])
            self.stats.waited += 1
        else:
            transfer, block.pending = block.pending, None
            self.stats.prefetched += 1
        for slot, copy in zip(block.slots, self.transport.finish(transfer), strict=True):
            slot.param.data = copy
        block.resident = True
        self.stats.onloads += 1

    def _offload(self, block: _Block) -> None:
        block.pending = None
        if not block.resident:
            return
        for slot in block.slots:
            assert slot.host is not None
            slot.param.data = self.transport.parked(slot.host)
            if slot.module._parameters.get(slot.key) is not slot.param:
                # a copy derived from it took its place for a forward cut short by checkpointing's early stop
                # (fp8 storage's widened weight, engine/network/layer_casting.py): the layer rebuilds it next time
                slot.module._parameters[slot.key] = slot.param
        block.resident = False
        self.stats.offloads += 1


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a block's output (a tensor, or a tuple / list of them, as diffusers' blocks return)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _shared_parameters(blocks: Sequence[nn.Module]) -> set[int]:
    """Parameters held by more than one block: tied weights stay on the device."""
    owners: dict[int, int] = {}
    for i, module in enumerate(blocks):
        for p in {id(p) for p in module.parameters()}:
            owners[p] = -1 if p in owners and owners[p] != i else i
    return {p for p, owner in owners.items() if owner == -1}


# --------------------------------------------------------------------------- choosing and placing


def named_block_lists(denoiser: nn.Module, names: Iterable[str]) -> list[list[nn.Module]]:
    """The denoiser's top-level module lists (``nn.ModuleList``) called ``names``: those it has, in that order."""
    found = (getattr(denoiser, name, None) for name in names)
    return [list(blocks) for blocks in found if isinstance(blocks, nn.ModuleList) and len(blocks)]


def chosen_blocks(block_lists: Sequence[Sequence[nn.Module]], share: float) -> list[nn.Module]:
    """The blocks ``share`` offloads: :func:`~guitrainer.core.memory.offload.offloaded_indices` of each list."""
    return [blocks[i] for blocks in block_lists for i in offloaded_indices(len(blocks), share)]


def block_table(block_lists: Sequence[Sequence[nn.Module]]) -> tuple[tuple[int, ...], ...]:
    """The estimator's :data:`~guitrainer.core.memory.offload.BlockTable` of ``block_lists``: each block's
    parameter count (a family's spec computes it from a model on ``meta``)."""
    return tuple(tuple(sum(p.numel() for p in b.parameters()) for b in blocks) for blocks in block_lists)


def place(module: nn.Module, device: torch.device, dtype: torch.dtype, keep_in_ram: Iterable[nn.Module]) -> None:
    """``Module.to(device, dtype)`` except the parameters of ``keep_in_ram``, which are cast but stay in RAM: a model
    too large for the GPU never has to fit on it whole. Floating-point tensors take ``dtype``, as ``Module.to``."""
    ram = {id(p) for m in keep_in_ram for p in m.parameters()}
    for sub in module.modules():
        for p in sub._parameters.values():
            if p is not None:
                p.data = p.data.to("cpu" if id(p) in ram else device, dtype if p.is_floating_point() else None)
        for key, b in sub._buffers.items():
            if b is not None:
                sub._buffers[key] = b.to(device, dtype if b.is_floating_point() else None)


def offload(blocks: Sequence[nn.Module], device: torch.device, transport: Transport) -> BlockOffloader:
    """Install a :class:`BlockOffloader` on ``blocks`` (whose trainable parameters are moved to ``device``)."""
    for b in blocks:
        for p in b.parameters():
            if p.requires_grad and p.device != device:
                p.data = p.data.to(device)
    off = BlockOffloader(blocks, transport, device)
    off.install()
    return off
