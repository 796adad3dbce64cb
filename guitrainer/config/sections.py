"""The sections of :class:`~guitrainer.config.TrainingConfig`: one dataclass per ``[section]`` of a config file.

Each field carries its label, help text, range and choices once (:func:`~guitrainer.config.fields.setting`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from guitrainer.config.families import FAMILY_LABELS, FAMILY_NAMES
from guitrainer.config.fields import UnknownKeyWarning, _whole_number, repeats_from_name, setting, short_repr
from guitrainer.config.flow import FlowConfig
from guitrainer.config.precision_choices import CHOICE_LABELS
from guitrainer.config.recipes import LossConfig, NoiseConfig, ValidationConfig

Precision = Literal["fp32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
OPTIMIZERS: tuple[str, ...] = (
    "AdamW", "AdamW8bit", "Lion8bit", "PagedAdamW8bit", "Adafactor", "Prodigy", "AdamWScheduleFree", "DAdaptAdam", "CAME"
)

@dataclass
class DatasetFolder:
    """One image folder and how often each of its images is seen per epoch."""

    path: str = setting("", label="Folder", help="A folder of images with .txt captions beside them.", kind="folder")
    repeats: int = setting(
        1, label="Repeats", help="How many times each image is used per epoch (kohya's N_name prefix).", minimum=1, maximum=1000
    )

    @classmethod
    def from_value(cls, value: Any) -> DatasetFolder:
        """Accept ``"path"`` or ``{path=, repeats=}``.

        An explicit ``repeats`` wins; without one it comes from a kohya ``N_name`` folder name, else 1.
        Raises TypeError / ValueError on anything else (the caller names the field).
        """
        if isinstance(value, DatasetFolder):
            return value
        if isinstance(value, str):
            return cls(path=value, repeats=repeats_from_name(Path(value).name) or 1)
        if isinstance(value, dict):
            path = value.get("path", "")
            if not isinstance(path, str):
                raise TypeError(f"`path` must be text, got {short_repr(path)}")
            extra = sorted(set(value) - {"path", "repeats"})
            if extra:
                warnings.warn(
                    f"unknown key(s) {', '.join(map(repr, extra))} in the folder table for {short_repr(path)} ignored "
                    "(a folder table has `path` and `repeats`)",
                    UnknownKeyWarning,
                    stacklevel=2,
                )
            if "repeats" not in value:
                return cls(path=path, repeats=repeats_from_name(Path(path).name) or 1)
            return cls(path=path, repeats=_whole_number(value["repeats"], "`repeats`"))
        raise TypeError(f"expected a folder path or a table with `path` and `repeats`, got {short_repr(value)}")


@dataclass
class ModelConfig:
    base: str = setting(
        "demo",
        label="Base model",
        help="A diffusers folder, a single .safetensors checkpoint, a hub id (online only), "
        "or 'demo' for the tiny built-in model that draws flat shapes and trains on a CPU.",
        kind="model",
    )
    vae: str = setting(
        "",
        label="VAE",
        help="Optional: another VAE to encode the images with, instead of the base model's own. A diffusers VAE "
        "folder (config.json + diffusion_pytorch_model.safetensors), one .safetensors VAE file, or a hub id "
        "(online only). For SDXL under fp16 use madebyollin/sdxl-vae-fp16-fix: it runs in fp16, while SDXL's own "
        "VAE must stay in fp32 (more memory). Empty: the base model's own VAE.",
        kind="vae",
        advanced=True,
    )
    text_encoders: list[str] = setting(
        label="Text encoder files",
        help="Only for a split install (ComfyUI's models/text_encoders folder): the text encoders' .safetensors files "
        "that go with the transformer file chosen as the base model, e.g. clip_l.safetensors and "
        "t5xxl_fp16.safetensors for Flux.1 (the VAE file, ae.safetensors, goes in VAE). Empty: the base model holds "
        "its own text encoders.",
        default_factory=list,
        kind="files",
        advanced=True,
    )
    family: str = setting(
        "demo",
        label="Model family",
        help="Architecture of the base model. 'auto' detects it from the files.",
        choices=FAMILY_NAMES,
        choice_labels=FAMILY_LABELS,
    )
    init_lora: str = setting(
        "",
        label="Continue from LoRA",
        help="Optional: an existing kohya LoRA file to continue training from.",
        kind="file",
        advanced=True,
    )


@dataclass
class DatasetConfig:
    folders: list[DatasetFolder] = setting(
        label="Image folders",
        help="Folders of training images. A folder named like '10_name' repeats its images 10 times per epoch.",
        default_factory=list,
    )
    exclude: list[str] = setting(
        label="Left-out images",
        help="Images inside the folders above that training skips: the ones removed on the Dataset page "
        "(their files stay on disk). One path per line.",
        default_factory=list,
        kind="multiline",
        advanced=True,
    )
    resolution: int = setting(
        512, label="Resolution", help="Training resolution (side of a square of the same area).", minimum=64, maximum=4096, unit="px"
    )
    bucketing: bool = setting(True, label="Aspect buckets", help="Train each image at its own aspect ratio instead of a square crop.")
    min_bucket_resolution: int = setting(
        256, label="Smallest bucket side", help="Lower bound of a bucket's side.", minimum=64, maximum=4096, unit="px", advanced=True
    )
    max_bucket_resolution: int = setting(
        1024, label="Largest bucket side", help="Upper bound of a bucket's side.", minimum=64, maximum=8192, unit="px", advanced=True
    )
    bucket_step: int = setting(64, label="Bucket step", help="Bucket sides are multiples of this.", minimum=8, maximum=512, unit="px", advanced=True)
    caption_extension: str = setting(".txt", label="Caption extension", help="File extension of the caption beside each image.")
    trigger_word: str = setting("", label="Trigger word", help="Put at the front of every caption, so the LoRA answers to it.")
    shuffle_captions: bool = setting(False, label="Shuffle tags", help="Shuffle the comma-separated tags of a caption each time it is used.")
    keep_tokens: int = setting(
        0, label="Keep first tags", help="Number of leading tags that shuffling never moves.", minimum=0, maximum=100
    )
    caption_dropout: float = setting(
        0.0, label="Caption dropout", help="Fraction of steps on which the caption is left empty.", minimum=0.0, maximum=1.0
    )
    flip_augment: bool = setting(False, label="Random flip", help="Mirror images at random. Off for asymmetric subjects.", advanced=True)
    regularization_folders: list[DatasetFolder] = setting(
        label="Regularization folders",
        help="Class images ('photo of a dog') trained with a prior-preservation loss so the model keeps its class.",
        default_factory=list,
        advanced=True,
    )
    class_prompt: str = setting(
        "", label="Class prompt", help="Caption used for a class image that has none.", advanced=True
    )
    prior_loss_weight: float = setting(
        1.0, label="Prior loss weight", help="Weight of the class images' loss.", minimum=0.0, maximum=100.0, advanced=True
    )


TARGETS = ("attention", "attention_ff", "attention_ff_proj")


@dataclass
class NetworkConfig:
    rank: int = setting(16, label="Rank (dim)", help="Size of the LoRA. Larger learns more and makes bigger files.", minimum=1, maximum=1024)
    alpha: float = setting(
        16.0, label="Alpha", help="Scales the LoRA's effect by alpha / rank. Alpha = rank means scale 1.", minimum=0.0, maximum=4096.0,
        positive=True,
    )
    dropout: float = setting(
        0.0, label="Dropout", help="Dropout on the LoRA path while training.", minimum=0.0, maximum=0.9, advanced=True,
        applies=("network.type", ("lora", "locon", "dora")),
    )
    target_modules: Literal["attention", "attention_ff", "attention_ff_proj"] = setting(
        "attention",
        label="Layers trained",
        help="Which UNet layers get a LoRA: attention projections; plus feed-forward; plus the transformer's proj_in/out.",
        choice_labels={"attention": "Attention", "attention_ff": "Attention + feed-forward", "attention_ff_proj": "Attention + FF + proj"},
    )
    train_text_encoder: bool = setting(
        False, label="Train text encoder", help="Also train a LoRA on the text encoder(s). Uses more memory."
    )
    type: Literal["lora", "locon", "loha", "lokr", "dora"] = setting(
        "lora",
        label="Network type",
        help="LoRA: attention layers only. LoCon: also the ResNet and down/upsampling convolutions and the text "
        "encoder's MLP (kohya's conv_dim). LoHa / LoKr: LyCORIS' Hadamard / Kronecker products on the same layers. "
        "DoRA: LoCon with a learned magnitude per channel (LyCORIS' dora_wd; DoRA layout says which axis). ComfyUI "
        "reads all five as trained; A1111/Forge too (LoHa / LoKr: save them as fp32 there); diffusers and kohya's "
        "networks.lora read LoRA and LoCon only. The README's table says which program reads which file.",
        choice_labels={"lora": "LoRA", "locon": "LoCon", "loha": "LoHa", "lokr": "LoKr", "dora": "DoRA"},
    )
    conv_rank: int = setting(
        8, label="Conv rank", help="Rank of the 3x3 convolutions' adapters (LoCon, LoHa, LoKr, DoRA); kohya's conv_dim.",
        minimum=1, maximum=1024, advanced=True, applies=("network.type", ("locon", "loha", "lokr", "dora")),
    )
    conv_alpha: float = setting(
        4.0, label="Conv alpha", help="Scales the convolutions' adapters by conv alpha / conv rank; kohya's conv_alpha.",
        minimum=0.0, maximum=4096.0, positive=True, advanced=True, applies=("network.type", ("locon", "loha", "lokr", "dora")),
    )
    rank_dropout: float = setting(
        0.0, label="Rank dropout", help="LoHa / LoKr: drops rows of the adapter's weight while training (LyCORIS' "
        "rank_dropout).", minimum=0.0, maximum=0.9, advanced=True, applies=("network.type", ("loha", "lokr")),
    )
    module_dropout: float = setting(
        0.0, label="Module dropout", help="LoHa / LoKr: skips a whole adapter for a step with this probability "
        "(LyCORIS' module_dropout).", minimum=0.0, maximum=0.9, advanced=True, applies=("network.type", ("loha", "lokr")),
    )
    lokr_factor: int = setting(
        -1, label="LoKr factor", help="LoKr splits each weight into a Kronecker product with this factor; -1 picks "
        "the most balanced split (LyCORIS' factor).", minimum=-1, maximum=1024, advanced=True, applies=("network.type", ("lokr",)),
    )
    dora_layout: Literal["column", "row"] = setting(
        "column", label="DoRA layout",
        help="Which axis DoRA's magnitude (the file's dora_scale) normalises, which decides who reads the file as "
        "trained. Column: one magnitude per input channel, dora_scale [1, in]: ComfyUI, A1111 and Forge merge it "
        "exactly; LyCORIS' own loader (create_network_from_weights) cannot build it and stops. Row: one per output "
        "channel, dora_scale [out, 1], as peft's use_dora and LyCORIS' default (wd_on_output): LyCORIS reads "
        "it exactly; ComfyUI and Forge read it but divide by the base weight's row norms instead of the merged "
        "weight's (close, not exact: Verify says how close); A1111 spreads the row magnitudes over its columns "
        "(wrong). diffusers and kohya's networks.lora drop dora_scale either way (a plain LoRA there).",
        choice_labels={"column": "Column (ComfyUI, A1111, Forge)", "row": "Row (LyCORIS, peft)"},
        advanced=True, applies=("network.type", ("dora",)),
    )


@dataclass
class OptimizerConfig:
    name: Literal[
        "AdamW", "AdamW8bit", "Lion8bit", "PagedAdamW8bit", "Adafactor", "Prodigy", "AdamWScheduleFree", "DAdaptAdam", "CAME"
    ] = setting(
        "AdamW",
        label="Optimizer",
        help="AdamW is the safe default; 8-bit variants (bitsandbytes) use a quarter of the optimizer memory. "
        "Prodigy and DAdaptAdam find their own step size: leave the learning rate at 1.0 (it multiplies theirs). "
        "AdamWScheduleFree needs no LR schedule (the schedule stays constant). CAME: Adafactor-like memory, Adam-like steps.",
        choice_labels={
            "Prodigy": "Prodigy (LR-free: LR 1.0)",
            "DAdaptAdam": "DAdaptAdam (LR-free: LR 1.0)",
            "AdamWScheduleFree": "AdamW schedule-free",
        },
    )
    lr: float = setting(
        1e-4,
        label="Learning rate",
        help="UNet learning rate. With Prodigy or DAdaptAdam it multiplies the step size they find: 1.0 (their default).",
        minimum=0.0,
        maximum=1.0,
        kind="scientific",
        positive=True,
    )
    text_encoder_lr: float = setting(
        5e-5,
        label="Text encoder LR",
        help="Learning rate of the text encoder's LoRA (with Prodigy or DAdaptAdam a multiplier, usually 1.0).",
        minimum=0.0,
        maximum=1.0,
        kind="scientific",
    )
    weight_decay: float = setting(0.01, label="Weight decay", help="Decoupled weight decay.", minimum=0.0, maximum=1.0, advanced=True)
    betas: list[float] = setting(
        label="Betas", help="Adam's beta1 and beta2.", default_factory=lambda: [0.9, 0.999], advanced=True
    )


#: optimizers that find their own step size: ``lr`` multiplies it and is 1.0 unless set
LR_FREE_OPTIMIZERS: tuple[str, ...] = ("Prodigy", "DAdaptAdam")


def apply_lr_free_default(opt: OptimizerConfig, overlay: dict[str, Any]) -> None:
    """An LR-free optimizer (Prodigy, DAdaptAdam) chosen by ``overlay`` without a learning rate gets lr = 1.0.

    Their ``lr`` multiplies the step size they find, so AdamW's 1e-4 would all but stop training. Only a
    learning rate still at the default is changed: one the overlay (or the config below it) set is kept.
    ``opt`` is the optimizer section the overlay was applied to.
    """
    given = overlay.get("optimizer") if isinstance(overlay, dict) else None
    if not isinstance(given, dict) or given.get("name") not in LR_FREE_OPTIMIZERS:
        return
    defaults = OptimizerConfig()
    if "lr" not in given and opt.lr == defaults.lr:
        opt.lr = 1.0
    if "text_encoder_lr" not in given and opt.text_encoder_lr == defaults.text_encoder_lr:
        opt.text_encoder_lr = 1.0


def learning_rates_for_optimizer(opt: OptimizerConfig) -> tuple[dict[str, float], str]:
    """What the settings form changes when the optimizer changes: ``({path: value}, why)``; ``({}, "")`` for nothing.

    An LR-free optimizer (Prodigy, DAdaptAdam) with an AdamW-sized learning rate (under 0.1) gets 1.0, its
    default; leaving one with a learning rate of 0.1 or more gets AdamW's defaults back.
    """
    defaults = OptimizerConfig()
    if opt.name in LR_FREE_OPTIMIZERS:
        if opt.lr < 0.1 or opt.text_encoder_lr < 0.1:
            why = f"{opt.name} finds its own step size: the learning rate is a multiplier of it, set to 1.0"
            return {"optimizer.lr": 1.0, "optimizer.text_encoder_lr": 1.0}, why
        return {}, ""
    if opt.lr >= 0.1:
        why = f"{opt.name} needs a real learning rate: set back to {defaults.lr:g} (text encoder {defaults.text_encoder_lr:g})"
        return {"optimizer.lr": defaults.lr, "optimizer.text_encoder_lr": defaults.text_encoder_lr}, why
    return {}, ""


@dataclass
class ScheduleConfig:
    epochs: int = setting(10, label="Epochs", help="Passes over the dataset (with repeats).", minimum=1, maximum=100000)
    max_steps: int = setting(
        0, label="Max steps", help="Stop after this many optimizer steps; 0 means train for the epochs.", minimum=0, maximum=10_000_000
    )
    batch_size: int = setting(1, label="Batch size", help="Images per step. More needs more memory.", minimum=1, maximum=256)
    gradient_accumulation: int = setting(
        1, label="Gradient accumulation", help="Steps whose gradients add up before one update.", minimum=1, maximum=1024, advanced=True
    )
    lr_scheduler: Literal[
        "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial"
    ] = setting("constant", label="LR schedule", help="How the learning rate changes over training.")
    warmup_steps: int = setting(0, label="Warm-up steps", help="Steps over which the learning rate ramps up.", minimum=0, maximum=1_000_000)
    max_grad_norm: float = setting(
        1.0, label="Max grad norm", help="Clip gradients to this norm; 0 turns clipping off.", minimum=0.0, maximum=1e6, advanced=True
    )
    seed: int = setting(42, label="Seed", help="Random seed; the same seed repeats the same run.", minimum=0, maximum=2**32 - 1)
    resume_from: str = setting(
        "", label="Resume from", help="A saved training state folder to continue from.", kind="folder", advanced=True
    )
    warmup_ratio: float = setting(
        0.0,
        label="Warm-up share",
        help="Warm-up as a share of all steps (0.05 = the first 5 %); used instead of the warm-up steps when above 0.",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
    )
    lr_scheduler_num_cycles: int = setting(
        1,
        label="Restarts (cycles)",
        help="Cosine with restarts: how many cosine cycles, each starting again from the full learning rate.",
        minimum=1,
        maximum=1000,
        advanced=True,
    )
    lr_scheduler_power: float = setting(
        1.0,
        label="Polynomial power",
        help="Polynomial schedule: the power of the decay (1 = linear, 2 = faster at first).",
        minimum=0.01,
        maximum=100.0,
        advanced=True,
    )


@dataclass
class PrecisionConfig:
    training: Literal["fp32", "fp16", "bf16"] = setting(
        "fp16",
        label="Training precision",
        help="fp16 AMP: fast on any NVIDIA card from 2018, with a loss scaler. bf16 AMP: RTX 30-series and newer, "
        "no scaler needed. fp32: slowest, most memory, no surprises.",
        choice_labels=CHOICE_LABELS["precision.training"],
    )
    save: Literal["fp32", "fp16", "bf16"] = setting(
        "fp16",
        label="Save precision",
        help="Precision of the saved LoRA file. fp16 is what most tools expect and half the size of fp32.",
    )
    base_weights: Literal["auto", "fp8", "int8", "nf4"] = setting(
        "auto",
        label="Base model weights",
        help="How the base model's frozen UNet and text encoders are stored (the LoRA is trained on top of them). "
        "Same as training: in the training precision. fp8: 8-bit (e4m3) storage widened one layer at a time, half "
        "the weight memory of fp16 / bf16 with a small loss of quality; needs a PyTorch with float8 types, not on "
        "Apple GPUs. int8 / nf4 (bitsandbytes, QLoRA-style): the UNet's or transformer's Linear layers in 8 bits "
        "with a scale per row, or 4-bit NormalFloat (about a quarter of bf16); the embedders, final layers, convs "
        "and text encoders stay in the training precision. The VRAM bar offers them when they save much.",
        choice_labels=CHOICE_LABELS["precision.base_weights"],
        advanced=True,
    )
    lora_weights: Literal["fp32", "bf16"] = setting(
        "fp32",
        label="LoRA weights",
        help="Precision of the trainable LoRA weights, their gradients and AdamW's state. bf16 halves that memory "
        "for very large ranks, but updates smaller than bf16 can hold are rounded away; fp32 is the safe default.",
        choice_labels=CHOICE_LABELS["precision.lora_weights"],
        advanced=True,
    )
    gradient_checkpointing: bool = setting(
        False, label="Gradient checkpointing", help="Recompute activations in the backward pass: much less memory, ~20% slower."
    )
    offload_blocks: float = setting(
        0.0,
        label="Blocks in system RAM",
        help="Share of the UNet's or transformer's repeated blocks kept in system RAM and copied to the GPU just "
        "before each one computes (0: off, 0.5: half of them). The GPU then holds that share less of the frozen "
        "block weights and the RAM that much more (locked: it cannot be swapped out); steps are slower when the "
        "copies cannot keep up. The LoRA comes out the same as without. Needs gradient checkpointing; saves "
        "nothing on a CPU or an Apple GPU, where both share one memory.",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
        applies=("precision.gradient_checkpointing", (True,)),
    )
    cache_latents: bool = setting(
        True, label="Cache latents", help="Encode every image once with the VAE, then free the VAE's memory."
    )
    cache_text_encoder_outputs: bool = setting(
        False,
        label="Cache text embeddings",
        help="Encode captions once (only when the text encoder is not trained and captions are not shuffled).",
        advanced=True,
    )
    cache_to_disk: bool = setting(
        True,
        label="Keep caches on disk",
        help="Save cached latents and text embeddings in the app's cache folder, so the next run (after a "
        "restart too) reuses them. Off: they live in memory for this run only and nothing is written.",
        advanced=True,
    )
    gpu_index: int = setting(
        -1,
        label="GPU",
        help="The GPU to train on, by its number as PyTorch counts them (the list on the Model & Precision page); "
        "-1 means automatic: the first GPU. Ignored under `accelerate launch` with several processes, "
        "where each process trains on its own GPU.",
        minimum=-1,
        maximum=1023,
        advanced=True,
    )
    numerics_every: int = setting(
        50,
        label="Numerics check every",
        help="Measure how close each block of the model runs to its precision's limit (fp16: 65,504) and how "
        "much of the LoRA gradients underflows, on the first step and every N steps (the Training page's "
        "Numerics tab). A skipped step or a NaN loss is always traced to the module where it began. 0: only that.",
        minimum=0,
        maximum=1_000_000,
        unit="steps",
        advanced=True,
    )


@dataclass
class SamplingConfig:
    prompts: list[str] = setting(
        label="Sample prompts",
        help="One prompt per line; images are made with the current LoRA. Per prompt, as in kohya's scripts: "
        "--w 512 --h 768 (size), --d 42 (seed), --l 7 (guidance), --s 28 (steps), --n … (negative prompt).",
        default_factory=list,
        kind="multiline",
    )
    every_n_steps: int = setting(0, label="Sample every", help="Make samples every N steps; 0 turns samples off.", minimum=0, maximum=1_000_000, unit="steps")
    at_start: bool = setting(
        False,
        label="Sample before training",
        help="Also make the samples at step 0, before the first step: the base model's pictures, to compare "
        "the LoRA's with (sd-scripts' --sample_at_first).",
    )
    negative_prompt: str = setting("", label="Negative prompt", help="Used for every sample.", advanced=True)
    steps: int = setting(20, label="Sampling steps", help="Denoising steps per sample.", minimum=1, maximum=200, advanced=True)
    guidance_scale: float = setting(7.0, label="Guidance scale", help="Classifier-free guidance.", minimum=0.0, maximum=50.0, advanced=True)
    size: int = setting(512, label="Sample size", help="Width and height of samples.", minimum=64, maximum=4096, unit="px", advanced=True)
    seed: int = setting(1234, label="Sample seed", help="Fixed seed so samples are comparable over time.", minimum=0, maximum=2**32 - 1, advanced=True)


@dataclass
class OutputConfig:
    folder: str = setting(
        "~/guitrainer/output", label="Output folder", help="Where the LoRA files and training states are written.", kind="folder"
    )
    name: str = setting("my_lora", label="Name", help="File name of the LoRA, without extension.")
    format: Literal["kohya", "diffusers"] = setting(
        "kohya",
        label="Format",
        help="kohya: loads in ComfyUI, A1111/Forge and sd-scripts (in diffusers too, but for SD 3.5). diffusers: "
        "pytorch_lora_weights.safetensors for diffusers users (not for Flux.1, whose kohya file diffusers reads).",
    )
    save_every_n_epochs: int = setting(
        0, label="Save every", help="Also save a LoRA every N epochs; 0 saves only at the end.", minimum=0, maximum=100000, unit="epochs"
    )
    keep_last: int = setting(
        0, label="Keep last", help="Keep only the newest K intermediate saves; 0 keeps all.", minimum=0, maximum=10000, advanced=True
    )
    tensorboard: bool = setting(
        False,
        label="TensorBoard logs",
        help="Also write TensorBoard event files to a logs/ folder beside the LoRA (kohya's layout): tensorboard --logdir <output folder>/logs.",
    )
    overwrite: bool = setting(
        False, label="Overwrite", help="Replace an existing file of the same name instead of numbering the new one.", advanced=True
    )
    title: str = setting("", label="Title", help="modelspec.title in the file's metadata.", advanced=True)
    author: str = setting("", label="Author", help="modelspec.author.", advanced=True)
    description: str = setting("", label="Description", help="modelspec.description.", advanced=True, kind="multiline")
    trigger_words: str = setting("", label="Trigger words", help="Words that activate the LoRA, for the file's metadata.", advanced=True)
    license: str = setting("", label="License", help="modelspec.license.", advanced=True)


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "dataset": DatasetConfig,
    "network": NetworkConfig,
    "optimizer": OptimizerConfig,
    "schedule": ScheduleConfig,
    "precision": PrecisionConfig,
    "sampling": SamplingConfig,
    "output": OutputConfig,
    "loss": LossConfig,
    "noise": NoiseConfig,
    "validation": ValidationConfig,
    "flow": FlowConfig,
}

