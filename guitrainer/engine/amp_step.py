"""One optimizer step under mixed precision, as DESIGN §4 says, by hand so every rule is visible here.

* frozen weights are in the compute dtype, trainable LoRA params (and so the optimizer state) stay fp32;
* the forward runs under ``torch.autocast(device_type, dtype)`` for fp16 / bf16 (:func:`autocast`);
* fp16 only: ``torch.amp.GradScaler`` scales the loss (:func:`backward`), ``unscale_`` runs before clipping,
  steps with inf/NaN gradients are skipped and counted (:func:`finish_step`).

Prior preservation (``dataset.regularization_folders``): every micro-batch is an instance half (the training
images, exactly as without class images) and a class half of the same size; ``loss = instance +
prior_loss_weight x class``. See :meth:`AmpStep.class_half` for why the halves run one after the other.

The module-level functions are the step itself; :mod:`guitrainer.engine.memory.measure` measures a step's peak
memory by running them on fake tensors.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from guitrainer.core.dataset import regularization
from guitrainer.core.precision.numerics import nan_advice
from guitrainer.engine import data
from guitrainer.engine.errors import NAN_ADVICE, TrainingFailed
from guitrainer.engine.families import registry
from guitrainer.engine.families.base import Family
from guitrainer.engine.numerics import StepNumerics, StepWatch
from guitrainer.engine.optim import averaged_weights

#: (instance batch: dataset positions, class draws: class item indices) -- one micro-batch
Pair = tuple[list[int], list[int]]


class StepResult(NamedTuple):
    """One optimizer step: total loss (instance + weight x class), its halves (unweighted), grad norm,
    whether the scaler skipped it."""

    loss: float
    instance_loss: float | None
    class_loss: float | None
    grad_norm: float | None
    skipped: bool
    numerics: StepNumerics | None = None  # the numerics monitor's findings (sampled and skipped steps)


# --------------------------------------------------------------------------- the step's parts


def autocast(precision: str, device_type: str, dtype: torch.dtype) -> contextlib.AbstractContextManager[Any]:
    """The forward's context: nothing for fp32, ``torch.autocast`` in the compute dtype otherwise."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


def draw_noise(scheduler: Any, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(noise, timesteps, noisy latents) of one micro-batch, from the global RNG."""
    noise = torch.randn_like(latents)
    t = torch.randint(0, scheduler.config.num_train_timesteps, (latents.shape[0],), device=latents.device).long()
    return noise, t, scheduler.add_noise(latents, noise, t)


def prediction_loss(
    unet: torch.nn.Module,
    scheduler: Any,
    prediction_type: str,
    latents: torch.Tensor,
    drawn: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    hidden: torch.Tensor,
    added: dict[str, torch.Tensor] | None,
) -> torch.Tensor:
    """Noise-prediction MSE (epsilon, or v with a v-prediction scheduler), computed in fp32."""
    noise, t, noisy = drawn
    pred = unet(noisy, t, hidden, added_cond_kwargs=added).sample
    target = scheduler.get_velocity(latents, noise, t) if prediction_type == "v_prediction" else noise
    return F.mse_loss(pred.float(), target.float(), reduction="mean")


def backward(loss: torch.Tensor, scaler: Any | None) -> None:
    """Backward of ``loss``, scaled by the GradScaler under fp16 (every pass of a step: one scaler)."""
    (scaler.scale(loss) if scaler is not None else loss).backward()


def finish_step(
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    scaler: Any | None,
    max_grad_norm: float,
    *,
    foreach: bool | None = None,
) -> tuple[torch.Tensor, bool]:
    """Unscale (fp16), clip, update (or skip on inf/NaN gradients), zero the gradients: (grad norm, skipped).

    ``max_grad_norm <= 0`` measures the norm without clipping.
    """
    if scaler is not None:
        scaler.unscale_(optimizer)  # before clipping: clip the true gradients
    limit = max_grad_norm if max_grad_norm > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, limit, foreach=foreach)
    skipped = False
    if scaler is not None:
        before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        skipped = scaler.get_scale() < before
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm, skipped


# --------------------------------------------------------------------------- the trainer's step


class AmpStep:
    """The trainer's optimizer step over a session's model, data and caches.

    ``session`` is the run's :class:`~guitrainer.engine.session.Session`, ``caches`` its
    :class:`~guitrainer.engine.cache.RunCaches`, ``progress`` its :class:`~guitrainer.engine.resume.Progress`
    (read for the class half's seed and the step number in messages). ``watch``: the numerics monitor's
    per-step side (:class:`~guitrainer.engine.numerics.StepWatch`; None: no monitoring).
    """

    def __init__(self, session: Any, caches: Any, progress: Any, watch: StepWatch | None = None) -> None:
        self.session = session
        self.caches = caches
        self.progress = progress
        self.watch = watch
        self._replay_scale: float | None = None  # set while a skipped step is replayed for its diagnosis
        self.family: Family = registry.family(session.model.family)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        s = self.session
        return autocast(s.precision, s.device.type, s.dtype)

    def forward_loss(self, batch: dict[str, Any], timesteps: torch.Tensor | None = None) -> torch.Tensor:
        """The loss of one micro-batch, as the model's family computes it (:mod:`guitrainer.engine.families`).
        Runs under autocast.

        The UNet families: noise-prediction MSE on uniform timesteps by default, the run's ``[loss]`` and
        ``[noise]`` settings (min-SNR-γ, Huber, noise offset, ...) as :mod:`guitrainer.engine.recipes` computes
        them; the flow-matching ones: :mod:`guitrainer.engine.flow_matching` with the ``[flow]`` settings.
        ``timesteps`` given: those, not drawn (the validation loss).
        """
        s = self.session
        fam = self.family
        latents = batch["latents"]
        draw = fam.draw(s.config, s.model, latents, timesteps)
        text = self.caches.encode_text(batch["captions"])
        prediction = fam.predict(s.config, s.denoiser, s.model, draw, text, batch)
        return fam.loss(s.config, s.model, prediction, draw, latents)

    def backward(self, loss: torch.Tensor) -> None:
        if self._replay_scale is not None:  # a diagnosis replay: the scale the step had, not the lowered one
            (loss * self._replay_scale).backward()
            return
        backward(loss, self.session.scaler)

    def no_sync_unless(self, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """DDP: all-reduce only on the step's last backward pass, and never in a diagnosis replay (each
        process looks at its own gradients)."""
        s = self.session
        return s.processes.no_sync_unless(sync and self._replay_scale is None, s.denoiser)

    def class_seed(self, micro_index: int) -> int:
        """The class half's RNG seed: fixed by (seed, epoch, step, micro-batch, process), so a resumed run
        draws the same class noise, and the instance stream never sees the class half's draws."""
        p, s = self.progress, self.session
        key = f"guitrainer-class:{s.config.schedule.seed}:{p.epoch}:{p.global_step}:{micro_index}:{s.processes.index}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & (2**63 - 1)

    def class_half(self, items: list[int], micro_index: int, micro_count: int, sync: bool) -> torch.Tensor:
        """Forward/backward of one micro-batch's class draws; returns their (unweighted) mean loss, detached.

        Why a second pass rather than one batch of instance + class images (as diffusers' DreamBooth
        script concatenates them): activation memory stays that of one half, so the VRAM estimate of a
        batch holds with class images too; compute doubles either way. The class images may also lie
        in other aspect buckets than the instance batch: they are grouped by bucket, and each group's
        loss is weighted by its share of the half, so the class loss is the mean over its images.

        The gradients add to the instance half's: ``prior_loss_weight x share / micro_count`` each. All
        random draws (noise, timesteps, LoRA dropout, VAE sampling, flips) come from generators seeded
        by :meth:`class_seed` inside ``fork_rng``: the global streams continue exactly as without class
        images, so weight 0 trains bit for bit like no regularization, and stop/resume stays exact.
        """
        s = self.session
        cds = s.class_dataset
        assert cds is not None
        weight = float(s.config.dataset.prior_loss_weight)
        groups: dict[tuple[int, int], list[int]] = {}
        for i in items:
            groups.setdefault(tuple(cds.buckets[i]), []).append(i)  # type: ignore[arg-type]
        seed = self.class_seed(micro_index)
        flip_rng = random.Random(seed)
        total = torch.zeros((), dtype=torch.float32, device=s.device)
        devices = [s.device] if s.device.type == "cuda" else []
        class_latents = self.caches.class_latents
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for k, group in enumerate(groups.values()):
                share = len(group) / len(items)
                flips = [bool(cds.cfg.flip_augment) and flip_rng.random() < 0.5 for _ in group]
                samples = [
                    cds.item_sample(i, f, cds.fixed_caption(i), with_pixels=not class_latents) for i, f in zip(group, flips)
                ]
                batch = data.collate(samples)
                batch["latents"] = self.caches.latents_of(batch, class_latents)
                with self.no_sync_unless(sync and k == len(groups) - 1):
                    with self.autocast():
                        loss = self.forward_loss(batch)
                    total += share * loss.detach().float()
                    self.backward(loss * (weight * share / micro_count))
        return total

    def passes(self, micro: list[Pair]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The forward and backward passes of one optimizer step: (instance losses, class losses)."""
        s = self.session
        inst_losses: list[torch.Tensor] = []
        class_losses: list[torch.Tensor] = []
        for j, (b, cls) in enumerate(micro):
            last = j == len(micro) - 1
            batch = data.collate([s.dataset.sample(i, with_pixels=not self.caches.latents) for i in b])
            batch["latents"] = self.caches.latents_of(batch)  # frozen VAE, outside autocast: its own dtype
            with self.no_sync_unless(last and not cls):
                with self.autocast():
                    loss = self.forward_loss(batch)
                inst_losses.append(loss.detach())
                self.backward(loss / len(micro))
            del loss, batch  # the instance half's activations are gone before the class half runs
            if cls:
                class_losses.append(self.class_half(cls, j, len(micro), sync=last))
        return inst_losses, class_losses

    def replay(self, micro: list[Pair], scale: float) -> None:
        """The step's passes again with the loss multiplied by ``scale`` (the numerics monitor's diagnosis)."""
        self._replay_scale = float(scale)
        try:
            self.passes(micro)
        finally:
            self._replay_scale = None

    def run(self, micro: list[Pair]) -> StepResult:
        """Forward/backward over the micro-batches (instance half, then any class half), then one (possibly
        skipped) update. With a ``watch``, a sampled step is measured and a skipped step (or a NaN loss)
        is replayed to find the module where the inf/NaN began."""
        s, watch = self.session, self.watch
        with watch.begin(self.progress.global_step + 1) if watch is not None else contextlib.nullcontext():
            inst_losses, class_losses = self.passes(micro)
        halves = [torch.stack(inst_losses).float().mean()]
        if class_losses:
            halves.append(torch.stack(class_losses).mean())
        # the loss of the whole step (every process's batches), so the curve is the global batch's
        losses = s.processes.mean(torch.stack(halves))
        instance_value = float(losses[0].item())
        class_value = float(losses[1].item()) if class_losses else None
        loss_value = regularization.combined_loss(instance_value, class_value, s.config.dataset.prior_loss_weight)
        if not math.isfinite(loss_value) and s.scaler is None:
            self._nan_stop(micro)
        scale = float(s.scaler.get_scale()) if s.scaler is not None else 1.0
        if watch is not None:
            watch.gradients()  # still scaled: what fp16 held
        norm, skipped = finish_step(s.optimizer, s.params, s.scaler, s.config.schedule.max_grad_norm)
        if not skipped:  # like accelerate: a skipped update does not advance the schedule
            s.lr_scheduler.step()
        numerics = None
        if watch is not None:
            numerics = watch.end(
                skipped=skipped,
                replay=lambda: self.replay(micro, scale),
                scale=scale if s.scaler is not None else None,
                scale_after=float(s.scaler.get_scale()) if s.scaler is not None else None,
            )
            if skipped:
                s.optimizer.zero_grad(set_to_none=True)  # the replay's gradients
        norm_value = float(norm.item())
        finite_norm = norm_value if math.isfinite(norm_value) else None
        instance = instance_value if class_losses else None  # reported beside the total with class images
        return StepResult(loss_value, instance, class_value, finite_norm, skipped, numerics)

    def _nan_stop(self, micro: list[Pair]) -> None:
        """A NaN loss without a GradScaler ends the run, naming the module where the NaN began when found."""
        s = self.session
        found = None
        if self.watch is not None:
            found = self.watch.end(skipped=False, nan_loss=True, replay=lambda: self.replay(micro, 1.0)).nonfinite
        where = f" {found.describe()}." if found is not None else ""
        base = s.config.precision.base_weights
        advice = (*nan_advice(found, s.precision, base), NAN_ADVICE[-1]) if found is not None else NAN_ADVICE
        raise TrainingFailed(
            f"loss became NaN at step {self.progress.global_step + 1} ({s.precision}); training stopped.{where} "
            "The last saved LoRA and training state were kept unchanged.",
            advice,
        )

    def evaluation_loss(self, seed: int = 0, adapters: bool = True, repeats: int = 4) -> float:
        """Mean loss over every image ``repeats`` times with noise and timesteps fixed by ``seed``.

        Leaves every RNG as it was. ``adapters=False`` measures the base model (the LoRA switched off).
        """
        s = self.session
        unet = s.model.denoiser
        devices = [s.device] if s.device.type == "cuda" else []
        losses: list[float] = []
        with torch.random.fork_rng(devices=devices), torch.no_grad(), averaged_weights(s.optimizer):
            torch.manual_seed(seed)
            unet.eval()  # no LoRA dropout while measuring
            if not adapters:
                unet.disable_adapters()
            try:
                ds = s.dataset
                groups: dict[tuple[int, int], list[int]] = {}
                for i in list(range(len(ds.items))) * repeats:
                    groups.setdefault(ds.buckets[i], []).append(i)
                for b in (b for g in groups.values() for b in data.batches_of(g, s.config.schedule.batch_size)):
                    samples = [ds.item_sample(i, False, ds.fixed_caption(i), with_pixels=not self.caches.latents) for i in b]
                    batch = data.collate(samples)
                    batch["latents"] = self.caches.latents_of(batch)
                    with self.autocast():
                        losses.append(float(self.forward_loss(batch)))
            finally:
                unet.train()
                if not adapters:
                    unet.enable_adapters()
        return sum(losses) / len(losses)
