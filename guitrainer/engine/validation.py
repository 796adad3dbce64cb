"""Validation loss: held-out images scored at fixed timesteps with fixed noise, so the curve is comparable.

The training loss of one step depends on which images, timesteps and noise that step drew, so its curve
is mostly noise. A validation score removes all three: the same images (a share of the training images
held out, or a folder of others), the same timesteps (sd-scripts' choice: 4 evenly spaced inside the
training range, ``linspace(lo, hi, 6)[1:-1]``) and the same noise (drawn from a generator seeded by the
validation seed, inside :func:`torch.random.fork_rng` so the training RNG streams never notice). Two
scores of the same weights are therefore equal, and a falling score means the weights got better on
images they were not trained on.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from guitrainer.config import DatasetFolder
from guitrainer.engine import data

#: timesteps scored per image, evenly spaced inside the training range (sd-scripts' NUM_VALIDATION_TIMESTEPS)
NUM_TIMESTEPS = 4

T = TypeVar("T")


def split_items(items: Sequence[T], share: float, seed: int) -> tuple[list[T], list[T]]:
    """``(training items, validation items)``: ``share`` of the items held out, chosen by ``seed``.

    As sd-scripts' ``split_train_val``: shuffled with the seed, the first ``ceil(n x (1 - share))`` train.
    Both parts keep at least one item when there are two or more; the order within each part is the
    original order. ``share = 0`` holds nothing out.
    """
    n = len(items)
    if share <= 0 or n < 2:
        return list(items), []
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_train = min(n - 1, max(1, math.ceil(n * (1.0 - share))))
    train, held = sorted(order[:n_train]), sorted(order[n_train:])
    return [items[i] for i in train], [items[i] for i in held]


def fixed_timesteps(min_timestep: int, max_timestep: int, count: int = NUM_TIMESTEPS) -> list[int]:
    """``count`` timesteps evenly spaced strictly inside ``[min_timestep, max_timestep]`` (sd-scripts' choice)."""
    lo, hi = int(min_timestep), int(max_timestep)
    step = (hi - lo) / (count + 1)
    out = [int(lo + step * (k + 1)) for k in range(count)]
    return [min(max(t, lo), max(hi - 1, lo)) for t in out]


def bucket_batches(buckets: Sequence[Any], batch_size: int) -> list[list[int]]:
    """Item indices grouped by bucket (in first-seen order), then cut into batches of ``batch_size``."""
    groups: dict[Any, list[int]] = {}
    for i, b in enumerate(buckets):
        groups.setdefault(tuple(b), []).append(i)
    return [g[k : k + batch_size] for g in groups.values() for k in range(0, len(g), batch_size)]


@dataclass(frozen=True)
class ValidationPlan:
    """What one validation score runs: batches of item indices, the timesteps, the seed."""

    batches: tuple[tuple[int, ...], ...]
    timesteps: tuple[float, ...]  # the family's own units: DDPM steps, or noise levels σ
    seed: int

    @property
    def passes(self) -> int:
        """Forward passes per score (each batch at each timestep)."""
        return len(self.batches) * len(self.timesteps)


def make_plan(buckets: Sequence[Any], batch_size: int, timesteps: Sequence[float], seed: int) -> ValidationPlan:
    return ValidationPlan(tuple(tuple(b) for b in bucket_batches(buckets, batch_size)), tuple(timesteps), int(seed))


def score(
    plan: ValidationPlan,
    batch_loss: Callable[[Sequence[int], torch.Tensor], torch.Tensor],
    device: torch.device,
    as_tensor: Callable[[Sequence[float], torch.device], torch.Tensor] | None = None,
) -> float:
    """The mean of ``batch_loss(batch, timesteps)`` over the plan, weighted by batch size.

    ``batch_loss`` builds the batch of the given item indices and returns its mean loss at the given
    (one per image) timesteps. Every draw inside (noise, VAE sampling) comes from torch's RNG, reseeded
    with the plan's seed here and restored afterwards; gradients are off.
    """
    devices = [device] if device.type == "cuda" else []
    total, count = 0.0, 0
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(plan.seed)
        for batch in plan.batches:
            for t in plan.timesteps:
                values = [t] * len(batch)
                ts = as_tensor(values, device) if as_tensor else torch.tensor([int(v) for v in values], device=device)
                total += float(batch_loss(batch, ts)) * len(batch)
                count += len(batch)
    return total / max(1, count)


# --------------------------------------------------------------------------- a run's validation


def build_dataset(config: Any, held_out: Sequence[data.TrainItem], feedback: Any) -> data.TrainDataset | None:
    """The validation images: ``held_out`` (the share of the training images), or ``validation.folder``.

    Scored as they are: no caption shuffling or dropout, no flips, each image once.
    """
    vcfg, dcfg = config.validation, config.dataset
    items = list(held_out)
    if str(vcfg.folder).strip():
        fcfg = copy.copy(dcfg)
        fcfg.folders, fcfg.exclude = [DatasetFolder(path=vcfg.folder, repeats=1)], []
        items = data.collect_items(fcfg, warn=feedback.warn, what="validation images")
    if not items:
        if vcfg.split > 0:
            feedback.warn("the validation share holds out no image (one image only?); no validation loss")
        return None
    vds_cfg = copy.copy(dcfg)
    vds_cfg.shuffle_captions, vds_cfg.caption_dropout, vds_cfg.flip_augment = False, 0.0, False
    feedback.status(f"{len(items)} validation images, scored every {vcfg.every_n_steps} steps")
    return data.TrainDataset([dataclasses.replace(i, repeats=1) for i in items], vds_cfg)


def validation_loss(session: Any, caches: Any, step: Any) -> float | None:
    """The run's validation loss now (None without validation images): :func:`score` of its validation set.

    ``step`` is the run's :class:`~guitrainer.engine.amp_step.AmpStep` (its forward loss and autocast). Two
    calls with the same weights give the same number and no RNG stream of the training changes. A
    schedule-free optimizer is scored at its averaged weights; LoRA dropout is off while scoring.
    """
    from guitrainer.engine.optim import averaged_weights

    vds = getattr(session, "validation_dataset", None)
    if vds is None:
        return None
    from guitrainer.engine.families import registry

    cfg = session.config
    fam = registry.family(session.model.family)
    timesteps = fam.validation_timesteps(cfg, session.model, NUM_TIMESTEPS)
    plan = make_plan(vds.buckets, cfg.schedule.batch_size, timesteps, cfg.validation.seed)
    cached = caches.validation_latents

    def batch_loss(indices: Sequence[int], timesteps: torch.Tensor) -> torch.Tensor:
        samples = [vds.item_sample(i, False, vds.fixed_caption(i), with_pixels=not cached) for i in indices]
        batch = data.collate(samples)
        batch["latents"] = caches.latents_of(batch, cached)
        with step.autocast():
            return step.forward_loss(batch, timesteps)

    unet = session.model.denoiser
    with averaged_weights(session.optimizer):
        unet.eval()
        try:
            return score(plan, batch_loss, session.device, fam.timestep_tensor)
        finally:
            unet.train()
