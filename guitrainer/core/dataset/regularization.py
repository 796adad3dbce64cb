"""Regularization (class) images, DreamBooth style: which class images each epoch draws, and the loss rule.

Pure Python: no torch and no Qt. The trainer, the CLI and the UI's summaries share these functions.

How kohya does it (sd-scripts ``library/train_util.py``, ``DreamBoothDataset.__init__``), as read for
this module:

- ``num_train_images`` = Σ repeats × images over the training subsets: the training draws of one epoch.
- The class ("reg") images are registered by a loop that runs until ``n >= num_train_images``::

      n, first_loop = 0, True
      while n < num_train_images:
          for info in reg_infos:                 # class images in folder order
              if first_loop:
                  register_image(info); n += info.num_repeats   # each with its own folder repeats
              else:
                  info.num_repeats += 1; n += 1                 # later passes: +1 draw each, in order
              if n >= num_train_images:
                  break
          first_loop = False

  So class images are cycled in order with their own repeats: fewer class draws than training draws
  means the first images get extra draws, pass after pass; more means only the first ones are used
  (the rest never registered). The counts are fixed once, at dataset construction, so every epoch
  draws the same class images the same number of times ("repeats kept across epochs").
- Training and class draws live in one dataset (its length doubles), are put in aspect buckets
  together, shuffled per epoch inside each bucket, and batched per bucket; a batch may hold any mix.
  Each sample carries ``loss_weight = prior_loss_weight`` (class) or 1.0 (training), and the step's
  loss is ``mean_i(loss_weight_i × mse_i)`` (``train_network.py``). The trainer does not use this mixed
  layout; :attr:`EpochPlan.mixed` keeps kohya's draw order for comparison.

Two deliberate differences, both documented where they apply:

- kohya's first pass adds a class image's *whole* repeats before it checks ``n``, so it can overshoot
  the training draws by up to ``repeats - 1``. Here the last first-pass image gets only what is
  missing, so class draws == training draws exactly and the halves of the prior-preservation
  layout always have the same size.
- ``mode="rotate"`` (not kohya's, opt-in) continues the cycle across epochs instead of restarting
  it, so a class set larger than one epoch's draws is used in full over the run (diffusers'
  ``train_dreambooth`` reaches all its class images too).

The prior-preservation layout (diffusers ``train_dreambooth_lora.py``): every step holds an instance
half and a class half of the same size; ``loss = mse(instance) + prior_loss_weight × mse(class)``
(:func:`combined_loss`). Class images take their own caption, or the class prompt when they have
none (:func:`class_caption`); the trigger word is *not* added to them (the class must stay generic).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

log = logging.getLogger(__name__)

ItemId = Hashable  # whatever the caller uses to name an image: an index, a path, ...
Mode = Literal["kohya", "rotate"]


class Draw(NamedTuple):
    """One use of one image in an epoch."""

    item: ItemId
    is_class: bool


@dataclass(frozen=True)
class EpochPlan:
    """The draws of one epoch.

    ``train`` and ``classes`` are in this epoch's shuffled order (the same length when class images
    exist, else ``classes`` is empty); ``mixed`` is kohya's single dataset: both shuffled together.
    ``class_counts`` is how many times each class image is drawn this epoch, in folder order.
    """

    epoch: int
    train: tuple[ItemId, ...]
    classes: tuple[ItemId, ...]
    mixed: tuple[Draw, ...]
    class_counts: tuple[tuple[ItemId, int], ...]
    seed: int = 0

    @property
    def has_classes(self) -> bool:
        return bool(self.classes)

    @property
    def unused_class_items(self) -> int:
        """Class images not drawn at all this epoch (kohya: more class draws available than needed)."""
        return sum(1 for _, n in self.class_counts if n == 0)


# --------------------------------------------------------------------------- counts


def train_draws(train_counts: Sequence[tuple[ItemId, int]]) -> int:
    """kohya's ``num_train_images``: Σ repeats over the training images."""
    return sum(max(0, int(r)) for _, r in train_counts)


def kohya_class_repeats(n_train: int, class_counts: Sequence[tuple[ItemId, int]]) -> list[tuple[ItemId, int]]:
    """How often each class image is drawn per epoch (kohya's registration loop, capped to ``n_train``).

    ``class_counts`` are ``(item, folder repeats)`` in folder order. Every class image is listed in
    the result, with 0 for those never reached.
    """
    reps = [0] * len(class_counts)
    if n_train <= 0 or not class_counts:
        return [(item, 0) for item, _ in class_counts]
    n, first = 0, True
    while n < n_train:
        progressed = False
        for i, (_, r) in enumerate(class_counts):
            if first:
                take = min(max(0, int(r)), n_train - n)  # kohya adds all of r; capped so totals match
            else:
                take = 1 if r > 0 else 0
            reps[i] += take
            n += take
            progressed |= take > 0
            if n >= n_train:
                break
        first = False
        if not progressed:  # every class image has repeats 0: nothing can be drawn
            break
    return [(item, reps[i]) for i, (item, _) in enumerate(class_counts)]


def _cycle(class_counts: Sequence[tuple[ItemId, int]]) -> list[ItemId]:
    return [item for item, r in class_counts for _ in range(max(0, int(r)))]


def rotate_class_draws(n_train: int, class_counts: Sequence[tuple[ItemId, int]], epoch: int) -> list[ItemId]:
    """``mode="rotate"``: epoch ``e`` takes positions ``[e·n, (e+1)·n)`` of the endless cycle c0×r0, c1×r1, …"""
    cycle = _cycle(class_counts)
    if not cycle or n_train <= 0:
        return []
    start = epoch * n_train
    return [cycle[(start + k) % len(cycle)] for k in range(n_train)]


def class_draws_in_order(
    train_counts: Sequence[tuple[ItemId, int]],
    class_counts: Sequence[tuple[ItemId, int]],
    epoch: int = 0,
    mode: Mode = "kohya",
) -> list[ItemId]:
    """The class draws of ``epoch`` before shuffling (kohya: each image repeated in place, folder order)."""
    n = train_draws(train_counts)
    if mode == "rotate":
        return rotate_class_draws(n, class_counts, epoch)
    if mode != "kohya":
        raise ValueError(f"mode must be 'kohya' or 'rotate', got {mode!r}")
    return [item for item, k in kohya_class_repeats(n, class_counts) for _ in range(k)]


# --------------------------------------------------------------------------- the epoch


def _rng(seed: int, epoch: int, stream: str) -> random.Random:
    # str seeds are hashed with SHA-512 by random.seed (version 2): stable across runs and platforms
    return random.Random(f"guitrainer-reg:{int(seed)}:{int(epoch)}:{stream}")


def epoch_schedule(
    train_counts: Sequence[tuple[ItemId, int]],
    class_counts: Sequence[tuple[ItemId, int]],
    epoch: int,
    seed: int,
    *,
    mode: Mode = "kohya",
    shuffle: bool = True,
) -> EpochPlan:
    """The draws of ``epoch``: training images × repeats, and as many class draws (see module docstring).

    Deterministic from ``(seed, epoch)`` and independent of every global RNG, so a resumed run
    replays the same epochs. ``shuffle=False`` keeps folder order (what a test can write out by hand).
    """
    train = [item for item, r in train_counts for _ in range(max(0, int(r)))]
    classes = class_draws_in_order(train_counts, class_counts, epoch, mode)
    if mode == "kohya":
        counts = kohya_class_repeats(len(train), class_counts)
    else:
        c = Counter(classes)
        counts = [(item, c[item]) for item, _ in class_counts]
    mixed = [Draw(i, False) for i in train] + [Draw(i, True) for i in classes]
    if shuffle:
        _rng(seed, epoch, "train").shuffle(train)
        _rng(seed, epoch, "class").shuffle(classes)
        _rng(seed, epoch, "mixed").shuffle(mixed)
    plan = EpochPlan(int(epoch), tuple(train), tuple(classes), tuple(mixed), tuple(counts), int(seed))
    if class_counts and plan.unused_class_items:
        log.debug("epoch %d: %d class images not drawn (%s mode)", epoch, plan.unused_class_items, mode)
    return plan


# --------------------------------------------------------------------------- captions and loss


def class_caption(item_caption: str | None, class_prompt: str) -> str:
    """A class image's caption: its own (stripped) text, else the class prompt. No trigger word."""
    text = (item_caption or "").strip()
    return text if text else class_prompt.strip()


def combined_loss(instance_loss: float, class_loss: float | None, weight: float) -> float:
    """DreamBooth prior preservation: ``instance + weight × class`` (each the mean MSE over its half).

    ``class_loss`` None (no class images) gives ``instance_loss``. This is what ``StepMetrics.loss``
    reports; ``instance_loss`` and ``class_loss`` (unweighted) are reported beside it.
    """
    if class_loss is None:
        return float(instance_loss)
    return float(instance_loss) + float(weight) * float(class_loss)


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class ClassUsage:
    """What one epoch does with the class images, for the UI and the run's log."""

    train_draws: int
    class_draws: int
    class_images: int
    used_images: int

    def describe(self) -> str:
        if not self.class_images:
            return "No class images."
        if not self.train_draws:
            return f"{self.class_images} class images; add training images to use them."
        text = f"Each epoch: {self.train_draws} training draws + {self.class_draws} class draws"
        if self.used_images < self.class_images:
            text += f" ({self.used_images} of {self.class_images} class images used, as kohya does)"
        elif self.class_draws > self.class_images:
            text += f" ({self.class_images} class images, reused in turn)"
        return text + "."


def class_usage(train_counts: Sequence[tuple[ItemId, int]], class_counts: Sequence[tuple[ItemId, int]]) -> ClassUsage:
    """Per-epoch totals under kohya's rule."""
    n = train_draws(train_counts)
    reps = kohya_class_repeats(n, class_counts)
    return ClassUsage(n, sum(k for _, k in reps), len(class_counts), sum(1 for _, k in reps if k > 0))
