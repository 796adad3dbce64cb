"""Optimizer and learning-rate schedule from the config.

8-bit optimizers come from bitsandbytes; if it cannot be imported or the optimizer cannot be built,
training falls back to torch's AdamW with a warning instead of crashing.

The recipes kohya users ask for come from their maintained packages, with sd-scripts' names: Prodigy
(``prodigyopt``) and DAdaptAdam (``dadaptation``) find their own step size, so their ``lr`` is a multiplier
(1.0); AdamWScheduleFree (``schedulefree``) replaces the LR schedule by averaging, so its schedule stays
constant and the warm-up is the optimizer's own; its parameters hold the training point ``y`` and the
weights to save, sample or validate are the average ``x`` (:func:`averaged_weights`). CAME
(``came_pytorch``) keeps Adafactor-like factored statistics with Adam-like steps.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

BNB_OPTIMIZERS = {"AdamW8bit": "AdamW8bit", "Lion8bit": "Lion8bit", "PagedAdamW8bit": "PagedAdamW8bit"}
#: optimizers that find their own step size (``lr`` multiplies it; 1.0 is their default)
LR_FREE = ("Prodigy", "DAdaptAdam")
#: optimizers that need no LR schedule (the schedule is constant; they warm up themselves)
SCHEDULE_FREE = ("AdamWScheduleFree",)


def param_groups(
    denoiser_params: Sequence[torch.nn.Parameter], te_params: Sequence[torch.nn.Parameter], lr: float, te_lr: float
) -> list[dict[str, Any]]:
    """One group for the UNet's LoRA, one for the text encoders' (when trained)."""
    groups: list[dict[str, Any]] = [{"params": list(denoiser_params), "lr": lr, "name": "unet"}]
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
    recipe = _build_recipe_optimizer(name, groups, lr, betas, wd)
    if recipe is not None:
        if name in LR_FREE and lr < 0.1:
            msg = f"{name} finds its own step size and multiplies it by the learning rate {lr:g}: use 1.0"
            if warn:
                warn(msg)
            else:
                log.warning(msg)
        return recipe, name
    if name == "Adafactor":
        from transformers.optimization import Adafactor

        return (
            Adafactor(groups, lr=lr, relative_step=False, scale_parameter=False, warmup_init=False, weight_decay=wd),
            name,
        )
    if name != "AdamW":
        raise ValueError(f"unknown optimizer {name!r}")
    return torch.optim.AdamW(groups, lr=lr, betas=betas, weight_decay=wd), "AdamW"


def _build_recipe_optimizer(
    name: str, groups: list[dict[str, Any]], lr: float, betas: tuple[float, float], wd: float
) -> torch.optim.Optimizer | None:
    """Prodigy, AdamWScheduleFree, DAdaptAdam or CAME (None for other names)."""
    if name == "Prodigy":
        from prodigyopt import Prodigy

        # the package's defaults, as sd-scripts uses them (bias correction slows the step-size search:
        # on the demo model its d stays at d0 for 30 steps, without it d grows 20 000-fold)
        with _quiet():  # it prints "Using decoupled weight decay" on stdout
            return Prodigy(groups, lr=lr, betas=betas, weight_decay=wd, decouple=True)
    if name == "DAdaptAdam":
        from dadaptation import DAdaptAdam

        with _quiet():
            return DAdaptAdam(groups, lr=lr, betas=betas, weight_decay=wd, decouple=True)  # decoupled: AdamW's decay
    if name == "AdamWScheduleFree":
        from schedulefree import AdamWScheduleFree

        optimizer = AdamWScheduleFree(groups, lr=lr, betas=betas, weight_decay=wd)
        optimizer.train()
        return optimizer
    if name == "CAME":
        from came_pytorch import CAME

        return CAME(groups, lr=lr, betas=(*betas, 0.9999), weight_decay=wd)  # the paper's third beta
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep a package's ``print`` off stdout (the CLI's output is ours); what it said goes to the debug log."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    if buffer.getvalue().strip():
        log.debug("optimizer: %s", buffer.getvalue().strip())


def is_schedule_free(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` keeps a training point and an average (schedule-free: needs train()/eval())."""
    return any("train_mode" in g for g in optimizer.param_groups) and hasattr(optimizer, "eval")


@contextlib.contextmanager
def averaged_weights(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Inside: the parameters hold the weights to save, sample or validate with.

    Only a schedule-free optimizer changes anything: its ``eval()`` moves the parameters to the average
    ``x``; on leaving, the training point ``y`` is put back exactly as it was (copied, not recomputed by
    ``train()``, whose arithmetic would not give the same bits back and would break an exact resume).
    """
    if not is_schedule_free(optimizer) or not optimizer.param_groups[0].get("train_mode", False):
        yield
        return
    params = [p for g in optimizer.param_groups for p in g["params"]]
    saved = [p.detach().clone() for p in params]
    optimizer.eval()
    try:
        yield
    finally:
        optimizer.train()
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)


def warmup_steps(sched_cfg: Any, total_steps: int) -> int:
    """The warm-up in steps: ``warmup_ratio x total_steps`` when the ratio is set, else ``warmup_steps``."""
    ratio = float(getattr(sched_cfg, "warmup_ratio", 0.0) or 0.0)
    if ratio > 0:
        return int(ratio * max(1, int(total_steps)))
    return int(sched_cfg.warmup_steps)


def build_lr_scheduler(
    sched_cfg: Any, optimizer: torch.optim.Optimizer, total_steps: int, warn: Callable[[str], None] | None = None
) -> torch.optim.lr_scheduler.LRScheduler:
    """diffusers' ``get_scheduler`` with the configured warm-up over ``total_steps`` optimizer steps.

    ``cosine_with_restarts`` uses ``lr_scheduler_num_cycles`` and ``polynomial`` ``lr_scheduler_power``
    (sd-scripts' names). A schedule-free optimizer gets a constant schedule and does the warm-up itself
    (as sd-scripts does).
    """
    from diffusers.optimization import get_scheduler

    warmup = warmup_steps(sched_cfg, total_steps)
    if is_schedule_free(optimizer):
        for group in optimizer.param_groups:
            group["warmup_steps"] = warmup
        if sched_cfg.lr_scheduler not in ("constant", "constant_with_warmup"):
            msg = f"a schedule-free optimizer needs no LR schedule: {sched_cfg.lr_scheduler} is replaced by constant"
            log.warning(msg)
            if warn:
                warn(msg)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _step: 1.0)
    return get_scheduler(
        sched_cfg.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=warmup,
        num_training_steps=max(1, int(total_steps)),
        num_cycles=int(getattr(sched_cfg, "lr_scheduler_num_cycles", 1)),
        power=float(getattr(sched_cfg, "lr_scheduler_power", 1.0)),
    )
