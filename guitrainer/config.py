"""TrainingConfig: the one settings object that flows through the whole app.

The UI edits it, the VRAM estimator reads it, the trainer runs it, presets are sparse
overlays of it and the CLI loads it from TOML. Every field carries its label and help text
once, in ``dataclasses.field(metadata=...)``; the UI builds its widgets from that metadata.

Field names are public (presets and ``--set section.field=value`` use them): rename nothing
without a migration in :data:`MIGRATIONS`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import tomllib
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

Precision = Literal["fp32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
OPTIMIZERS: tuple[str, ...] = (
    "AdamW", "AdamW8bit", "Lion8bit", "PagedAdamW8bit", "Adafactor", "Prodigy", "AdamWScheduleFree", "DAdaptAdam", "CAME"
)
#: optimizers that find their own step size: ``lr`` multiplies it and is 1.0 unless set
LR_FREE_OPTIMIZERS: tuple[str, ...] = ("Prodigy", "DAdaptAdam")


class ConfigError(ValueError):
    """A config value is invalid. ``field`` is the dotted path, e.g. ``network.rank``."""

    def __init__(self, field: str, message: str, *, source: str = "", line: int | None = None):
        self.field = field
        self.message = message
        self.source = source
        self.line = line
        where = ""
        if source:
            where = f"{source}" + (f", line {line}" if line else "") + ": "
        super().__init__(f"{where}`{field}`: {message}")


class UnknownKeyWarning(UserWarning):
    """A config or preset holds a key this version does not know; it is dropped."""


def setting(
    default: Any = dataclasses.MISSING,
    *,
    label: str,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] | None = None,
    choice_labels: dict[str, str] | None = None,
    unit: str = "",
    advanced: bool = False,
    kind: str = "",
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its UI metadata.

    Args:
        label: short name the user sees.
        help: one or two sentences shown as the tooltip / help text.
        minimum, maximum: inclusive numeric range, checked by validation and used by spin boxes.
        choices: closed set of allowed values (for ``Literal`` fields this is derived).
        choice_labels: user-facing names for the choices.
        unit: shown as a suffix ("px", "steps").
        advanced: hidden behind "Show advanced" in generated forms.
        kind: a hint for the editor: "path", "folder", "file", "multiline", "scientific".
    """
    meta = {
        "label": label,
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "choice_labels": choice_labels or {},
        "unit": unit,
        "advanced": advanced,
        "kind": kind,
    }
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


# --------------------------------------------------------------------------- sections


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


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about whatever a file holds."""
    try:
        r = repr(value)
    except RecursionError:
        r = f"<deeply nested {type(value).__name__}>"
    return r if len(r) <= limit else r[: limit - 1] + "…"


def _whole_number(value: Any, what: str) -> int:
    """``value`` as an int: ints, integral floats and digit strings; never a bool."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a whole number, got {short_repr(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError(f"{what} must be a whole number, got {short_repr(value)}")


_REPEATS_RE = re.compile(r"^(\d+)_(.+)$")


def repeats_from_name(name: str) -> int | None:
    """kohya folder convention: ``10_mychar`` -> 10. None when the name has no such prefix."""
    m = _REPEATS_RE.match(name)
    if not m:
        return None
    n = int(m.group(1))
    return n if n >= 1 else None


@dataclass
class ModelConfig:
    base: str = setting(
        "demo",
        label="Base model",
        help="A diffusers folder, a single .safetensors checkpoint, a hub id (online only), "
        "or 'demo' for the tiny built-in model that trains on a CPU in seconds.",
        kind="model",
    )
    family: Literal["auto", "demo", "sd15", "sdxl"] = setting(
        "demo",
        label="Model family",
        help="Architecture of the base model. 'auto' detects it from the files.",
        choice_labels={"auto": "Detect", "demo": "Demo (tiny)", "sd15": "SD 1.5", "sdxl": "SDXL"},
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
        16.0, label="Alpha", help="Scales the LoRA's effect by alpha / rank. Alpha = rank means scale 1.", minimum=0.0, maximum=4096.0
    )
    dropout: float = setting(0.0, label="Dropout", help="Dropout on the LoRA path while training.", minimum=0.0, maximum=0.9, advanced=True)
    target_modules: Literal["attention", "attention_ff", "attention_ff_proj"] = setting(
        "attention",
        label="Layers trained",
        help="Which UNet layers get a LoRA: attention projections; plus feed-forward; plus the transformer's proj_in/out.",
        choice_labels={"attention": "Attention", "attention_ff": "Attention + feed-forward", "attention_ff_proj": "Attention + FF + proj"},
    )
    train_text_encoder: bool = setting(
        False, label="Train text encoder", help="Also train a LoRA on the text encoder(s). Uses more memory."
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
        choice_labels={"fp32": "fp32", "fp16": "fp16 AMP", "bf16": "bf16 AMP"},
    )
    save: Literal["fp32", "fp16", "bf16"] = setting(
        "fp16",
        label="Save precision",
        help="Precision of the saved LoRA file. fp16 is what most tools expect and half the size of fp32.",
    )
    gradient_checkpointing: bool = setting(
        False, label="Gradient checkpointing", help="Recompute activations in the backward pass: much less memory, ~20% slower."
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
        help="The GPU to train on, by its number as PyTorch counts them (the list on the Model page); "
        "-1 means automatic: the first GPU. Ignored under `accelerate launch` with several processes, "
        "where each process trains on its own GPU.",
        minimum=-1,
        maximum=1023,
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
        help="kohya: loads in ComfyUI, A1111/Forge and diffusers. diffusers: pytorch_lora_weights.safetensors for diffusers users.",
    )
    save_every_n_epochs: int = setting(
        0, label="Save every", help="Also save a LoRA every N epochs; 0 saves only at the end.", minimum=0, maximum=100000, unit="epochs"
    )
    keep_last: int = setting(
        0, label="Keep last", help="Keep only the newest K intermediate saves; 0 keeps all.", minimum=0, maximum=10000, advanced=True
    )
    overwrite: bool = setting(
        False, label="Overwrite", help="Replace an existing file of the same name instead of numbering the new one.", advanced=True
    )
    title: str = setting("", label="Title", help="modelspec.title in the file's metadata.", advanced=True)
    author: str = setting("", label="Author", help="modelspec.author.", advanced=True)
    description: str = setting("", label="Description", help="modelspec.description.", advanced=True, kind="multiline")
    trigger_words: str = setting("", label="Trigger words", help="Words that activate the LoRA, for the file's metadata.", advanced=True)
    license: str = setting("", label="License", help="modelspec.license.", advanced=True)


# ------------------------------------------------------------------ training recipes (kohya's names)


@dataclass
class LossConfig:
    """How the loss is computed: weighting over timesteps, the loss type, the timestep range (sd-scripts' names)."""

    min_snr_gamma: float = setting(
        0.0,
        label="Min-SNR γ",
        help="Min-SNR-γ loss weighting: caps the weight of low-noise timesteps so training converges faster "
        "(the paper and kohya's guides use 5). 0 turns it off. Correct for epsilon and v-prediction models.",
        minimum=0.0,
        maximum=100.0,
        advanced=True,
    )
    debiased_estimation: bool = setting(
        False,
        label="Debiased estimation",
        help="Weight each timestep's loss by 1/√SNR (1/(SNR+1) for v-prediction), as kohya's --debiased_estimation_loss.",
        advanced=True,
    )
    loss_type: Literal["l2", "l1", "huber", "smooth_l1"] = setting(
        "l2",
        label="Loss type",
        help="l2 (MSE) is the standard. Huber and smooth L1 are less thrown by outliers: L2 near zero, L1 far out.",
        choice_labels={"l2": "L2 (MSE)", "l1": "L1", "huber": "Huber", "smooth_l1": "Smooth L1"},
        advanced=True,
    )
    huber_schedule: Literal["snr", "exponential", "constant"] = setting(
        "snr",
        label="Huber schedule",
        help="How the Huber threshold changes over timesteps (Huber and smooth L1 only): snr (kohya's default), "
        "exponential (from the scale down to Huber c × scale), or constant (Huber c × scale).",
        advanced=True,
    )
    huber_c: float = setting(
        0.1,
        label="Huber c",
        help="The Huber threshold (decay parameter): residuals below it count as L2, above it as L1.",
        minimum=0.0001,
        maximum=10.0,
        advanced=True,
    )
    huber_scale: float = setting(
        1.0, label="Huber scale", help="Scales the Huber threshold (constant and exponential schedules).", minimum=0.0001, maximum=100.0, advanced=True
    )
    min_timestep: int = setting(
        0,
        label="Lowest timestep",
        help="Train on timesteps from this one (0 = the least noisy) ...",
        minimum=0,
        maximum=1000,
        advanced=True,
    )
    max_timestep: int = setting(
        1000,
        label="Highest timestep",
        help="... up to, not including, this one (1000 = all of them). Equal to the lowest: that timestep only.",
        minimum=1,
        maximum=1000,
        advanced=True,
    )


@dataclass
class NoiseConfig:
    """The noise added to the latents (sd-scripts' names)."""

    noise_offset: float = setting(
        0.0,
        label="Noise offset",
        help="Adds a random offset per channel to the noise, so the LoRA can make darker darks and brighter brights "
        "(kohya's guides: about 0.05-0.1). 0 turns it off.",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
    )
    noise_offset_random_strength: bool = setting(
        False, label="Random offset strength", help="Draw the noise offset's strength between 0 and the value each step.", advanced=True
    )
    adaptive_noise_scale: float = setting(
        0.0,
        label="Adaptive noise scale",
        help="Adds this × the latent's mean to the noise offset (needs a noise offset). 0 turns it off.",
        minimum=-1.0,
        maximum=1.0,
        advanced=True,
    )
    multires_noise_iterations: int = setting(
        0,
        label="Pyramid noise levels",
        help="Multi-resolution (pyramid) noise: adds noise at this many coarser scales (guides: 6-10). 0 turns it off.",
        minimum=0,
        maximum=64,
        advanced=True,
    )
    multires_noise_discount: float = setting(
        0.3,
        label="Pyramid noise discount",
        help="Each coarser level of pyramid noise is weighted by this power (kohya's default 0.3; 0.8 is common too).",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
    )
    ip_noise_gamma: float = setting(
        0.0,
        label="Input perturbation",
        help="Input-perturbation noise (arXiv 2301.11706): the UNet's input gets this much extra noise, the target "
        "does not (about 0.1). 0 turns it off.",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
    )
    ip_noise_gamma_random_strength: bool = setting(
        False, label="Random perturbation strength", help="Draw the input perturbation's strength between 0 and the value each step.", advanced=True
    )
    zero_terminal_snr: bool = setting(
        False,
        label="Zero terminal SNR",
        help="Rescale the noise schedule so the last timestep is pure noise (arXiv 2305.08891). For v-prediction models only.",
        advanced=True,
    )


@dataclass
class ValidationConfig:
    """A held-out set of images scored at fixed timesteps and noise, so its loss is comparable over a run."""

    split: float = setting(
        0.0,
        label="Validation share",
        help="Share of the training images held out for the validation loss (0.1 = one in ten); 0 and no folder: off.",
        minimum=0.0,
        maximum=0.9,
        advanced=True,
    )
    folder: str = setting(
        "",
        label="Validation folder",
        help="A folder of images (with captions) to score instead of a share of the training images.",
        kind="folder",
        advanced=True,
    )
    every_n_steps: int = setting(
        50, label="Validate every", help="Score the validation images every N steps.", minimum=1, maximum=1_000_000, unit="steps", advanced=True
    )
    seed: int = setting(
        0,
        label="Validation seed",
        help="Fixes which images are held out and the noise they are scored with.",
        minimum=0,
        maximum=2**32 - 1,
        advanced=True,
    )


def recipe_errors(cfg: TrainingConfig) -> list[ConfigError]:
    """Problems between the recipe settings (loss, noise, validation) and the rest of the config."""
    out: list[ConfigError] = []
    loss, noise, val = cfg.loss, cfg.noise, cfg.validation
    if loss.min_timestep > loss.max_timestep:
        out.append(ConfigError("loss.min_timestep", f"must not exceed `loss.max_timestep` ({loss.max_timestep})"))
    if noise.adaptive_noise_scale and not noise.noise_offset:
        out.append(ConfigError("noise.adaptive_noise_scale", "needs a noise offset (`noise.noise_offset` above 0)"))
    if val.split and val.folder.strip():
        out.append(ConfigError("validation.split", "use a share of the images or a validation folder, not both"))
    if val.folder.strip() and _norm(val.folder) in {_norm(f.path) for f in cfg.dataset.folders if f.path}:
        out.append(ConfigError("validation.folder", f"{val.folder!r} is a training folder; the validation images must be others"))
    return out


def apply_lr_free_default(cfg: TrainingConfig, overlay: dict[str, Any]) -> None:
    """An LR-free optimizer (Prodigy, DAdaptAdam) chosen by ``overlay`` without a learning rate gets lr = 1.0.

    Their ``lr`` multiplies the step size they find, so AdamW's 1e-4 would all but stop training. Only a
    learning rate still at the default is changed: one the overlay (or the config below it) set is kept.
    """
    opt = overlay.get("optimizer") if isinstance(overlay, dict) else None
    if not isinstance(opt, dict) or opt.get("name") not in LR_FREE_OPTIMIZERS:
        return
    defaults = OptimizerConfig()
    if "lr" not in opt and cfg.optimizer.lr == defaults.lr:
        cfg.optimizer.lr = 1.0
    if "text_encoder_lr" not in opt and cfg.optimizer.text_encoder_lr == defaults.text_encoder_lr:
        cfg.optimizer.text_encoder_lr = 1.0


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
}


@dataclass
class TrainingConfig:
    """Everything a training run needs. Build with :meth:`from_dict` / :func:`load_toml`."""

    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    schema_version: int = SCHEMA_VERSION

    # ------------------------------------------------------------------ access by path
    def get(self, path: str) -> Any:
        section, name = _split(path)
        return getattr(getattr(self, section), name)

    def set(self, path: str, value: Any) -> None:
        """Set one field by dotted path, coercing and validating it; raises ConfigError."""
        section, name = _split(path)
        f = field_info(path)
        coerced = _coerce(f, value, path)
        _check_field(f, coerced, path)
        setattr(getattr(self, section), name, coerced)

    def copy(self) -> TrainingConfig:
        return copy.deepcopy(self)

    # ------------------------------------------------------------------ validation
    def errors(self) -> list[ConfigError]:
        """Every problem, each naming its field and the allowed range."""
        out: list[ConfigError] = []
        for sname in SECTIONS:
            section = getattr(self, sname)
            for f in dataclasses.fields(section):
                path = f"{sname}.{f.name}"
                try:
                    _check_field(f, getattr(section, f.name), path)
                except ConfigError as e:
                    out.append(e)
        d, p = self.dataset, self.precision
        if d.min_bucket_resolution > d.max_bucket_resolution:
            out.append(ConfigError("dataset.min_bucket_resolution", "must not exceed `dataset.max_bucket_resolution`"))
        if d.keep_tokens and not d.shuffle_captions:
            pass  # harmless: keep_tokens only matters with shuffling
        train_paths = {_norm(f.path) for f in d.folders if f.path}
        for reg in d.regularization_folders:
            if reg.path and _norm(reg.path) in train_paths:
                out.append(
                    ConfigError("dataset.regularization_folders", f"{reg.path!r} is also a training folder; use it in one list only")
                )
        if p.cache_text_encoder_outputs and self.network.train_text_encoder:
            out.append(
                ConfigError("precision.cache_text_encoder_outputs", "cannot cache text embeddings while training the text encoder")
            )
        if len(self.optimizer.betas) != 2:
            out.append(ConfigError("optimizer.betas", "needs exactly two numbers, e.g. [0.9, 0.999]"))
        out += recipe_errors(self)
        from guitrainer.core.sample_prompts import SamplePromptError, parse

        for i, line in enumerate(q for q in self.sampling.prompts if str(q).strip()):
            try:
                parse(str(line), self.sampling, i)
            except SamplePromptError as e:
                out.append(ConfigError("sampling.prompts", f"prompt {i + 1}: {e}"))
        return out

    def validate(self) -> TrainingConfig:
        errs = self.errors()
        if errs:
            raise errs[0]
        return self

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        version = d.pop("schema_version")
        return {"schema_version": version, **d}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "", text: str = "") -> TrainingConfig:
        """Build from a (possibly sparse) dict on top of the defaults; unknown keys warn and are dropped."""
        return apply_overlay(cls(), data, source=source, text=text).validate_with_source(source, text)

    def validate_with_source(self, source: str, text: str) -> TrainingConfig:
        errs = self.errors()
        if errs:
            e = errs[0]
            raise ConfigError(e.field, e.message, source=source, line=find_line(text, e.field) if text else None)
        return self

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())


# --------------------------------------------------------------------------- helpers


def _split(path: str) -> tuple[str, str]:
    parts = path.split(".")
    if len(parts) != 2 or parts[0] not in SECTIONS:
        raise ConfigError(path, f"not a setting; use section.field with a section among {', '.join(SECTIONS)}")
    names = {f.name for f in dataclasses.fields(SECTIONS[parts[0]])}
    if parts[1] not in names:
        raise ConfigError(path, f"unknown field; [{parts[0]}] has {', '.join(sorted(names))}")
    return parts[0], parts[1]


def _norm(p: str) -> str:
    try:
        return str(Path(p).expanduser().resolve())
    except (OSError, ValueError, RuntimeError):  # a NUL byte in the text, no home folder, a symlink loop
        return p


def field_info(path: str) -> dataclasses.Field:
    section, name = _split(path)
    return next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == name)


def field_paths() -> list[str]:
    return [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def field_type(f: dataclasses.Field, owner: type | None = None) -> Any:
    """The resolved type annotation of a section field."""
    if owner is None:
        owner = next(cls for cls in SECTIONS.values() if f in dataclasses.fields(cls))
    if owner not in _HINTS_CACHE:
        _HINTS_CACHE[owner] = typing.get_type_hints(owner)
    return _HINTS_CACHE[owner][f.name]


def field_choices(f: dataclasses.Field) -> tuple[str, ...] | None:
    if f.metadata.get("choices"):
        return tuple(f.metadata["choices"])
    t = field_type(f)
    if typing.get_origin(t) is Literal:
        return tuple(typing.get_args(t))
    return None


def _coerce(f: dataclasses.Field, value: Any, path: str) -> Any:
    """``value`` as the field's type, or a ConfigError naming ``path`` (an item of a list: ``path[i]``)."""
    t = field_type(f)
    origin = typing.get_origin(t)
    try:
        if t is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            if not isinstance(value, bool | int):
                raise ValueError(value)
            return bool(value)
        if t is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if t is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if t is str or origin is Literal:
            if not isinstance(value, str):
                raise ValueError(value)
            return _text(value, path)
        if origin is list:
            (item,) = typing.get_args(t)
            if isinstance(value, str):
                value = _parse_list_string(value, split_commas=item in COMMA_SPLIT_ITEMS)
            if not isinstance(value, list | tuple):
                raise ValueError(value)
            return [_coerce_item(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise ConfigError(path, f"expected {_type_name(t)}, got {short_repr(value)}") from e
    return value


#: Item types of list fields whose ``--set`` plain text is split on commas: a number never holds one.
#: Free text (prompts, paths, folders) may, so there a plain string is one item and several items are
#: written as a TOML array: ``--set 'sampling.prompts=["a, b", "c"]'``.
COMMA_SPLIT_ITEMS: tuple[type, ...] = (float,)


def _coerce_item(item: type, value: Any, where: str) -> Any:
    """One item of a list field, or a ConfigError naming ``where`` (e.g. ``optimizer.betas[1]``)."""
    try:
        if item is DatasetFolder:
            folder = DatasetFolder.from_value(value)
            _text(folder.path, where)
            return folder
        if item is float:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise TypeError(value)
            return float(value)
        if item is str:
            if not isinstance(value, str):
                raise TypeError(value)
            return _text(value, where)
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        detail = str(e) if item is DatasetFolder and str(e) else f"expected {_type_name(item)}, got {short_repr(value)}"
        raise ConfigError(where, detail) from e
    raise ConfigError(where, f"unsupported item type {item!r}")


def _text(value: str, where: str) -> str:
    """Text as it is, but never with a NUL character (no path or prompt holds one; the OS refuses it)."""
    if "\x00" in value:
        raise ConfigError(where, f"must not contain a NUL character, got {short_repr(value)}")
    return value


def _parse_list_string(value: str, *, split_commas: bool) -> list[Any]:
    """Text for a list field (``--set``): a TOML inline array ``["a, b", "c"]`` gives its items; other
    text is one item, or, with ``split_commas``, comma-separated items (``0.9, 0.99``). Empty text: []."""
    s = value.strip()
    if not s:
        return []
    if s.startswith("["):
        try:
            parsed = tomllib.loads(f"v = {s}")["v"]
        except (tomllib.TOMLDecodeError, RecursionError):
            parsed = None  # e.g. a prompt in A1111's "[from:to:0.5]" syntax: plain text
        if isinstance(parsed, list):
            return parsed
    if split_commas:
        return [v.strip() for v in s.split(",") if v.strip()]
    return [s]


def _type_name(t: Any) -> str:
    if t is DatasetFolder:
        return "a folder path or a table with `path` and `repeats`"
    if typing.get_origin(t) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(t))
    if typing.get_origin(t) is list:
        (item,) = typing.get_args(t)
        return {float: "a list of numbers", str: "a list of text"}.get(item, "a list")
    return {bool: "true or false", int: "a whole number", float: "a number", str: "text"}.get(t, str(t))


def _check_field(f: dataclasses.Field, value: Any, path: str) -> None:
    meta = f.metadata
    choices = field_choices(f)
    if choices is not None and value not in choices:
        raise ConfigError(path, f"must be one of {', '.join(repr(c) for c in choices)}, got {short_repr(value)}")
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value != value:  # NaN
            raise ConfigError(path, "must be a number, got NaN")
        if lo is not None and value < lo or hi is not None and value > hi:
            raise ConfigError(path, f"must be between {_fmt(lo)} and {_fmt(hi)}, got {_fmt(value)}")
    if isinstance(value, list) and value and isinstance(value[0], DatasetFolder):
        for i, folder in enumerate(value):
            if folder.repeats < 1 or folder.repeats > 1000:
                raise ConfigError(f"{path}[{i}].repeats", f"must be between 1 and 1000, got {folder.repeats}")


def _fmt(v: Any) -> str:
    if v is None:
        return "∞"
    if isinstance(v, float) and (abs(v) >= 1e6 or (v != 0 and abs(v) < 1e-3)):
        return f"{v:g}"
    return f"{v:g}" if isinstance(v, float) else str(v)


def find_line(text: str, path: str) -> int | None:
    """Line number (1-based) of ``field = ...`` inside ``[section]`` of a TOML text, for messages."""
    section, _, name = path.partition(".")
    name = name.split("[")[0]
    current = ""
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        m = re.match(r"^\[\s*([A-Za-z0-9_.]+)\s*\]", s)
        if m:
            current = m.group(1)
            continue
        if re.match(rf"^{re.escape(name)}\s*=", s) and current == section:
            return i
        if re.match(rf"^{re.escape(section)}\s*\.\s*{re.escape(name)}\s*=", s) and current == "":
            return i
    return None


# --------------------------------------------------------------------------- overlays, migrations

Migration = typing.Callable[[dict[str, Any]], dict[str, Any]]
#: schema_version N -> function turning a version-N dict into a version-(N+1) dict.
MIGRATIONS: dict[int, Migration] = {}


def schema_version_of(data: dict[str, Any]) -> int:
    """The ``schema_version`` of a config / preset dict (this app's when absent).

    Raises :class:`ConfigError` when it is not a whole number or is negative. A newer version than this
    app's is returned as is (:func:`migrate` warns about it).
    """
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError("schema_version", f"must be a whole number (this app writes {SCHEMA_VERSION}), got {short_repr(version)}")
    if version < 0:
        raise ConfigError("schema_version", f"must not be negative (this app writes {SCHEMA_VERSION}), got {version}")
    return version


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a dict from an older ``schema_version`` up to :data:`SCHEMA_VERSION`.

    A newer version than this app's warns (:class:`UnknownKeyWarning`): its known keys still apply and
    unknown ones are dropped, each with its own warning (as peft does). A version that is not a whole
    number, a negative one, or one with no migration raises :class:`ConfigError`.
    """
    if not isinstance(data, dict):
        raise ConfigError("(file)", f"must be a table of sections, got {type(data).__name__}")
    version = schema_version_of(data)
    data = copy.deepcopy(data)
    if version > SCHEMA_VERSION:
        warnings.warn(
            f"config schema_version {version} is newer than this app's {SCHEMA_VERSION}; unknown keys will be dropped",
            UnknownKeyWarning,
            stacklevel=3,
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ConfigError("schema_version", f"no migration from version {version} (this app writes {SCHEMA_VERSION})")
        data = MIGRATIONS[version](data)
        version += 1
    data["schema_version"] = SCHEMA_VERSION
    return data


def apply_overlay(base: TrainingConfig, overlay: dict[str, Any], *, source: str = "", text: str = "") -> TrainingConfig:
    """Return a copy of ``base`` with every key of the sparse ``overlay`` applied.

    Lists replace lists (they are values, not merged). Unknown sections and fields warn
    (:class:`UnknownKeyWarning`) and are dropped. Type errors raise :class:`ConfigError` naming
    the field, the source file and its line.
    """
    cfg = base.copy()
    try:
        data = migrate(overlay)
    except ConfigError as e:
        raise ConfigError(e.field, e.message, source=source, line=find_line_top(text, e.field) if text else None) from None
    data.pop("schema_version", None)
    data.pop("preset", None)  # preset header: name / description, not a setting
    where = f" in {source}" if source else ""
    for sname, values in data.items():
        if sname not in SECTIONS:
            warnings.warn(f"unknown section [{sname}]{where} ignored", UnknownKeyWarning, stacklevel=2)
            log.warning("unknown section [%s]%s ignored", sname, where)
            continue
        if not isinstance(values, dict):
            raise ConfigError(
                sname,
                f"must be a table of settings ([{sname}]), got {_kind(values)}",
                source=source,
                line=find_line_top(text, sname) if text else None,
            )
        known = {f.name for f in dataclasses.fields(SECTIONS[sname])}
        for key, value in values.items():
            path = f"{sname}.{key}"
            if key not in known:
                warnings.warn(f"unknown setting `{path}`{where} ignored", UnknownKeyWarning, stacklevel=2)
                log.warning("unknown setting `%s`%s ignored", path, where)
                continue
            try:
                cfg.set(path, value)
            except ConfigError as e:
                # e.field may be finer than path: `dataset.folders[1]`, `optimizer.betas[0]`
                raise ConfigError(e.field, e.message, source=source, line=find_line(text, path) if text else None) from None
    apply_lr_free_default(cfg, data)
    return cfg


def _kind(value: Any) -> str:
    """A value for messages: "a table", "a list", or the (shortened) value itself."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return f"text {short_repr(value)}"
    if isinstance(value, bool):
        return str(value).lower()
    return short_repr(value)


def find_line_top(text: str, key: str) -> int | None:
    """Line number (1-based) of a top-level ``key = ...`` or of a ``[key]`` / ``[[key]]`` header."""
    in_section = False
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if re.match(rf"^\[\[?\s*{re.escape(key)}\s*\]", s):
            return i
        if s.startswith("["):
            in_section = True
        elif not in_section and re.match(rf"^{re.escape(key)}\s*=", s):
            return i
    return None


def diff(base: TrainingConfig, cfg: TrainingConfig) -> dict[str, Any]:
    """The sparse overlay that turns ``base`` into ``cfg`` (what a preset file stores)."""
    a, b = base.to_dict(), cfg.to_dict()
    out: dict[str, Any] = {}
    for sname in SECTIONS:
        for k, v in b[sname].items():
            if a[sname].get(k) != v:
                out.setdefault(sname, {})[k] = v
    return out


# --------------------------------------------------------------------------- files


def parse_toml_text(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ConfigError("(file)", f"not valid TOML: {e}", source=source, line=int(m.group(1)) if m else None) from None
    except RecursionError:
        raise ConfigError("(file)", "not valid TOML: arrays or tables nested too deeply", source=source) from None


def load_toml(path: str | Path, base: TrainingConfig | None = None) -> TrainingConfig:
    """Load a config file (full or sparse) on top of ``base`` (defaults when None)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("(file)", "file not found", source=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigError("(file)", "not UTF-8 text; is this a config file?", source=str(path)) from None
    except OSError as e:  # a folder, no permission, ...
        raise ConfigError("(file)", f"cannot be read: {e.strerror or e}", source=str(path)) from None
    data = parse_toml_text(text, str(path))
    cfg = apply_overlay(base or TrainingConfig(), data, source=str(path), text=text)
    return cfg.validate_with_source(str(path), text)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``."""
    from guitrainer.core.fileio import atomic_write_bytes

    atomic_write_bytes(path, text.encode("utf-8"))


def save_toml(cfg: TrainingConfig, path: str | Path) -> None:
    atomic_write_text(path, cfg.to_toml())
