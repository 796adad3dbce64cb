"""The training loop: ``Trainer(config, reporter, control).run() -> RunSummary``.

Mixed precision follows DESIGN §4 exactly, by hand rather than through accelerate's
``mixed_precision`` so every rule is visible here:

* frozen weights (UNet, VAE, text encoders) are cast to the compute dtype (fp16 / bf16 / fp32);
* trainable LoRA params (and so the optimizer state) stay fp32;
* the forward runs under ``torch.autocast(device_type, dtype)`` for fp16 / bf16;
* fp16 only: ``torch.amp.GradScaler`` scales the loss, ``unscale_`` runs before clipping, steps with
  inf/NaN gradients are skipped and counted, and the scale is reported every step.

accelerate provides the device, DDP wrapping under ``accelerate launch`` and the main-process rule
(only the main process reports and saves). Gradient accumulation is done by hand with ``no_sync``.
Under several processes each one trains its shard of every epoch (:func:`data.epoch_batches`), the
reported loss is the mean over the processes, and stop / pause are agreed on by a small all-reduce
each step (:meth:`Trainer._any_process`), so every process leaves the loop at the same step. A
single-process run does no collective at all.

Prior preservation (``dataset.regularization_folders``): every micro-batch is an instance half (the
training images, exactly as without class images) and a class half of the same size, drawn per epoch
by :func:`guitrainer.core.regularization.epoch_schedule` (kohya's counts, repeats respected, fixed by
(seed, epoch)); ``loss = instance + prior_loss_weight x class``. See :meth:`Trainer._class_half` for why
the halves run one after the other rather than as one concatenated batch.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import gc
import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core import regularization as R
from guitrainer.core.events import Control, NullReporter, Reporter, RunSummary, SavedFile, StepMetrics
from guitrainer.core.fileio import WriteError, atomic_write_bytes, atomic_write_with, numbered_path
from guitrainer.core.fileio import explain as explain_write_error
from guitrainer.core.paths import expand
from guitrainer.engine import data as D
from guitrainer.engine import lora as L
from guitrainer.engine import recipes as RC
from guitrainer.engine import sampling as S
from guitrainer.engine import validation as V
from guitrainer.engine.cache import LatentCache, TextCache
from guitrainer.engine.models import (
    LoadedModel,
    ModelLoadError,
    ensure_demo_dataset,
    ensure_demo_model,
    load_base_model,
)
from guitrainer.engine.optim import averaged_weights, build_lr_scheduler, build_optimizer, param_groups

log = logging.getLogger(__name__)

#: fp16: this many skipped steps in a row (inf/NaN gradients every time) stop the run
MAX_CONSECUTIVE_SKIPS = 10
STATE_VERSION = 1
STATE_FILE = "trainer_state.json"
COMPUTE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: settings a saved state must share with the run that resumes it
_RESUME_MUST_MATCH = ("network.rank", "network.target_modules", "network.train_text_encoder", "precision.training")

OOM_ADVICE = (
    "turn on gradient checkpointing (Precision page)",
    "use a smaller batch size (raise gradient accumulation to keep the effective batch)",
    "use an 8-bit optimizer (AdamW8bit)",
    "cache latents so the VAE leaves memory",
    "lower the resolution",
)


#: a save that failed at the end of a run or on stop (full disk, read-only or misnamed output folder)
WRITE_ADVICE = (
    "choose another output folder, then Save now or resume",
    "free some disk space if the disk is full",
)

MODEL_ADVICE = (
    "check the base model on the Model page: a diffusers folder, or one .safetensors / .ckpt file",
    "re-download the file if it may be incomplete (its size should match the download page)",
    "try the built-in demo model to check that training itself works",
)

DATASET_ADVICE = (
    "check the image folders on the Dataset page (images are read from each folder, not its subfolders)",
    "look at the images flagged as unreadable there, and at Options ▸ Left-out images",
)

LORA_ADVICE = (
    "check the LoRA you continue from (Model page): it must be a LoRA of the same model family",
    "clear “continue from” to train a new LoRA",
)

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


class TrainingFailed(Exception):
    """Stops the run with a message and advice; turned into a "failed" RunSummary."""

    def __init__(self, message: str, advice: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.advice = advice


class StoppedBeforeTraining(Exception):
    """Stop was pressed during set-up (loading, caching): nothing was trained, so nothing is written."""


@dataclass
class _Progress:
    """Where the run is: what a resumable state stores besides weights, optimizer and RNG."""

    global_step: int = 0
    epoch: int = 0  # 0-based epoch being trained
    batch_pos: int = 0  # next batch of ``epoch``
    skipped_total: int = 0
    consecutive_skips: int = 0
    last_loss: float | None = None


def _details() -> str:
    """The exception being handled, as a traceback for the error dialog's "Show Details…"."""
    import traceback

    return traceback.format_exc()


def _is_oom(e: BaseException) -> bool:
    oom_type = getattr(torch, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


class Trainer:
    """Trains a LoRA as ``config`` says; reports through ``reporter``; obeys ``control`` once per step."""

    def __init__(self, config: TrainingConfig, reporter: Reporter | None = None, control: Control | None = None):
        self.config = config
        self.reporter: Reporter = reporter or NullReporter()
        self.control = control or Control()
        self.warnings: list[str] = []
        self.progress = _Progress()
        self.model: LoadedModel | None = None
        self.lora_path: str | None = None
        self.state_path: str | None = None
        self._intermediates: list[str] = []
        self.class_dataset: D.TrainDataset | None = None
        self.validation_dataset: D.TrainDataset | None = None  # held-out images for the validation loss
        self.validation_latents: dict[tuple[int, bool], torch.Tensor] = {}
        self._held_out: list[D.TrainItem] = []
        self.recipe = RC.Recipe.from_config(config)
        self.save_error: str | None = None  # why the last LoRA write failed (None: it worked)

    # ------------------------------------------------------------------ public
    def run(self) -> RunSummary:
        """Train; returns how the run ended. Out of memory and NaN losses end as "failed" with advice.

        A save that cannot be written at the end of the run or on stop (full disk, read-only folder, an
        output "folder" that is a file) ends as "failed" with the plain-words reason, never an exception.
        """
        try:
            return self._run()
        except WriteError as e:
            return self._summary("failed", e.strerror or str(e), WRITE_ADVICE, _details())
        except TrainingFailed as f:
            return self._summary("failed", f.message, f.advice, _details())
        except StoppedBeforeTraining as s:
            return self._summary("stopped", str(s))
        except D.DatasetError as e:
            return self._summary("failed", str(e), DATASET_ADVICE, _details())
        except ModelLoadError as e:
            return self._summary("failed", str(e), MODEL_ADVICE, _details())
        except L.LoraFormatError as e:
            return self._summary("failed", str(e), LORA_ADVICE, _details())
        except (RuntimeError, MemoryError) as e:
            if not (_is_oom(e) or isinstance(e, MemoryError)):
                raise
            details = _details()
            self._free_memory()
            msg = f"out of memory at step {self.progress.global_step + 1}: {str(e).splitlines()[0][:200]}"
            return self._summary("failed", msg, OOM_ADVICE, details)

    # ------------------------------------------------------------------ reporting helpers
    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        log.warning(text)
        if self._main:
            self.reporter.on_warning(text)

    def _status(self, text: str) -> None:
        log.info(text)
        if self._main:
            self.reporter.on_status(text)

    def _summary(self, status: str, message: str = "", advice: tuple[str, ...] = (), details: str = "") -> RunSummary:
        p = self.progress
        return RunSummary(
            status=status,
            steps=p.global_step,
            epochs=p.epoch,
            final_loss=p.last_loss,
            lora_path=self.lora_path,
            state_path=self.state_path,
            message=message,
            advice=tuple(advice),
            skipped_steps=p.skipped_total,
            warnings=tuple(self.warnings),
            details=details,
        )

    def _free_memory(self) -> None:
        self.model = None
        self.optimizer = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ set-up
    _main = True
    _num_processes = 1

    def _any_process(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag, True on every process when it is True on any of them.

        One process: the flags as given, no collective. Several (``accelerate launch``): one all-reduce
        (max) of a tensor of the flags, so every process must call this at the same point of the run.
        A stop or pause may reach one process only (a signal sent to one of them; a Control set by the
        code that drives the main process) or reach them at different steps (Ctrl+C, which the launcher
        passes on to each process); either way every process acts on it at the same step.
        """
        if self._num_processes == 1:
            return flags
        t = torch.tensor([float(f) for f in flags], dtype=torch.float32, device=self.device)
        return tuple(bool(v) for v in self.accelerator.reduce(t, reduction="max").tolist())

    def _stop_if_asked(self, during: str, *, every_process: bool = False) -> None:
        """Set-up is long (loading, caching): a Stop pressed meanwhile ends the run here, before any step.

        Cache entries already written stay on disk, so the next run starts where this one stopped.

        Several processes must stop at the same point, or the others would wait forever in the next
        collective (DDP's set-up, the first step). So there only the checks that every process makes at
        the same point of set-up count (``every_process=True``), and they agree through one small
        all-reduce (:meth:`_any_process`); the checks inside the caching loops, whose length can differ
        between processes (what the disk cache already held), apply to single-process runs only.
        """
        if self._num_processes > 1 and not every_process:
            return
        if self._any_process(self.control.stop_requested)[0]:
            self._status(f"stopped while {during}")
            raise StoppedBeforeTraining(f"stopped while {during}, before the first step; nothing was trained or saved")

    def _setup(self) -> None:
        from accelerate import Accelerator
        from accelerate.utils import set_seed
        from diffusers.training_utils import cast_training_params

        cfg = self.config
        self._setup_started = time.time() - 2.0  # entries touched from now on belong to this run (mtime slack)
        # Several processes without CUDA (torchrun / accelerate launch on a CPU machine): accelerate makes a
        # gloo process group only when told to use the CPU; otherwise every process would train alone.
        launched = _launched_processes()
        self.accelerator = Accelerator(
            gradient_accumulation_steps=cfg.schedule.gradient_accumulation,
            mixed_precision="no",
            cpu=launched > 1 and not torch.cuda.is_available(),
        )
        acc = self.accelerator
        self._main = acc.is_main_process
        self._num_processes = acc.num_processes
        if launched > 1 and acc.num_processes == 1:
            raise TrainingFailed(
                f"{launched} processes were launched but accelerate set up only one: "
                "each would train alone and write the same files",
                (
                    "launch with `accelerate launch --multi_gpu --num_processes N` "
                    "or `torchrun --nproc_per_node N`",
                ),
            )
        # several CPU processes: accelerate's device is "cpu:<rank>", which torch.load cannot map to
        self.device = torch.device("cpu") if acc.device.type == "cpu" else acc.device
        # precision.gpu_index: checked before the model loads. The current CUDA device is per thread, so
        # set_device runs here, in the thread that trains (the GUI's worker thread).
        from guitrainer.core.hardware import GpuChoiceError, choose_training_gpu

        wanted = cfg.precision.gpu_index
        cuda_names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if wanted >= 0 else []
        try:
            choice = choose_training_gpu(
                wanted,
                device_type=self.device.type,
                num_processes=acc.num_processes,
                gpu_names=cuda_names,
            )
        except GpuChoiceError as e:
            raise TrainingFailed(str(e), ("set the GPU to automatic (precision.gpu_index = -1) or to one listed",)) from None
        if choice.warning:
            self._warn(choice.warning)
        if choice.index is not None:
            self.device = torch.device("cuda", choice.index)
            torch.cuda.set_device(self.device)
        if self.device.type == "cpu":
            # one core left to the GUI; several processes share the rest
            torch.set_num_threads(max(1, ((os.cpu_count() or 2) - 1) // acc.num_processes))
        set_seed(cfg.schedule.seed)
        self.precision = cfg.precision.training
        self.dtype = COMPUTE_DTYPES[self.precision]
        self._status("loading the base model")
        if acc.num_processes > 1 and str(cfg.model.base).strip() == "demo":
            # the demo model and images are built on first use: by the main process, then the others read them
            with acc.main_process_first():
                ensure_demo_model()
                if not cfg.dataset.folders:
                    ensure_demo_dataset()
        m = load_base_model(cfg.model, progress=self._download_progress)
        self.model = m
        self._stop_if_asked("loading the base model", every_process=True)
        self.dataset = self._build_dataset(m)
        self.class_dataset = self._build_class_dataset()
        self.validation_dataset = self._build_validation_dataset()
        if self.recipe.zero_terminal_snr:
            RC.rescale_zero_terminal_snr(m.noise_scheduler)
            if m.prediction_type != "v_prediction":
                self._warn("zero terminal SNR is meant for v-prediction models; this model predicts epsilon")

        # DESIGN §4: frozen weights in the compute dtype. Under fp16 the VAE may stay fp32: SDXL's VAE
        # overflows in fp16, and CPUs have no fast fp16 convolutions (a 64 px demo step is 10x slower).
        vae_fp32 = self.precision == "fp16" and (m.family == "sdxl" or self.device.type == "cpu")
        vae_dtype = torch.float32 if vae_fp32 else self.dtype
        # torch's Module.to: diffusers' override warns about an empty list of fp32 modules on every cast
        torch.nn.Module.to(m.unet, self.device, self.dtype)
        torch.nn.Module.to(m.vae, self.device, vae_dtype)
        for te in m.text_encoders:
            te.to(self.device, dtype=self.dtype)

        n = cfg.network
        L.inject_unet_lora(m.unet, n.rank, n.alpha, n.dropout, n.target_modules)
        self.train_te = bool(n.train_text_encoder)
        if self.train_te:
            for te in m.text_encoders:
                L.inject_text_encoder_lora(te, n.rank, n.alpha, n.dropout)
        trained = [m.unet, *(m.text_encoders if self.train_te else [])]
        cast_training_params(trained, dtype=torch.float32)  # fp32 master weights for the LoRA
        if cfg.model.init_lora and not cfg.schedule.resume_from:
            left_out: list[str] = []
            tes = m.text_encoders if self.train_te else []
            count = L.load_kohya_lora(expand(cfg.model.init_lora), m.unet, tes, strict=False, skipped=left_out)
            if not count:
                raise L.LoraFormatError(f"{cfg.model.init_lora}: none of its LoRA modules match the layers trained here")
            if left_out:
                self._warn(f"{len(left_out)} modules of {cfg.model.init_lora} are not trained here and were left out")
            self._status(f"continuing from {cfg.model.init_lora} ({count} LoRA modules)")
        if cfg.precision.gradient_checkpointing:
            m.unet.enable_gradient_checkpointing()
            if self.train_te:
                for te in m.text_encoders:
                    enable = getattr(te, "activation_checkpointing_enable", None) or te.gradient_checkpointing_enable
                    enable()
        m.unet.train()
        for te in m.text_encoders:
            te.train(self.train_te)

        self.unet_params = L.lora_parameters(m.unet)
        self.te_params = [p for te in m.text_encoders for p in L.lora_parameters(te)] if self.train_te else []
        self.params = self.unet_params + self.te_params
        groups = param_groups(self.unet_params, self.te_params, cfg.optimizer.lr, cfg.optimizer.text_encoder_lr)
        self.optimizer, self.optimizer_name = build_optimizer(cfg.optimizer, groups, warn=self._warn)

        self._pos_buckets = [self.dataset.bucket_of(i) for i in range(len(self.dataset))]
        self.batches_per_epoch = len(self._epoch_batches(0))
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / cfg.schedule.gradient_accumulation)
        s = cfg.schedule
        self.total_steps = s.max_steps if s.max_steps > 0 else s.epochs * self.steps_per_epoch
        self.lr_scheduler = build_lr_scheduler(s, self.optimizer, self.total_steps, warn=self._warn)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        ddp = acc.num_processes > 1
        self.unet = acc.prepare_model(m.unet) if ddp else m.unet
        self.text_encoders = [acc.prepare_model(te) if ddp and self.train_te else te for te in m.text_encoders]

        self._parked: list[torch.nn.Module] = []  # frozen modules moved to the CPU after caching
        self.latents: dict[tuple[int, bool], torch.Tensor] = {}  # (item, flipped) -> cached latent
        self.class_latents: dict[tuple[int, bool], torch.Tensor] = {}  # the same for class images
        self.latent_store: LatentCache | None = None
        if cfg.precision.cache_latents:
            self._cache_latents()
        self._stop_if_asked("setting up", every_process=True)
        self._prune_caches()
        self.text_store: TextCache | None = None
        self._text_mem: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.cache_text = bool(cfg.precision.cache_text_encoder_outputs and not self.train_te)
        if self.cache_text and cfg.dataset.shuffle_captions:
            self.cache_text = False
            self._status("text embeddings are not cached: shuffled captions differ on every step")
        if self.cache_text:
            self._cache_text()
            self._stop_if_asked("caching text embeddings", every_process=True)

        if cfg.schedule.resume_from:
            self._load_state(expand(cfg.schedule.resume_from))
            if acc.num_processes > 1:  # the state holds the main process's RNG: each process draws its own
                set_seed(cfg.schedule.seed + self.progress.global_step, device_specific=True)
        else:
            set_seed(cfg.schedule.seed, device_specific=True)  # the noise sequence starts here, whatever set-up used
        if cfg.sampling.every_n_steps and not any(p.strip() for p in cfg.sampling.prompts):
            self._warn("sampling is on but no sample prompts are set; no samples will be made")

    def _build_dataset(self, m: LoadedModel) -> D.TrainDataset:
        dcfg = self.config.dataset
        if not dcfg.folders and self.config.model.base == "demo":
            import copy

            dcfg = copy.copy(dcfg)
            dcfg.folders = [DatasetFolder(path=str(ensure_demo_dataset()), repeats=1)]
            self._status(f"using the built-in demo dataset in {dcfg.folders[0].path}")
        items = D.collect_items(dcfg, warn=self._warn)
        items, self._held_out = V.split_items(items, self.config.validation.split, self.config.validation.seed)
        ds = D.TrainDataset(items, dcfg)
        self._status(f"{len(items)} images, {len(ds)} per epoch with repeats")
        return ds

    def _build_class_dataset(self) -> D.TrainDataset | None:
        """The class (regularization) images, or None without ``dataset.regularization_folders``.

        Each folder keeps its repeats; a class image's caption is its own, else ``dataset.class_prompt``
        (:func:`~guitrainer.core.regularization.class_caption`), never with the trigger word, and never
        shuffled or dropped. Buckets and flips follow the training settings.
        """
        dcfg = self.config.dataset
        if not dcfg.regularization_folders:
            return None
        ccfg = copy.copy(dcfg)
        ccfg.folders = list(dcfg.regularization_folders)
        ccfg.trigger_word, ccfg.shuffle_captions, ccfg.caption_dropout = "", False, 0.0
        found = D.collect_items(ccfg, warn=self._warn, what="class (regularization) images")
        items = [dataclasses.replace(i, caption=R.class_caption(i.caption, dcfg.class_prompt)) for i in found]
        if not all(it.caption for it in items):
            self._warn(
                "some class images have no caption and no class prompt is set: they train with an empty caption"
            )
        cds = D.TrainDataset(items, ccfg)
        self._train_counts = [(i, max(1, it.repeats)) for i, it in enumerate(self.dataset.items)]
        self._class_counts = [(i, max(1, it.repeats)) for i, it in enumerate(items)]
        usage = R.class_usage(self._train_counts, self._class_counts)
        self._status(f"{len(items)} class images, prior loss weight {dcfg.prior_loss_weight:g}. " + usage.describe())
        return cds

    def _build_validation_dataset(self) -> D.TrainDataset | None:
        """The validation images: the share held out of the training images, or ``validation.folder``."""
        vcfg, dcfg = self.config.validation, self.config.dataset
        items = self._held_out
        if vcfg.folder.strip():
            fcfg = copy.copy(dcfg)
            fcfg.folders, fcfg.exclude = [DatasetFolder(path=vcfg.folder, repeats=1)], []
            items = D.collect_items(fcfg, warn=self._warn, what="validation images")
        if not items:
            if vcfg.split > 0:
                self._warn("the validation share holds out no image (one image only?); no validation loss")
            return None
        vds_cfg = copy.copy(dcfg)
        vds_cfg.shuffle_captions, vds_cfg.caption_dropout, vds_cfg.flip_augment = False, 0.0, False
        vds = D.TrainDataset([dataclasses.replace(i, repeats=1) for i in items], vds_cfg)
        self._status(f"{len(items)} validation images, scored every {vcfg.every_n_steps} steps")
        return vds

    def validation_loss(self) -> float | None:
        """The loss of the validation images at fixed timesteps and noise (None without validation images).

        Two calls with the same weights give the same number (:mod:`guitrainer.engine.validation`); no
        RNG stream of the training changes. A schedule-free optimizer is scored at its averaged weights.
        """
        vds = self.validation_dataset
        if vds is None or self.model is None:
            return None
        r = self.recipe
        plan = V.make_plan(vds.buckets, self.config.schedule.batch_size, r.min_timestep, r.max_timestep, self.config.validation.seed)

        def batch_loss(indices: Any, timesteps: torch.Tensor) -> torch.Tensor:
            samples = [vds.item_sample(i, False, vds.fixed_caption(i), with_pixels=not self.validation_latents) for i in indices]
            batch = D.collate(samples)
            batch["latents"] = self._latents(batch, self.validation_latents)
            with self._autocast():
                return self._forward_loss(batch, timesteps)

        unet = self.model.unet
        with averaged_weights(self.optimizer):
            unet.eval()  # no LoRA dropout while scoring
            try:
                return V.score(plan, batch_loss, self.device)
            finally:
                unet.train()

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        """This process's batches of ``epoch`` (each within one bucket), fixed by (seed, epoch)."""
        acc, s = self.accelerator, self.config.schedule
        return D.epoch_batches(self._pos_buckets, s.seed, epoch, s.batch_size, acc.num_processes, acc.process_index)

    def class_plan(self, epoch: int) -> R.EpochPlan | None:
        """The class draws of ``epoch`` (:func:`~guitrainer.core.regularization.epoch_schedule`, kohya's
        counts, shuffled by (seed, epoch)); item ids are indices into ``class_dataset.items``."""
        if self.class_dataset is None:
            return None
        return R.epoch_schedule(self._train_counts, self._class_counts, epoch, self.config.schedule.seed)

    def _epoch_pairs(self, epoch: int) -> list[Pair]:
        """This process's micro-batches of ``epoch``: (instance batch, class draws of the same size).

        The instance batches are exactly :meth:`_epoch_batches` (so class images never change the
        training-image stream). The class draws of the whole epoch (:meth:`class_plan`, in its shuffled
        order) are dealt to the batches of all processes in turn, then batches and their class draws are
        sharded together, as the training draws alone would be.
        """
        s, acc = self.config.schedule, self.accelerator
        batches = D.epoch_batches(self._pos_buckets, s.seed, epoch, s.batch_size)
        plan = self.class_plan(epoch)
        if plan is None:
            pairs: list[Pair] = [(b, []) for b in batches]
        else:
            draws = iter(plan.classes)
            pairs = [(b, [int(next(draws)) for _ in b]) for b in batches]  # type: ignore[call-overload]
        return D.shard_batches(pairs, acc.num_processes, acc.process_index)

    def _sample(self) -> None:
        """Sample images from ``sampling.prompts`` with the current LoRA; training state is left untouched."""
        if not self._main or self.model is None:
            return
        s, step = self.config.sampling, self.progress.global_step
        prompts = [p for p in s.prompts if p.strip()]
        if not prompts:
            self._status("no sample prompts are set (Sampling settings); no sample images were made")
            return
        self._status(f"making {len(prompts)} sample image{'s' if len(prompts) != 1 else ''} at step {step}")
        moved = self._unpark()
        try:
            with averaged_weights(self.optimizer):  # schedule-free: sample the averaged weights
                samples = S.generate_samples(
                    self.model, s, step=step, out_folder=self._out_dir(), name=self.config.output.name, device=self.device
                )
        except Exception as e:  # noqa: BLE001 - a failed sample must not end the training run
            log.exception("sampling failed")
            self._warn(f"sample images at step {step} failed: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}")
            samples = []
        finally:
            for module in moved:
                self._park(module)
        for sample in samples:
            self.reporter.on_sample(sample)

    def _download_progress(self, what: str, done: int, total: int) -> None:
        """Hub downloads: one status line per file (the bar counts files)."""
        if total:
            self._status(f"downloading the base model: {what} {done}/{total}")

    def _cache_folder(self, kind: str) -> Path | None:
        from guitrainer.core.paths import cache_dir

        assert self.model is not None
        if not self.config.precision.cache_to_disk:
            return None  # memory only: nothing written
        return cache_dir() / kind / self.model.identity if self.model.identity else None

    def _prune_caches(self) -> None:
        """Keep the disk caches under budget, least recently used first; never what this run uses."""
        if not self._main:
            return
        from guitrainer.core import cache_store

        try:
            cache_store.prune(cache_store.DEFAULT_BUDGET_BYTES, keep_since=self._setup_started)
        except OSError as e:  # a cache that cannot be tidied never stops training
            log.warning("cache pruning failed: %s", e)

    def _park(self, module: torch.nn.Module) -> None:
        """Move a frozen module off the GPU once its outputs are cached (sampling brings it back)."""
        if self.device.type == "cuda":
            module.to("cpu")
            self._parked.append(module)
            torch.cuda.empty_cache()

    def _unpark(self) -> list[torch.nn.Module]:
        moved, self._parked = self._parked, []
        for module in moved:
            module.to(self.device)
        return moved

    def _cache_latents(self) -> None:
        """Encode every image variant once (memory + disk cache); the VAE then leaves the GPU.

        The latent is ``mean + std * eps`` with ``eps`` from a generator seeded by the image variant
        (:meth:`LatentCache.noise_seed`: file name, crop, flip), so an entry does not depend on which other
        images were cached or where the dataset lives, and no global RNG is used. Class images
        are cached the same way (into ``class_latents``), in the same store.
        """
        assert self.model is not None
        vae = self.model.vae
        store = LatentCache(self._cache_folder("latents"), self.model.identity or "anonymous", vae.dtype, self.dtype)
        self.latent_store = store
        flips = (False, True) if self.config.dataset.flip_augment else (False,)
        jobs = [(self.dataset, self.latents)]
        if self.class_dataset is not None:
            jobs.append((self.class_dataset, self.class_latents))
        if self.validation_dataset is not None:
            jobs.append((self.validation_dataset, self.validation_latents))
        todo: list[tuple[D.TrainDataset, dict[tuple[int, bool], torch.Tensor], int, bool, str]] = []
        reused = 0
        for ds, target in jobs:
            for idx, item in enumerate(ds.items):
                for flip in flips:
                    key = store.key(item.image, ds.geometry(idx), flip)
                    hit = store.get(key)
                    if hit is None:
                        todo.append((ds, target, idx, flip, key))
                    else:
                        target[(idx, flip)] = hit["latent"].to(self.device)
                        reused += 1
        self._status(f"caching latents: {len(todo)} to encode, {reused} reused")
        t0 = time.perf_counter()
        with torch.no_grad():
            for n, (ds, target, idx, flip, key) in enumerate(todo, 1):
                self._stop_if_asked(f"caching latents ({n - 1} of {len(todo)} encoded and kept for the next run)")
                px = ds.pixels(idx, flip).unsqueeze(0).to(self.device, vae.dtype)
                dist = vae.encode(px).latent_dist
                g = torch.Generator(device="cpu").manual_seed(store.noise_seed(ds.items[idx].image, ds.geometry(idx), flip))
                eps = torch.randn(dist.mean.shape, generator=g).to(self.device, dist.mean.dtype)
                lat = ((dist.mean + dist.std * eps) * vae.config.scaling_factor)[0].to(self.dtype)
                store.put(key, {"latent": lat})
                target[(idx, flip)] = lat
                if n % 50 == 0 and n < len(todo):
                    self._status(f"caching latents: {n}/{len(todo)}")
        if todo:
            dt = time.perf_counter() - t0
            log.info("cached %d latents in %.1f s (%.3f s each)", len(todo), dt, dt / len(todo))
        for ds, _ in jobs:
            ds._pixel_cache.clear()  # the pixels are not needed any more
        self._park(vae)

    def _cache_text(self) -> None:
        """Encode every caption once (frozen text encoders); the encoders then leave the GPU."""
        assert self.model is not None
        self.text_store = TextCache(self._cache_folder("text"), self.model.identity or "anonymous", self.model.family, self.dtype)
        ds = self.dataset
        captions = dict.fromkeys(ds.fixed_caption(i) for i in range(len(ds.items)))
        if self.config.dataset.caption_dropout > 0:
            captions[""] = None
        for extra in (self.class_dataset, self.validation_dataset):
            if extra is not None:
                captions.update(dict.fromkeys(extra.fixed_caption(i) for i in range(len(extra.items))))
        self._status(f"caching text embeddings of {len(captions)} captions")
        for n, c in enumerate(captions):
            self._stop_if_asked(f"caching text embeddings ({n} of {len(captions)} encoded)")
            self._text_entry(c)
        for te in self.model.text_encoders:
            self._park(te)

    def _text_entry(self, caption: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A caption's (hidden states, pooled embedding) from the text cache, encoding it on a miss."""
        entry = self._text_mem.get(caption)
        if entry is not None:
            return entry
        assert self.text_store is not None
        key = self.text_store.key(caption)
        value = self.text_store.get(key)
        if value is None:
            self._unpark()
            with torch.no_grad():
                h, pooled = self._encode_text_uncached([caption])
            value = {"hidden": h[0]} if pooled is None else {"hidden": h[0], "pooled": pooled[0]}
            self.text_store.put(key, value)
        hidden = value["hidden"].to(self.device, self.dtype)
        pooled_t = value["pooled"].to(self.device, self.dtype) if "pooled" in value else None
        self._text_mem[caption] = (hidden, pooled_t)
        return hidden, pooled_t

    # ------------------------------------------------------------------ loss
    def _encode_text(self, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encoder hidden states and (SDXL) pooled text embeddings for a batch of captions."""
        if self.text_store is not None:
            entries = [self._text_entry(c) for c in captions]
            hidden = torch.stack([e[0] for e in entries])
            pooled = [e[1] for e in entries]
            return hidden, (torch.stack(pooled) if pooled[0] is not None else None)  # type: ignore[arg-type]
        with contextlib.nullcontext() if self.train_te else torch.no_grad():
            return self._encode_text_uncached(captions)

    def _encode_text_uncached(self, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert self.model is not None
        m = self.model
        ids = [
            tok(captions, padding="max_length", max_length=tok.model_max_length, truncation=True, return_tensors="pt")
            .input_ids.to(self.device)
            for tok in m.tokenizers
        ]
        if len(m.text_encoders) == 1:
            return self.text_encoders[0](ids[0])[0], None
        # SDXL: both encoders' penultimate hidden states side by side; the pooled embedding of the second
        hidden, pooled = [], None
        for te, i in zip(self.text_encoders, ids):
            out = te(i, output_hidden_states=True)
            hidden.append(out.hidden_states[-2])
            pooled = getattr(out, "text_embeds", None)
        return torch.cat(hidden, dim=-1), pooled

    def _added_cond(self, pooled: torch.Tensor | None, batch: dict[str, Any], dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
        """SDXL's added conditioning: pooled text embedding + add_time_ids (original size, crop, target)."""
        if pooled is None:
            return None
        time_ids = batch.get("time_ids")
        if time_ids is None:  # no geometry known: the square training resolution, uncropped
            res = self.config.dataset.resolution
            time_ids = torch.tensor([[res, res, 0, 0, res, res]], dtype=torch.float32).repeat(pooled.shape[0], 1)
        return {"text_embeds": pooled, "time_ids": time_ids.to(self.device, dtype)}

    def _latents(
        self, batch: dict[str, Any], cached: dict[tuple[int, bool], torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The batch's latents: from ``cached`` (default: the training images' cache) or the VAE."""
        assert self.model is not None
        cached = self.latents if cached is None else cached
        if cached:
            flips = batch.get("flips") or [False] * len(batch["indices"])
            return torch.stack([cached[(i, f)] for i, f in zip(batch["indices"], flips)])
        vae = self.model.vae
        with torch.no_grad():
            px = batch["pixels"].to(self.device, vae.dtype)
            lat = vae.encode(px).latent_dist.sample() * vae.config.scaling_factor
        return lat.to(self.dtype)

    def _forward_loss(self, batch: dict[str, Any], timesteps: torch.Tensor | None = None) -> torch.Tensor:
        """The loss of one micro-batch (epsilon, or v with a v-prediction scheduler). Runs under autocast.

        Plain MSE on uniform timesteps by default; ``loss`` and ``noise`` settings (min-SNR-γ, Huber,
        noise offset, ...) as :mod:`guitrainer.engine.recipes` computes them. ``timesteps`` fixed: validation.
        """
        assert self.model is not None
        sched = self.model.noise_scheduler
        latents = batch["latents"]
        noise, t, noisy = RC.noise_and_timesteps(self.recipe, sched, latents, timesteps)
        hidden, pooled = self._encode_text(batch["captions"])
        added = self._added_cond(pooled, batch, hidden.dtype)
        pred = self.unet(noisy, t, hidden, added_cond_kwargs=added).sample
        v_pred = self.model.prediction_type == "v_prediction"
        target = sched.get_velocity(latents, noise, t) if v_pred else noise
        return RC.diffusion_loss(self.recipe, pred, target, t, sched, v_pred)

    def evaluation_loss(self, seed: int = 0, adapters: bool = True, repeats: int = 4) -> float:
        """Mean loss over every image ``repeats`` times with noise and timesteps fixed by ``seed``.

        Leaves every RNG as it was. ``adapters=False`` measures the base model (the LoRA switched off).
        Call after :meth:`run` (the trained model is kept).
        """
        assert self.model is not None, "run() first"
        unet = self.model.unet
        devices = [self.device] if self.device.type == "cuda" else []
        losses: list[float] = []
        with torch.random.fork_rng(devices=devices), torch.no_grad(), averaged_weights(self.optimizer):
            torch.manual_seed(seed)
            unet.eval()  # no LoRA dropout while measuring
            if not adapters:
                unet.disable_adapters()
            try:
                ds = self.dataset
                groups: dict[tuple[int, int], list[int]] = {}
                for i in list(range(len(ds.items))) * repeats:
                    groups.setdefault(ds.buckets[i], []).append(i)
                for b in (b for g in groups.values() for b in D.batches_of(g, self.config.schedule.batch_size)):
                    samples = [ds.item_sample(i, False, ds.fixed_caption(i), with_pixels=not self.latents) for i in b]
                    batch = D.collate(samples)
                    batch["latents"] = self._latents(batch)
                    with self._autocast():
                        losses.append(float(self._forward_loss(batch)))
            finally:
                unet.train()
                if not adapters:
                    unet.enable_adapters()
        return sum(losses) / len(losses)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    # ------------------------------------------------------------------ one optimizer step
    def _no_sync_unless(self, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """DDP: gradients are all-reduced only on the step's last backward pass."""
        if sync or self.accelerator.num_processes == 1:
            return contextlib.nullcontext()
        return self.accelerator.no_sync(self.unet)

    def _backward(self, loss: torch.Tensor) -> None:
        """Backward of ``loss``, scaled by the GradScaler under fp16 (every pass of a step: one scaler)."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def _class_seed(self, micro_index: int) -> int:
        """The class half's RNG seed: fixed by (seed, epoch, step, micro-batch, process), so a resumed run
        draws the same class noise, and the instance stream never sees the class half's draws."""
        p = self.progress
        seed, rank = self.config.schedule.seed, self.accelerator.process_index
        key = f"guitrainer-class:{seed}:{p.epoch}:{p.global_step}:{micro_index}:{rank}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & (2**63 - 1)

    def _class_half(self, items: list[int], micro_index: int, micro_count: int, sync: bool) -> torch.Tensor:
        """Forward/backward of one micro-batch's class draws; returns their (unweighted) mean loss, detached.

        Why a second pass rather than one batch of instance + class images (as diffusers' DreamBooth
        script concatenates them): activation memory stays that of one half, so the VRAM estimate of a
        batch holds with class images too; compute doubles either way. The class images may also lie
        in other aspect buckets than the instance batch: they are grouped by bucket, and each group's
        loss is weighted by its share of the half, so the class loss is the mean over its images.

        The gradients add to the instance half's: ``prior_loss_weight x share / micro_count`` each. All
        random draws (noise, timesteps, LoRA dropout, VAE sampling, flips) come from generators seeded
        by :meth:`_class_seed` inside ``fork_rng``: the global streams continue exactly as without class
        images, so weight 0 trains bit for bit like no regularization, and stop/resume stays exact.
        """
        cds = self.class_dataset
        assert cds is not None
        weight = float(self.config.dataset.prior_loss_weight)
        groups: dict[tuple[int, int], list[int]] = {}
        for i in items:
            groups.setdefault(tuple(cds.buckets[i]), []).append(i)  # type: ignore[arg-type]
        seed = self._class_seed(micro_index)
        flip_rng = random.Random(seed)
        total = torch.zeros((), dtype=torch.float32, device=self.device)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for k, group in enumerate(groups.values()):
                share = len(group) / len(items)
                flips = [bool(cds.cfg.flip_augment) and flip_rng.random() < 0.5 for _ in group]
                samples = [
                    cds.item_sample(i, f, cds.fixed_caption(i), with_pixels=not self.class_latents)
                    for i, f in zip(group, flips)
                ]
                batch = D.collate(samples)
                batch["latents"] = self._latents(batch, self.class_latents)
                with self._no_sync_unless(sync and k == len(groups) - 1):
                    with self._autocast():
                        loss = self._forward_loss(batch)
                    total += share * loss.detach().float()
                    self._backward(loss * (weight * share / micro_count))
        return total

    def _optimizer_step(self, micro: list[Pair]) -> StepResult:
        """Forward/backward over the micro-batches (instance half, then any class half), then one
        (possibly skipped) update."""
        scaler = self.scaler
        inst_losses: list[torch.Tensor] = []
        class_losses: list[torch.Tensor] = []
        for j, (b, cls) in enumerate(micro):
            last = j == len(micro) - 1
            batch = D.collate([self.dataset.sample(i, with_pixels=not self.latents) for i in b])
            batch["latents"] = self._latents(batch)  # frozen VAE, outside autocast: it runs in its own dtype
            with self._no_sync_unless(last and not cls):
                with self._autocast():
                    loss = self._forward_loss(batch)
                inst_losses.append(loss.detach())
                self._backward(loss / len(micro))
            del loss, batch  # the instance half's activations are gone before the class half runs
            if cls:
                class_losses.append(self._class_half(cls, j, len(micro), sync=last))
        halves = [torch.stack(inst_losses).float().mean()]
        if class_losses:
            halves.append(torch.stack(class_losses).mean())
        losses = torch.stack(halves)
        if self._num_processes > 1:
            # the loss of the whole step (every process's batches), so the curve is the global batch's, and a
            # NaN on one process fails every process at the same step (none is left waiting in a collective)
            losses = self.accelerator.reduce(losses, reduction="mean")
        instance_value = float(losses[0].item())
        class_value = float(losses[1].item()) if class_losses else None
        loss_value = R.combined_loss(instance_value, class_value, self.config.dataset.prior_loss_weight)
        if not math.isfinite(loss_value) and scaler is None:
            raise TrainingFailed(
                f"loss became NaN at step {self.progress.global_step + 1} ({self.precision}); training stopped. "
                "The last saved LoRA and training state were kept unchanged.",
                (
                    "lower the learning rate (e.g. by 10x)",
                    "keep gradient clipping on (max grad norm 1.0)",
                    "use fp32 to rule out a precision problem",
                    "check the dataset for broken images",
                ),
            )
        if scaler is not None:
            scaler.unscale_(self.optimizer)  # before clipping: clip the true gradients
        max_norm = self.config.schedule.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm if max_norm > 0 else float("inf"))
        skipped = False
        if scaler is not None:
            before = scaler.get_scale()
            scaler.step(self.optimizer)
            scaler.update()
            skipped = scaler.get_scale() < before
        else:
            self.optimizer.step()
        if not skipped:  # like accelerate: a skipped update does not advance the schedule
            self.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        norm_value = float(norm.item())
        finite_norm = norm_value if math.isfinite(norm_value) else None
        instance = instance_value if class_losses else None  # reported beside the total with class images
        return StepResult(loss_value, instance, class_value, finite_norm, skipped)

    # ------------------------------------------------------------------ loop
    def _run(self) -> RunSummary:
        self._setup()
        cfg, p = self.config, self.progress
        ga = cfg.schedule.gradient_accumulation
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.started_at = datetime.now(UTC)
        self._status(f"training {self.total_steps} steps ({self.precision}, {self.optimizer_name}) on {self.device}")
        if self._num_processes > 1:
            share = [b for b, _cls in self._epoch_pairs(p.epoch)]
            shown = ", ".join(str(b) for b in share[:8]) + (", ..." if len(share) > 8 else "")
            self._log_process(f"{len(share)} batches of each epoch; epoch {p.epoch + 1}: {shown}")
        batches: list[Pair] = []
        batches_epoch = -1
        while p.global_step < self.total_steps:
            if batches_epoch != p.epoch:
                batches, batches_epoch = self._epoch_pairs(p.epoch), p.epoch
            micro = batches[p.batch_pos : p.batch_pos + ga]
            t0 = time.perf_counter()
            result = self._optimizer_step(micro)
            dt = time.perf_counter() - t0
            skipped = result.skipped
            p.global_step += 1
            p.batch_pos += len(micro)
            p.last_loss = result.loss if math.isfinite(result.loss) else p.last_loss
            p.skipped_total += int(skipped)
            p.consecutive_skips = p.consecutive_skips + 1 if skipped else 0
            # every image through the UNet this step: training images and class images, on all processes
            images = sum(len(inst) + len(cls) for inst, cls in micro) * self.accelerator.num_processes
            v_every = cfg.validation.every_n_steps
            validation = self.validation_loss() if self.validation_dataset and p.global_step % v_every == 0 else None
            self._report(result, dt, images, validation)
            every = cfg.sampling.every_n_steps
            if every and p.global_step % every == 0:
                self._sample()
            if p.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
                raise TrainingFailed(
                    f"fp16 overflow: {p.consecutive_skips} steps in a row had inf/NaN gradients and were skipped "
                    f"(step {p.global_step}); training stopped. The last saved LoRA and state were kept unchanged.",
                    ("switch to bf16 AMP if your GPU supports it", "lower the learning rate", "use fp32"),
                )
            if p.batch_pos >= len(batches):
                p.epoch += 1
                p.batch_pos = 0
                n = cfg.output.save_every_n_epochs
                if n and p.epoch % n == 0 and p.global_step < self.total_steps:
                    self._save_intermediate(f"{p.epoch:06d}")
            outcome = self._poll_control()
            if outcome is not None:
                return self._process_done(outcome)
        self._status("training finished")
        self._save_final_and_state()
        return self._process_done(self._summary("finished", f"trained {p.global_step} steps"))

    def _log_process(self, text: str) -> None:
        """Several processes: one log line of this process (every process logs its own)."""
        acc = self.accelerator
        log.info("process %d of %d (pid %d): %s", acc.process_index, acc.num_processes, os.getpid(), text)

    def _process_done(self, summary: RunSummary) -> RunSummary:
        """Several processes: log how this one ended, with a fingerprint of its LoRA weights (DDP keeps
        them equal on every process, so the main process's saved LoRA is everyone's)."""
        if self._num_processes > 1:
            digest = hashlib.sha256()
            for name, t in sorted(self._trainable_state().items()):
                digest.update(name.encode())
                digest.update(t.float().numpy().tobytes())
            weights = digest.hexdigest()[:16]
            self._log_process(f"{summary.status} at step {summary.steps}; LoRA weights {weights}")
        return summary

    def _report(self, r: StepResult, dt: float, images: int, validation_loss: float | None = None) -> None:
        """One StepMetrics: ``loss`` is the total; ``instance_loss``, ``class_loss`` with class images only."""
        if not self._main:
            return
        p = self.progress
        peak = int(torch.cuda.max_memory_allocated(self.device)) if self.device.type == "cuda" else None
        self.reporter.on_step(
            StepMetrics(
                step=p.global_step,
                total_steps=self.total_steps,
                epoch=p.epoch + 1,
                loss=r.loss,
                lr=float(self.optimizer.param_groups[0]["lr"]),
                grad_scale=float(self.scaler.get_scale()) if self.scaler is not None else None,
                skipped=r.skipped,
                skipped_total=p.skipped_total,
                grad_norm=r.grad_norm,
                seconds_per_step=dt,
                images_per_second=images / dt if dt > 0 else 0.0,
                peak_memory_bytes=peak,
                class_loss=r.class_loss,
                instance_loss=r.instance_loss,
                validation_loss=validation_loss,
            )
        )

    def _take_output_folder(self) -> None:
        """A new output folder chosen during the run (Output page) applies to the saves from now on."""
        folder = self.control.take_output_folder()
        if folder and folder != self.config.output.folder:
            self.config.output.folder = folder
            self._status(f"saving into {expand(folder)} from now on")

    def _take_save_request(self) -> None:
        self._take_output_folder()
        if self.control.take_save_request():
            self._save_intermediate(f"step{self.progress.global_step:06d}")

    def _poll_control(self) -> RunSummary | None:
        c, p = self.control, self.progress
        self._take_save_request()  # Save now: the main process writes, the others have nothing to do
        # several processes: all stop (or pause) at the same step when the main process's Control says so
        stop, paused = self._any_process(c.stop_requested, c.paused)
        if paused and not stop:
            self._status(f"paused at step {p.global_step}")
            while paused and not stop:  # Save now (and a new folder) work while paused
                c.wait_while_paused(0.05, timeout=0.25)
                self._take_save_request()
                stop, paused = self._any_process(c.stop_requested, c.paused)
            if not stop:
                self._status("resumed")
        self._take_output_folder()
        if stop:
            self._status(f"stopping at step {p.global_step}; saving the LoRA and a resumable state")
            self._save_final_and_state()
            if not self._main:
                return self._summary("stopped", f"stopped at step {p.global_step}; the main process saves")
            return self._summary("stopped", f"stopped at step {p.global_step}; resume from {self.state_path}")
        if c.take_sample_request():  # after a pause: a sample asked for while paused is made on resume
            self._sample()
        return None

    # ------------------------------------------------------------------ saving
    def _out_dir(self) -> Path:
        return expand(self.config.output.folder)

    def _metadata(self) -> dict[str, str]:
        """kohya ``ss_*`` + ``modelspec.*`` metadata of the LoRA as it is now (see :func:`export.build_metadata`)."""
        from guitrainer.engine.export import build_metadata

        assert self.model is not None
        cfg, p = self.config, self.progress
        tags: dict[str, Counter[str]] = {}
        for it in self.dataset.items:
            folder = tags.setdefault(Path(it.image).parent.name or "dataset", Counter())
            folder.update(t.strip() for t in it.caption.split(",") if t.strip())
        spe = max(1, getattr(self, "steps_per_epoch", 1))
        epochs = cfg.schedule.epochs if cfg.schedule.max_steps <= 0 else math.ceil(self.total_steps / spe)
        return build_metadata(
            cfg,
            self.model.family,
            num_images=len(self.dataset),
            num_reg_images=len(self.class_dataset) if self.class_dataset is not None else 0,
            epochs=epochs,
            epoch=p.epoch,
            steps=p.global_step,
            started=self.started_at,
            finished=datetime.now(UTC),
            tag_frequency={k: dict(v) for k, v in tags.items()},
            optimizer_name=self.optimizer_name,
        )

    def _write_lora(self, path: Path) -> str | None:
        """Export the LoRA to ``path`` in the configured format and save precision; returns what was written.

        A failed write (full disk, read-only folder) is reported as a warning and returns None: the trained
        LoRA stays in memory, training goes on, and the next save (e.g. ``Control.request_save()`` after
        ``config.output.folder`` was changed) tries again. An fp16 overflow is reported with the advice and
        that file is written as bf16 instead.
        """
        from guitrainer.engine.export import export_lora, saved_item

        assert self.model is not None
        tes = self.model.text_encoders if self.train_te else []
        o = self.config.output
        try:
            with averaged_weights(self.optimizer):  # schedule-free: the averaged weights are the LoRA
                result = export_lora(
                    path,
                    self.model.unet,
                    tes,
                    fmt=o.format,
                    save_precision=self.config.precision.save,
                    alpha=self.config.network.alpha,
                    metadata=self._metadata(),
                    on_fp16_overflow="bf16",
                )
        except OSError as e:
            err = explain_write_error(path, e)
            self.save_error = err.strerror or str(err)
            self._warn(
                f"The LoRA was not saved: {self.save_error} The trained LoRA is kept in memory: "
                "choose another output folder and press Save now."
            )
            return None
        self.save_error = None
        for w in result.warnings:
            self._warn(w)
        return str(saved_item(path, o.format))

    def _lora_target(self, tag: str = "") -> Path:
        """The next free path for a LoRA (numbered unless ``output.overwrite``)."""
        from guitrainer.engine.export import lora_path

        o = self.config.output
        path = lora_path(o, tag)
        if o.overwrite:
            return path
        if o.format == "diffusers":  # the folder is what the user sees and what gets numbered
            return numbered_path(path.parent) / path.name
        return numbered_path(path)

    def _save_final(self) -> str | None:
        if not self._main:
            return None
        out = self._write_lora(self._lora_target())
        if out is not None:
            self.reporter.on_saved(SavedFile(out, "lora", self.progress.global_step, self.progress.epoch))
        return out

    def _save_final_and_state(self) -> None:
        """The end of a run or a stop: the final LoRA, then the resumable state.

        Raises :class:`WriteError` when either could not be written (the state is still tried when the
        LoRA failed, so that a resume can finish the job); :meth:`run` turns it into a "failed" summary.
        """
        self.lora_path = self._save_final()
        lora_error = self.save_error if self._main and self.lora_path is None else None
        if lora_error:
            self._rescue(lora_error)  # raises: the run ends "failed", saying where the LoRA went
        self.state_path = self._save_state()

    def _rescue(self, reason: str) -> None:
        """The final LoRA could not be written: save it and the state in the app's data folder instead.

        Nothing trained is lost to a full disk or a read-only folder when another disk has room: the
        LoRA lands in ``<user data>/rescued/<name>-<time>``, and the message says so. Always raises
        :class:`WriteError` (the run still failed to save where asked).
        """
        from guitrainer.core.paths import user_data_dir

        wanted = self._out_dir()
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        rescue = user_data_dir() / "rescued" / f"{self.config.output.name}-{stamp}"
        self.config.output.folder = str(rescue)
        self._warn(f"The LoRA was not saved in {wanted}: {reason} Saving it in {rescue} instead.")
        self.lora_path = self._save_final()
        if self.lora_path is None:
            raise WriteError(
                errno.EIO,
                f"The LoRA could not be saved in {wanted} ({reason}) nor in {rescue} ({self.save_error}). "
                "The trained weights are lost; free some disk space and train again.",
            )
        try:
            self.state_path = self._save_state()
        except WriteError as e:
            self._warn(f"The training state was not saved in {rescue} either: {e.strerror or e}")
        raise WriteError(
            errno.EIO,
            f"The LoRA could not be saved in {wanted}: {reason} It was saved in {rescue} instead "
            f"({Path(self.lora_path).name}); move it where you want it.",
        )

    def _save_intermediate(self, tag: str) -> None:
        if not self._main:
            return
        o = self.config.output
        out = self._write_lora(self._lora_target(tag))
        if out is None:
            return  # reported; the state would go to the same folder and fail the same way
        self._intermediates.append(out)
        self.reporter.on_saved(SavedFile(out, "lora", self.progress.global_step, self.progress.epoch))
        if o.keep_last:
            while len(self._intermediates) > o.keep_last:
                old = Path(self._intermediates.pop(0))
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        old.unlink()
        try:
            self._save_state()
        except WriteError as e:
            self._warn(f"The training state was not saved: {e.strerror or e}")

    def state_dir(self) -> Path:
        """``<output.folder>/<output.name>_state``: where the resumable state is written."""
        return self._out_dir() / f"{self.config.output.name}_state"

    def _trainable_state(self) -> dict[str, torch.Tensor]:
        assert self.model is not None
        out = {f"unet.{n}": p.detach().cpu() for n, p in self.model.unet.named_parameters() if p.requires_grad}
        if self.train_te:
            for i, te in enumerate(self.model.text_encoders):
                out.update({f"te{i}.{n}": p.detach().cpu() for n, p in te.named_parameters() if p.requires_grad})
        return {k: v.contiguous() for k, v in out.items()}

    def _save_state(self) -> str | None:
        """Write the resumable state into a temp folder, then rename it over the state folder.

        Any failure to write is raised as a :class:`WriteError` whose message says why in plain words.
        """
        if not self._main:
            return None
        target = self.state_dir()
        try:
            self._write_state(target)
        except OSError as e:
            raise explain_write_error(target, e) from e
        p = self.progress
        self.reporter.on_saved(SavedFile(str(target), "state", p.global_step, p.epoch))
        return str(target)

    def _write_state(self, target: Path) -> None:
        from safetensors.torch import save_file

        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        p = self.progress
        try:
            weights = self._trainable_state()
            atomic_write_with(tmp / "lora_params.safetensors", lambda f: save_file(weights, str(f)))
            atomic_write_with(tmp / "optimizer.pt", lambda f: torch.save(self.optimizer.state_dict(), f))
            atomic_write_with(tmp / "lr_scheduler.pt", lambda f: torch.save(self.lr_scheduler.state_dict(), f))
            if self.scaler is not None:
                atomic_write_with(tmp / "scaler.pt", lambda f: torch.save(self.scaler.state_dict(), f))
            atomic_write_with(tmp / "rng.pt", lambda f: torch.save(_rng_state(), f))
            info = {
                "version": STATE_VERSION,
                "global_step": p.global_step,
                "epoch": p.epoch,
                "batch_pos": p.batch_pos,
                "skipped_total": p.skipped_total,
                "last_loss": p.last_loss,
                "total_steps": self.total_steps,
                "dataset_len": len(self.dataset),
                "class_dataset_len": len(self.class_dataset) if self.class_dataset is not None else 0,
                "intermediates": self._intermediates,
                "config": self.config.to_dict(),
            }
            atomic_write_bytes(tmp / STATE_FILE, json.dumps(info, indent=2).encode("utf-8"))
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            if target.exists():
                os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _load_state(self, folder: Path) -> None:
        from safetensors.torch import load_file

        info_file = folder / STATE_FILE
        if not info_file.is_file():
            raise TrainingFailed(f"{folder} is not a training state folder (no {STATE_FILE})", ("pick the <name>_state folder",))
        info = json.loads(info_file.read_text(encoding="utf-8"))
        saved = TrainingConfig.from_dict(info["config"]) if "config" in info else None
        if saved is not None:
            for key in _RESUME_MUST_MATCH:
                if saved.get(key) != self.config.get(key):
                    raise TrainingFailed(
                        f"cannot resume: `{key}` was {saved.get(key)!r} in the saved state and is {self.config.get(key)!r} now",
                        (f"set `{key}` back to {saved.get(key)!r}",),
                    )
        class_len = len(self.class_dataset) if self.class_dataset is not None else 0
        if info.get("dataset_len") != len(self.dataset) or info.get("class_dataset_len", 0) != class_len:
            self._warn("the dataset changed since the state was saved; the data order will differ from an unbroken run")
        assert self.model is not None
        weights = load_file(str(folder / "lora_params.safetensors"))
        named = {f"unet.{n}": p for n, p in self.model.unet.named_parameters() if p.requires_grad}
        if self.train_te:
            for i, te in enumerate(self.model.text_encoders):
                named.update({f"te{i}.{n}": p for n, p in te.named_parameters() if p.requires_grad})
        if set(named) != set(weights):
            raise TrainingFailed(f"{folder}: the saved LoRA does not match this network", ("check rank and layers trained",))
        with torch.no_grad():
            for k, prm in named.items():
                prm.copy_(weights[k].to(prm.device, prm.dtype))
        self.optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location=self.device, weights_only=True))
        self.lr_scheduler.load_state_dict(torch.load(folder / "lr_scheduler.pt", weights_only=True))
        if self.scaler is not None and (folder / "scaler.pt").is_file():
            self.scaler.load_state_dict(torch.load(folder / "scaler.pt", weights_only=True))
        _set_rng_state(torch.load(folder / "rng.pt", weights_only=True))
        p = self.progress
        p.global_step, p.epoch, p.batch_pos = int(info["global_step"]), int(info["epoch"]), int(info["batch_pos"])
        p.skipped_total, p.last_loss = int(info.get("skipped_total", 0)), info.get("last_loss")
        self._intermediates = list(info.get("intermediates", []))
        self._status(f"resumed from {folder} at step {p.global_step} (epoch {p.epoch + 1})")


def _launched_processes() -> int:
    """How many processes a launcher started (``WORLD_SIZE`` of torchrun, ``accelerate launch``), else 1."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states, in a form ``torch.load(weights_only=True)`` accepts."""
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(gauss)))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
