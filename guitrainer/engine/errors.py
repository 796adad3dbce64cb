"""How a run ends early: the exceptions the engine raises on purpose, and the advice shown with them."""

from __future__ import annotations

import traceback

import torch

OOM_ADVICE = (
    "turn on gradient checkpointing (Model & Precision page)",
    "use a smaller batch size (raise gradient accumulation to keep the effective batch)",
    "use an 8-bit optimizer (AdamW8bit)",
    "cache latents so the VAE leaves memory",
    "lower the resolution",
)

#: a save that failed at the end of a run or on stop (full disk, read-only or misnamed output folder)
WRITE_ADVICE = (
    "choose another output folder, then resume from the saved state (or train again)",
    "free some disk space if the disk is full",
)

MODEL_ADVICE = (
    "check the base model: a diffusers folder, a hub id, or one .safetensors / .ckpt file",
    "if it is a file, check that it is complete (its size should match the download page)",
    "try the built-in demo model to check that training itself works",
)

DATASET_ADVICE = (
    "check the image folders on the Dataset page (images are read from each folder, not its subfolders)",
    "look at the images flagged as unreadable there; images removed from the Dataset page are left out of training "
    "(add their folder again to bring them back)",
)

LORA_ADVICE = (
    "check the LoRA you continue from (Model & Precision page): it must be a LoRA of the same model family",
    "clear “continue from” to train a new LoRA",
)

NAN_ADVICE = (
    "lower the learning rate (e.g. by 10x)",
    "keep gradient clipping on (max grad norm 1.0)",
    "use fp32 to rule out a precision problem",
    "check the dataset for broken images",
)


class TrainingFailed(Exception):
    """Stops the run with a message and advice; turned into a "failed" RunSummary."""

    def __init__(self, message: str, advice: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.advice = advice


COMPLETE_ADVICE = ("raise the number of epochs (or max steps), then resume to train more",)


class RunComplete(Exception):
    """The state to resume from has no steps left: nothing is trained and nothing is written."""


class StoppedBeforeTraining(Exception):
    """Stop was pressed during set-up (loading, caching): nothing was trained, so nothing is written."""


def details() -> str:
    """The exception being handled, as a traceback for the error dialog's "Show Details…"."""
    return traceback.format_exc()


def is_oom(e: BaseException) -> bool:
    """An out-of-memory error of any device (CUDA's type, or a RuntimeError that says so)."""
    oom_type = getattr(torch, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()
