"""What the memory tracker's two steps share (:mod:`.measure` for the UNets, :mod:`.family_step` for the transformer
families): the measurement they return, the optimizer they build, the LoRA parameters they train, the warm-up's
optimizer state and the weights' bytes rounded as the CUDA allocator does."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from guitrainer.engine.memory.modes import CUDA_BLOCK

#: recipe optimizers that do step fake tensors: the tracked step runs them for real
FAKE_SAFE_RECIPES = ("AdamWScheduleFree", "CAME")


@dataclass
class MemoryMeasurement:
    """Peak memory of one training step (bytes). ``peak`` is comparable with ``torch.cuda.max_memory_allocated``."""

    peak: int
    static: int  # live at the start of the step: weights, LoRA, optimizer state
    frozen_weights: int
    lora_weights: int
    optimizer_state: int
    lora_parameter_count: int = 0  # trainable LoRA parameters (elements)
    reserved: int | None = None  # CUDA only: max_memory_reserved
    method: str = "fake"  # "fake" (tracked fake tensors) or "cuda"
    analytic_optimizer_state: bool = False  # 8-bit state from the estimator's formula (bitsandbytes unavailable)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    step_seconds: float | None = None  # CUDA, the transformer families: the mean of the timed steps

    @property
    def activations(self) -> int:
        """Peak minus what was live before the step: activations, gradients and temporaries."""
        return self.peak - self.static


class _HasOptimizer(Protocol):
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer


def make_optimizer(opt_cfg: Any, params: list[torch.nn.Parameter], real_8bit: bool) -> torch.optim.Optimizer:
    name = opt_cfg.name
    if name == "AdamW":
        return torch.optim.AdamW(params, lr=opt_cfg.lr, foreach=True)  # foreach is the default on CUDA
    if name == "Adafactor":
        return torch.optim.Adafactor(params, lr=opt_cfg.lr, foreach=False)
    if real_8bit or name in FAKE_SAFE_RECIPES:
        from guitrainer.engine.optim import build_optimizer

        return build_optimizer(opt_cfg, [{"params": params}])[0]
    return torch.optim.SGD(params, lr=opt_cfg.lr, foreach=True)  # stateless stand-in; state from bnb_state_bytes


def lora_parameters(modules: Iterable[torch.nn.Module | None]) -> list[torch.nn.Parameter]:
    """The trainable LoRA parameters of ``modules``, as the trainer collects them."""
    from guitrainer.engine.network import lora

    return [prm for m in modules if m is not None for prm in lora.lora_parameters(m)]


def init_optimizer_state(run: _HasOptimizer) -> None:
    """What the warm-up step leaves behind: the optimizer state exists, gradients are None."""
    for prm in run.params:
        prm.grad = torch.zeros_like(prm)
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)


def param_bytes(modules: list[torch.nn.Module | None], lora: bool, block: int = CUDA_BLOCK) -> int:
    total = 0
    for m in modules:
        if m is None:
            continue
        for n, prm in m.named_parameters():
            if any(k in n for k in ("lora_", "hada_", "lokr_")) == lora:
                total += -(-prm.numel() * prm.element_size() // block) * block
    return total
