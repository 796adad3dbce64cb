"""Optimizer and learning-rate schedule from the config.

8-bit optimizers come from bitsandbytes; if it cannot be imported or the optimizer cannot be built,
training falls back to torch's AdamW with a warning instead of crashing.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

BNB_OPTIMIZERS = {"AdamW8bit": "AdamW8bit", "Lion8bit": "Lion8bit", "PagedAdamW8bit": "PagedAdamW8bit"}


def param_groups(
    unet_params: Sequence[torch.nn.Parameter], te_params: Sequence[torch.nn.Parameter], lr: float, te_lr: float
) -> list[dict[str, Any]]:
    """One group for the UNet's LoRA, one for the text encoders' (when trained)."""
    groups: list[dict[str, Any]] = [{"params": list(unet_params), "lr": lr, "name": "unet"}]
    if te_params:
        groups.append({"params": list(te_params), "lr": te_lr, "name": "text_encoder"})
    return groups


def _import_bnb() -> Any:
    return importlib.import_module("bitsandbytes")


def build_optimizer(
    opt_cfg: Any, groups: list[dict[str, Any]], warn: Callable[[str], None] | None = None
) -> tuple[torch.optim.Optimizer, str]:
    """Build ``opt_cfg.name`` over ``groups``; returns the optimizer and the name actually used."""
    name = opt_cfg.name
    betas = (float(opt_cfg.betas[0]), float(opt_cfg.betas[1]))
    wd = float(opt_cfg.weight_decay)
    lr = float(opt_cfg.lr)
    if name in BNB_OPTIMIZERS:
        try:
            bnb = _import_bnb()
            cls = getattr(bnb.optim, BNB_OPTIMIZERS[name])
            return cls(groups, lr=lr, betas=betas, weight_decay=wd), name
        except Exception as e:  # noqa: BLE001 - any bitsandbytes failure means "use the fallback"
            msg = f"{name} is not available ({type(e).__name__}: {e}); training with torch AdamW instead (more optimizer memory)"
            log.warning(msg)
            if warn:
                warn(msg)
            name = "AdamW"
    if name == "Adafactor":
        from transformers.optimization import Adafactor

        return (
            Adafactor(groups, lr=lr, relative_step=False, scale_parameter=False, warmup_init=False, weight_decay=wd),
            name,
        )
    if name != "AdamW":
        raise ValueError(f"unknown optimizer {name!r}")
    return torch.optim.AdamW(groups, lr=lr, betas=betas, weight_decay=wd), "AdamW"


def build_lr_scheduler(
    sched_cfg: Any, optimizer: torch.optim.Optimizer, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """diffusers' ``get_scheduler`` with the configured warm-up over ``total_steps`` optimizer steps."""
    from diffusers.optimization import get_scheduler

    return get_scheduler(
        sched_cfg.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=int(sched_cfg.warmup_steps),
        num_training_steps=max(1, int(total_steps)),
    )
