"""Building a run: ``build_session(config, feedback) -> Session``, one frozen object with everything a run trains with.

The order is the trainer's contract (DESIGN §4): accelerate and the device first (:func:`place`), then the
base model, the datasets, the frozen weights cast to the compute dtype, LoRA injected with fp32 master
weights, gradient checkpointing, the optimizer, the lr schedule and (fp16 only) the GradScaler. A
:class:`Session` exists only complete: nothing is half-built.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from guitrainer.base.paths import expand
from guitrainer.base.units import format_bytes
from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core.dataset import regularization
from guitrainer.engine import data, offload
from guitrainer.engine import validation as val
from guitrainer.engine.distributed import Processes, launched_processes
from guitrainer.engine.errors import TrainingFailed
from guitrainer.engine.families import registry
from guitrainer.engine.feedback import Feedback
from guitrainer.engine.models.demo import ensure_demo_dataset, ensure_demo_model
from guitrainer.engine.models.loading import load_base_model, load_dtypes
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.models.vae import force_upcast, vae_needs_fp32
from guitrainer.engine.network import lora, quantised_storage, variants
from guitrainer.engine.network.layer_casting import FP8_SKIP_PATTERNS, cast_layerwise
from guitrainer.engine.optim import build_lr_scheduler, build_optimizer, param_groups

COMPUTE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

#: (instance batch: dataset positions, class draws: class item indices) -- one micro-batch
Pair = tuple[list[int], list[int]]


@dataclass(frozen=True)
class Placement:
    """Where a run trains: accelerate, its processes and the torch device (decided before the model loads)."""

    accelerator: Any
    processes: Processes
    device: torch.device


@dataclass(frozen=True)
class Session:
    """Everything a run trains with, built by :func:`build_session`."""

    config: TrainingConfig
    accelerator: Any
    processes: Processes
    device: torch.device
    precision: str  # "fp32" | "fp16" | "bf16"
    dtype: torch.dtype  # compute dtype (frozen weights, autocast)
    model: LoadedModel
    dataset: data.TrainDataset
    class_dataset: data.TrainDataset | None
    train_counts: list[tuple[int, int]]  # (item, repeats) of the training images (prior preservation)
    class_counts: list[tuple[int, int]]  # the same for the class images
    train_te: bool
    denoiser: torch.nn.Module  # the UNet or transformer; DDP-wrapped under several processes
    text_encoders: list[torch.nn.Module]  # DDP-wrapped when trained under several processes
    denoiser_params: list[torch.nn.Parameter]
    te_params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    optimizer_name: str
    lr_scheduler: Any
    scaler: torch.amp.GradScaler | None  # fp16 only
    pos_buckets: list[Any]
    batches_per_epoch: int
    steps_per_epoch: int
    total_steps: int
    setup_started: float  # cache entries touched from then on belong to this run
    validation_dataset: data.TrainDataset | None = None  # held-out images for the validation loss
    offloader: offload.BlockOffloader | None = None  # the blocks kept in system RAM (precision.offload_blocks)

    @property
    def params(self) -> list[torch.nn.Parameter]:
        """Every trainable LoRA parameter (UNet, then text encoders)."""
        return self.denoiser_params + self.te_params

    @property
    def main(self) -> bool:
        return self.processes.main

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This process's batches of ``epoch`` (each within one bucket), fixed by (seed, epoch)."""
        s, procs = self.config.schedule, self.processes
        return data.epoch_batches(self.pos_buckets, s.seed, epoch, s.batch_size, procs.count, procs.index)

    def class_plan(self, epoch: int) -> regularization.EpochPlan | None:
        """The class draws of ``epoch`` (:func:`~guitrainer.core.dataset.regularization.epoch_schedule`, kohya's
        counts, shuffled by (seed, epoch)); item ids are indices into ``class_dataset.items``."""
        if self.class_dataset is None:
            return None
        return regularization.epoch_schedule(self.train_counts, self.class_counts, epoch, self.config.schedule.seed)

    def epoch_pairs(self, epoch: int) -> list[Pair]:
        """This process's micro-batches of ``epoch``: (instance batch, class draws of the same size).

        The instance batches are exactly :meth:`epoch_batches` (so class images never change the
        training-image stream). The class draws of the whole epoch (:meth:`class_plan`, in its shuffled
        order) are dealt to the batches of all processes in turn, then batches and their class draws are
        sharded together, as the training draws alone would be.
        """
        s, procs = self.config.schedule, self.processes
        batches = data.epoch_batches(self.pos_buckets, s.seed, epoch, s.batch_size)
        plan = self.class_plan(epoch)
        if plan is None:
            pairs: list[Pair] = [(b, []) for b in batches]
        else:
            draws = iter(plan.classes)
            pairs = [(b, [int(next(draws)) for _ in b]) for b in batches]  # type: ignore[call-overload]
        return data.shard_batches(pairs, procs.count, procs.index)


def place(config: TrainingConfig, feedback: Feedback) -> Placement:
    """accelerate, the processes and the device; ``precision.gpu_index`` is checked before the model loads.

    The current CUDA device is per thread, so ``set_device`` runs here, in the thread that trains (the GUI's
    worker thread).
    """
    from accelerate import Accelerator

    from guitrainer.core.device.hardware import GpuChoiceError, choose_training_gpu

    # Several processes without CUDA (torchrun / accelerate launch on a CPU machine): accelerate makes a
    # gloo process group only when told to use the CPU; otherwise every process would train alone.
    launched = launched_processes()
    acc = Accelerator(
        gradient_accumulation_steps=config.schedule.gradient_accumulation,
        mixed_precision="no",
        cpu=launched > 1 and not torch.cuda.is_available(),
    )
    if launched > 1 and acc.num_processes == 1:
        raise TrainingFailed(
            f"{launched} processes were launched but accelerate set up only one: "
            "each would train alone and write the same files",
            ("launch with `accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N`",),
        )
    # several CPU processes: accelerate's device is "cpu:<rank>", which torch.load cannot map to
    device = torch.device("cpu") if acc.device.type == "cpu" else acc.device
    feedback.set_processes(Processes(acc, device))
    wanted = config.precision.gpu_index
    cuda_names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if wanted >= 0 else []
    try:
        choice = choose_training_gpu(wanted, device_type=device.type, num_processes=acc.num_processes, gpu_names=cuda_names)
    except GpuChoiceError as e:
        raise TrainingFailed(str(e), ("set the GPU to automatic (precision.gpu_index = -1) or to one listed",)) from None
    if choice.warning:
        feedback.warn(choice.warning)
    if choice.index is not None:
        device = torch.device("cuda", choice.index)
        torch.cuda.set_device(device)
    if device.type == "cpu":  # one core left to the GUI; several processes share the rest
        torch.set_num_threads(max(1, ((os.cpu_count() or 2) - 1) // acc.num_processes))
    processes = Processes(acc, device)
    feedback.set_processes(processes)
    return Placement(acc, processes, device)


def build_session(config: TrainingConfig, feedback: Feedback, placement: Placement | None = None) -> Session:
    """Turn ``config`` into a :class:`Session`: load, place, inject, and build the optimizer and schedule."""
    from accelerate.utils import set_seed

    setup_started = time.time() - 2.0  # entries touched from now on belong to this run (mtime slack)
    placement = placement or place(config, feedback)
    acc, device = placement.accelerator, placement.device
    set_seed(config.schedule.seed)
    precision = config.precision.training
    dtype = COMPUTE_DTYPES[precision]
    feedback.status("loading the base model")
    if acc.num_processes > 1 and str(config.model.base).strip() == "demo":
        # the demo model and images are built on first use: by the main process, then the others read them
        with acc.main_process_first():
            ensure_demo_model()
            if not config.dataset.folders:
                ensure_demo_dataset()
    # each part built in the dtype _prepare_model places it in: nothing is made in fp32 on the CPU first (issue 30)
    model = load_base_model(config.model, progress=lambda what, done, total: _download_status(feedback, what, done, total),
                            dtypes=load_dtypes(precision, dtype, device.type))
    feedback.stop_if_asked("loading the base model", every_process=True)
    dataset, held_out = _build_dataset(config, feedback)
    class_dataset = _build_class_dataset(config, feedback)
    validation_dataset = val.build_dataset(config, held_out, feedback)
    registry.family(model.family).prepare(config, model, feedback.warn)
    train_counts = [(i, max(1, it.repeats)) for i, it in enumerate(dataset.items)]
    class_counts = [(i, max(1, it.repeats)) for i, it in enumerate(class_dataset.items)] if class_dataset else []
    if class_dataset is not None:
        usage = regularization.class_usage(train_counts, class_counts)
        feedback.status(
            f"{len(class_dataset.items)} class images, prior loss weight {config.dataset.prior_loss_weight:g}. "
            + usage.describe()
        )
    train_te, offloader = _prepare_model(config, model, device, dtype, feedback, placement.processes)
    denoiser_params = lora.lora_parameters(model.denoiser)
    te_params = [p for te in model.text_encoders for p in lora.lora_parameters(te)]  # empty for the untrained ones
    opt = config.optimizer
    groups = param_groups(denoiser_params, te_params, opt.lr, opt.text_encoder_lr)
    optimizer, optimizer_name = build_optimizer(opt, groups, warn=feedback.warn)
    pos_buckets = [dataset.bucket_of(i) for i in range(len(dataset))]
    s = config.schedule
    batches_per_epoch = len(data.epoch_batches(pos_buckets, s.seed, 0, s.batch_size, acc.num_processes, acc.process_index))
    steps_per_epoch = math.ceil(batches_per_epoch / s.gradient_accumulation)
    total_steps = s.max_steps if s.max_steps > 0 else s.epochs * steps_per_epoch
    ddp = acc.num_processes > 1
    return Session(
        config=config,
        accelerator=acc,
        processes=placement.processes,
        device=device,
        precision=precision,
        dtype=dtype,
        model=model,
        dataset=dataset,
        class_dataset=class_dataset,
        train_counts=train_counts,
        class_counts=class_counts,
        train_te=train_te,
        denoiser=acc.prepare_model(model.denoiser) if ddp else model.denoiser,
        # DDP wraps only a text encoder with something to train (DDP refuses a module without trainable parameters)
        text_encoders=[acc.prepare_model(te) if ddp and train_te and any(p.requires_grad for p in te.parameters()) else te
                       for te in model.text_encoders],
        denoiser_params=denoiser_params,
        te_params=te_params,
        optimizer=optimizer,
        optimizer_name=optimizer_name,
        lr_scheduler=build_lr_scheduler(s, optimizer, total_steps, warn=feedback.warn),
        scaler=torch.amp.GradScaler(device.type) if precision == "fp16" else None,
        pos_buckets=pos_buckets,
        batches_per_epoch=batches_per_epoch,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        setup_started=setup_started,
        validation_dataset=validation_dataset,
        offloader=offloader,
    )


def _download_status(feedback: Feedback, what: str, done: int, total: int) -> None:
    """Hub downloads: one status line per file (the bar counts files)."""
    if total:
        feedback.status(f"downloading the base model: {what} {done}/{total}")


def _prepare_model(
    config: TrainingConfig, m: LoadedModel, device: torch.device, dtype: torch.dtype, feedback: Feedback,
    processes: Processes | None = None,
) -> tuple[bool, offload.BlockOffloader | None]:
    """Place and cast the frozen weights, inject the LoRA (fp32 master weights) on the layers the model's family
    trains, continue from ``model.init_lora``, turn on checkpointing, keep the chosen blocks in system RAM
    (:mod:`.offload`); returns whether text encoders are trained, and the offloader."""
    from diffusers.training_utils import cast_training_params

    fam = registry.family(m.family)
    in_ram, transport = offload_choice(config, fam.offload_blocks(m.denoiser), device, processes, feedback)
    precision = config.precision.training
    # DESIGN §5: frozen weights in the compute dtype. Under fp16 the VAE may stay fp32: a family whose VAE
    # overflows in fp16 (SDXL's own: its config says force_upcast; the fp16-fixed one does not), and CPUs have
    # no fast fp16 convolutions (a 64 px demo step is 10x slower).
    vae_fp32 = vae_needs_fp32(precision, fam.facts.precision.vae_upcast, force_upcast(m.vae), device.type)
    if config.precision.base_weights in quantised_storage.FORMATS:  # before the LoRA: peft wraps the bnb layers
        store_quantised(config, m.denoiser, dtype, device, bool(in_ram), feedback, fam.storage_skip_patterns)
    # torch's Module.to: diffusers' override warns about an empty list of fp32 modules on every cast
    if in_ram:  # the blocks kept in RAM never go to the GPU: the model need not fit there whole, not even once
        offload.place(m.denoiser, device, dtype, in_ram)
    else:
        torch.nn.Module.to(m.denoiser, device, dtype)
    torch.nn.Module.to(m.vae, device, torch.float32 if vae_fp32 else dtype)
    for te in m.text_encoders:
        te.to(device, dtype=dtype)
    n = config.network
    trained = [m.text_encoders[i] for i in fam.trainable_text_encoders(m)] if n.train_text_encoder else []
    if n.train_text_encoder and not trained:
        names = " and ".join(fam.facts.text_encoders) or "its text encoder"
        feedback.warn(f"{fam.facts.label} trains no text-encoder LoRA ({names} stays frozen, as the peers train it): "
                      "'Train text encoder' has no effect here")
    train_te = bool(trained)
    denoiser_targets = fam.denoiser_targets(n)
    te_targets = [fam.text_encoder_targets(m, m.text_encoders.index(te), n) for te in trained]
    if n.type != "lora":  # LoCon, LoHa, LoKr, DoRA (engine/network/variants.py)
        variants.inject(m.denoiser, n, denoiser_targets)
        for te, targets in zip(trained, te_targets):
            variants.inject(te, n, targets)
    else:
        lora.inject_lora(m.denoiser, n.rank, n.alpha, n.dropout, denoiser_targets)
        for te, targets in zip(trained, te_targets):
            lora.inject_text_encoder_lora(te, n.rank, n.alpha, n.dropout, targets)
    cast_training_params([m.denoiser, *trained], dtype=torch.float32)
    if config.precision.base_weights == "fp8":
        store_fp8([m.denoiser, *m.text_encoders], dtype, device, feedback, fam.storage_skip_patterns)
    if config.model.init_lora and not config.schedule.resume_from:
        _continue_from(config, m, trained, feedback)
    if config.precision.gradient_checkpointing:
        m.denoiser.enable_gradient_checkpointing()
        for te in trained:
            enable = getattr(te, "activation_checkpointing_enable", None) or te.gradient_checkpointing_enable
            enable()
    offloader = None
    if in_ram and transport is not None:
        offloader = offload.offload(in_ram, device, transport)
        feedback.status(
            f"{len(in_ram)} of {sum(len(b) for b in fam.offload_blocks(m.denoiser))} blocks kept in system RAM "
            f"({format_bytes(offloader.offloaded_bytes)} pinned), streamed to the GPU as they compute"
        )
    m.denoiser.train()
    for te in m.text_encoders:
        te.train(te in trained)
    return train_te, offloader


def offload_choice(
    config: TrainingConfig, block_lists: list[list[torch.nn.Module]], device: torch.device,
    processes: Processes | None, feedback: Feedback,
) -> tuple[list[torch.nn.Module], offload.Transport | None]:
    """``precision.offload_blocks``: the blocks to keep in system RAM and the transport that streams them, or
    ``([], None)`` where nothing is offloaded (the share is 0, or the device has nothing to gain, which is said).

    Refused: offload without gradient checkpointing (autograd would keep every block's weights on the GPU for the
    backward pass, so nothing is freed), and several CUDA processes (each would pin its own copy; not built yet).
    """
    share = float(config.precision.offload_blocks)
    if share <= 0:
        return [], None
    if not config.precision.gradient_checkpointing:
        raise TrainingFailed(
            f"keeping blocks in system RAM (precision.offload_blocks = {share:g}) needs gradient checkpointing: "
            "without it every block's weights stay on the GPU for the backward pass, so nothing would be freed",
            ("turn on gradient checkpointing (precision.gradient_checkpointing = true)",
             "or set precision.offload_blocks = 0"),
        )
    transport = offload.transport_for(device)
    if transport is None:
        if device.type == "cpu":
            feedback.status("blocks in system RAM: nothing to do on the CPU, the model is in system RAM already")
        elif device.type == "mps":
            feedback.status("blocks in system RAM: nothing to gain on an Apple GPU, which shares one memory with the CPU")
        else:
            feedback.warn(f"blocks in system RAM are not available on {device.type} devices yet: every block stays on the GPU")
        return [], None
    if processes is not None and processes.count > 1:
        raise TrainingFailed(
            "keeping blocks in system RAM runs in a single process: with several GPUs each process would pin its own "
            "copy of the blocks",
            ("set precision.offload_blocks = 0 for a run on several GPUs", "or train on one GPU"),
        )
    chosen = offload.chosen_blocks(block_lists, share)
    if not chosen:
        feedback.warn(f"blocks in system RAM: this model names no blocks to offload (share {share:g}); every block stays on the GPU")
        return [], None
    return chosen, transport


def store_fp8(
    modules: list[torch.nn.Module], compute_dtype: torch.dtype, device: torch.device, feedback: Feedback,
    skip: tuple[str, ...] = FP8_SKIP_PATTERNS,
) -> None:
    """``precision.base_weights = "fp8"``: the frozen Linear / Conv weights of ``modules`` are stored in float8
    e4m3 and cast up to ``compute_dtype`` layer by layer around each forward (:mod:`.layer_casting`, as kohya's
    ``--fp8_base``). Norms, embeddings and the LoRA layers (trained, fp32) are left as they are."""
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if device.type == "mps":  # Apple's Metal backend has no float8 tensors
        raise TrainingFailed(
            "fp8 storage of the frozen weights does not run on Apple GPUs (MPS has no float8 types)",
            ('set precision.base_weights = "auto"',),
        )
    if fp8 is None:
        raise TrainingFailed(
            "fp8 storage of the frozen weights needs a PyTorch with float8 types (2.1 or newer)",
            ("set precision.base_weights = \"auto\"", "or update PyTorch"),
        )
    for module in modules:
        cast_layerwise(module, fp8, compute_dtype, (*skip, "lora_"))
    feedback.status("frozen weights stored in fp8 (e4m3), cast up layer by layer")


def store_quantised(
    config: TrainingConfig, denoiser: torch.nn.Module, compute_dtype: torch.dtype, device: torch.device,
    offloading: bool, feedback: Feedback, skip: tuple[str, ...],
) -> quantised_storage.QuantisedStorage:
    """``precision.base_weights = "int8" | "nf4"``: the denoiser's frozen Linear layers replaced by bitsandbytes'
    8-bit / 4-bit layers on the device it trains on (:mod:`.network.quantised_storage`), before the rest of it is
    moved there: one layer at a time crosses in the compute dtype, so the 16-bit model is never on the GPU whole.
    The text encoders, the layers ``skip`` names and every non-Linear layer keep the compute dtype."""
    fmt = config.precision.base_weights
    try:
        import bitsandbytes  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure: the format cannot run here
        raise TrainingFailed(
            f"{fmt} storage of the frozen weights needs bitsandbytes, which could not be loaded ({e})",
            ("install bitsandbytes 0.45 or newer", 'or set precision.base_weights = "fp8" or "auto"'),
        ) from e
    if config.network.type != "lora":
        raise TrainingFailed(
            f"{fmt} storage of the frozen weights trains a plain LoRA only: the {config.network.type} layers are not "
            "built on bitsandbytes' quantised layers",
            ('set network.type = "lora"', 'or set precision.base_weights = "fp8" or "auto"'),
        )
    if offloading:
        raise TrainingFailed(
            f"{fmt} frozen weights cannot be kept in system RAM yet: the block offload streams plain weights only",
            ("set precision.offload_blocks = 0", 'or set precision.base_weights = "fp8"'),
        )
    done = quantised_storage.quantise_linears(denoiser, fmt, compute_dtype, skip, device)
    feedback.status(
        f"frozen weights stored in {fmt}: {len(done.quantised)} Linear layers of the "
        f"{'UNet' if hasattr(denoiser, 'conv_in') else 'transformer'} quantised, {len(done.kept)} kept in "
        f"{str(compute_dtype).removeprefix('torch.')}"
    )
    return done


def _continue_from(config: TrainingConfig, m: LoadedModel, trained: list[torch.nn.Module], feedback: Feedback) -> None:
    """Load ``model.init_lora`` into the fresh LoRA (the layers it shares with this network)."""
    left_out: list[str] = []
    init = config.model.init_lora
    count = registry.family(m.family).load_lora_file(expand(init), config.network, m.denoiser, trained, left_out)
    if not count:
        raise lora.LoraFormatError(f"{init}: none of its LoRA modules match the layers trained here")
    if left_out:
        feedback.warn(f"{len(left_out)} modules of {init} are not trained here and were left out")
    feedback.status(f"continuing from {init} ({count} LoRA modules)")


def _build_dataset(config: TrainingConfig, feedback: Feedback) -> tuple[data.TrainDataset, list[data.TrainItem]]:
    """The training images, and the ones held out of them for the validation loss (``validation.split``)."""
    dcfg = config.dataset
    if not dcfg.folders and config.model.base == "demo":
        dcfg = copy.copy(dcfg)
        dcfg.folders = [DatasetFolder(path=str(ensure_demo_dataset()), repeats=1)]
        feedback.status(f"using the built-in demo dataset in {dcfg.folders[0].path}")
    items = data.collect_items(dcfg, warn=feedback.warn)
    items, held_out = val.split_items(items, config.validation.split, config.validation.seed)
    ds = data.TrainDataset(items, dcfg)
    feedback.status(f"{len(items)} images, {len(ds)} per epoch with repeats")
    return ds, held_out


def _build_class_dataset(config: TrainingConfig, feedback: Feedback) -> data.TrainDataset | None:
    """The class (regularization) images, or None without ``dataset.regularization_folders``.

    Each folder keeps its repeats; a class image's caption is its own, else ``dataset.class_prompt``
    (:func:`~guitrainer.core.dataset.regularization.class_caption`), never with the trigger word, and never
    shuffled or dropped. Buckets and flips follow the training settings.
    """
    dcfg = config.dataset
    if not dcfg.regularization_folders:
        return None
    ccfg = copy.copy(dcfg)
    ccfg.folders = list(dcfg.regularization_folders)
    ccfg.trigger_word, ccfg.shuffle_captions, ccfg.caption_dropout = "", False, 0.0
    found = data.collect_items(ccfg, warn=feedback.warn, what="class (regularization) images")
    items = [dataclasses.replace(i, caption=regularization.class_caption(i.caption, dcfg.class_prompt)) for i in found]
    if not all(it.caption for it in items):
        feedback.warn("some class images have no caption and no class prompt is set: they train with an empty caption")
    return data.TrainDataset(items, ccfg)
