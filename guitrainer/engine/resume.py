"""The resumable state: what is written at a save and read back by ``schedule.resume_from``.

The folder's names and JSON are :mod:`guitrainer.core.runs.state`'s; this module fills it with tensors: the
trainable LoRA weights (safetensors), the optimizer, lr-scheduler, GradScaler and RNG states
(``torch.save``, read back with ``weights_only=True``), and :class:`Progress` (where the run is).
"""

from __future__ import annotations

import errno
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from guitrainer.base import safe_open
from guitrainer.base.fileio import atomic_write_bytes, atomic_write_with
from guitrainer.config import TrainingConfig
from guitrainer.config.files import config_from_dict
from guitrainer.core.runs import state as run_state
from guitrainer.engine.errors import RunComplete, TrainingFailed

#: settings a saved state must share with the run that resumes it
DAMAGED_ADVICE = (
    "resume from another saved state, or start the training again",
    "a state is written by guitrainer only: never load one from an untrusted source",
)


@dataclass
class Progress:
    """Where the run is: what a resumable state stores besides weights, optimizer and RNG."""

    global_step: int = 0
    epoch: int = 0  # 0-based epoch being trained
    batch_pos: int = 0  # next batch of ``epoch``
    skipped_total: int = 0
    consecutive_skips: int = 0
    last_loss: float | None = None


def rng_state() -> dict[str, Any]:
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


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(gauss)))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_parameters(session: Any) -> dict[str, torch.nn.Parameter]:
    """The trainable parameters by their state name (``unet.<name>``, ``te<i>.<name>``)."""
    m = session.model
    named = {f"unet.{n}": p for n, p in m.denoiser.named_parameters() if p.requires_grad}
    if session.train_te:
        for i, te in enumerate(m.text_encoders):
            named.update({f"te{i}.{n}": p for n, p in te.named_parameters() if p.requires_grad})
    return named


def trainable_state(session: Any) -> dict[str, torch.Tensor]:
    """The trainable weights on the CPU, contiguous, as the state file holds them."""
    return {k: p.detach().cpu().contiguous() for k, p in trainable_parameters(session).items()}


def write_state(
    target: Path,
    session: Any,
    progress: Progress,
    intermediates: list[str],
    *,
    final_lora: dict[str, Any] | None = None,
    between: Any = None,
) -> None:
    """Write the state into a temp folder beside ``target``, then swap it in (:func:`run_state.swap_in`).

    ``intermediates`` and ``final_lora`` (the run's final LoRA so far: ``path``, the ``step`` it was saved at and
    its ``stamp``, size and mtime) are the LoRA files the run wrote: a resumed run prunes the first, keeps the
    second under its step's name when it writes its own final LoRA (if it is still the file written then), and
    writes over nothing else.

    Raises whatever the writers raise (``OSError``, safetensors' own errors); the previous state stays whole.
    """
    from safetensors.torch import save_file

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = run_state.temp_folder(target)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    s, p = session, progress
    try:
        weights = trainable_state(s)
        atomic_write_with(tmp / run_state.WEIGHTS_FILE, lambda f: save_file(weights, str(f)))
        atomic_write_with(tmp / run_state.OPTIMIZER_FILE, lambda f: torch.save(s.optimizer.state_dict(), f))
        atomic_write_with(tmp / run_state.SCHEDULER_FILE, lambda f: torch.save(s.lr_scheduler.state_dict(), f))
        if s.scaler is not None:
            atomic_write_with(tmp / run_state.SCALER_FILE, lambda f: torch.save(s.scaler.state_dict(), f))
        atomic_write_with(tmp / run_state.RNG_FILE, lambda f: torch.save(rng_state(), f))
        info = {
            "version": run_state.STATE_VERSION,
            "global_step": p.global_step,
            "epoch": p.epoch,
            "batch_pos": p.batch_pos,
            "skipped_total": p.skipped_total,
            "last_loss": p.last_loss,
            "total_steps": s.total_steps,
            "dataset_len": len(s.dataset),
            "class_dataset_len": len(s.class_dataset) if s.class_dataset is not None else 0,
            "intermediates": intermediates,
            "final_lora": final_lora,
            "config": s.config.to_dict(),
        }
        atomic_write_bytes(tmp / run_state.STATE_FILE, json.dumps(info, indent=2).encode("utf-8"))
        run_state.swap_in(tmp, target, between=between)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_checked_info(folder: Path, config: TrainingConfig) -> dict[str, Any]:
    """The state's JSON, refused in plain words when damaged or made with settings that must match."""
    try:
        info = run_state.read_info(folder)
    except run_state.StateError as e:
        raise TrainingFailed(str(e), ("pick the <name>_state folder of a run", *DAMAGED_ADVICE[:1])) from None
    try:
        saved = config_from_dict(info["config"]) if "config" in info else None
    except Exception:  # noqa: BLE001 - any damage to the stored config
        raise TrainingFailed(f"{folder}: the settings stored in the state are damaged", DAMAGED_ADVICE) from None
    if saved is not None:
        for key, was, now in run_state.resume_mismatches(info, config):
            label = run_state.setting_label(config, key)
            raise TrainingFailed(
                f"cannot resume: {label} (`{key}`) was {was!r} in the saved state and is {now!r} now",
                (f"set {label} back to {was!r}, or start a new run",),
            )
    return info


def resume_warnings(info: dict[str, Any], config: TrainingConfig) -> list[str]:
    """What changed since the state was saved that a resumed run allows but should say (another VAE)."""
    try:
        changed = run_state.resume_differences(info, config)
    except Exception:  # noqa: BLE001 - damaged stored settings were refused by read_checked_info already
        return []
    return [f"{run_state.setting_label(config, key)} (`{key}`) was {run_state.shown_value(key, was)} in the saved "
            f"state and is {run_state.shown_value(key, now)} now: the latents differ from the ones the run "
            "learned from so far" for key, was, now in changed]


def resumable_info(folder: Path, session: Any, feedback: Any, progress: Progress) -> dict[str, Any]:
    """The state to resume from, read and checked (:func:`read_checked_info`), before anything is cached.

    A state with no steps left raises :class:`~guitrainer.engine.errors.RunComplete` (``progress`` then says
    where the run ended): the run is complete, nothing is trained or written.
    """
    info = read_checked_info(folder, session.config)
    for warning in resume_warnings(info, session.config):
        feedback.warn(warning)
    class_len = len(session.class_dataset) if session.class_dataset is not None else 0
    if info.get("dataset_len") != len(session.dataset) or info.get("class_dataset_len", 0) != class_len:
        feedback.warn("the dataset changed since the state was saved; the data order will differ from an unbroken run")
    done, total = int(info["global_step"]), session.total_steps
    if done >= total:
        progress.global_step, progress.epoch, progress.last_loss = done, int(info.get("epoch", 0)), info.get("last_loss")
        feedback.status(f"the run in {folder} is already complete ({done} of {total} steps)")
        raise RunComplete(
            f"this run is already complete: all {total} steps were trained (state: {folder}); "
            "nothing was trained and no new file was written"
        )
    return info


def _load(folder: Path, name: str, loader: Any) -> Any:
    """One file of the state; a damaged or tampered one is refused in plain words (never PyTorch's advice
    to retry with ``weights_only=False``, which would run a pickle from the file)."""
    path = folder / name
    try:  # a named pipe or a device under a state file's name would block torch.load or never end
        safe_open.require(path, "file")
    except safe_open.PathError as e:
        if e.errno == errno.ENOENT:
            raise TrainingFailed(f"{folder}: {name} is missing; the state is incomplete", DAMAGED_ADVICE) from None
        raise TrainingFailed(f"{folder}: {name} {e.reason}; the state is damaged", DAMAGED_ADVICE) from None
    try:
        return loader(path)
    except FileNotFoundError:
        raise TrainingFailed(f"{folder}: {name} is missing; the state is incomplete", DAMAGED_ADVICE) from None
    except Exception as e:  # noqa: BLE001 - truncated files, pickles with code, safetensors' own errors
        kind = "refused: it holds more than plain tensors" if "weights_only" in str(e) else "damaged"
        raise TrainingFailed(f"{folder}: {name} is {kind} and was not loaded", DAMAGED_ADVICE) from None


def load_state(folder: Path, session: Any, progress: Progress, info: dict[str, Any]) -> list[str]:
    """Load a state written by :func:`write_state` into the session and ``progress``; returns its
    intermediate saves. Everything is read and checked before anything changes."""
    from safetensors.torch import load_file

    device = session.device
    weights = _load(folder, run_state.WEIGHTS_FILE, lambda p: load_file(str(p)))
    named = trainable_parameters(session)
    if set(named) != set(weights):
        raise TrainingFailed(f"{folder}: the saved LoRA does not match this network", ("check rank and layers trained",))
    optimizer = _load(folder, run_state.OPTIMIZER_FILE, lambda p: torch.load(p, map_location=device, weights_only=True))
    scheduler = _load(folder, run_state.SCHEDULER_FILE, lambda p: torch.load(p, weights_only=True))
    scaler = None
    if session.scaler is not None and (folder / run_state.SCALER_FILE).is_file():
        scaler = _load(folder, run_state.SCALER_FILE, lambda p: torch.load(p, weights_only=True))
    rng = _load(folder, run_state.RNG_FILE, lambda p: torch.load(p, weights_only=True))
    try:
        with torch.no_grad():
            for k, prm in named.items():
                prm.copy_(weights[k].to(prm.device, prm.dtype))
        session.optimizer.load_state_dict(optimizer)
        session.lr_scheduler.load_state_dict(scheduler)
        if scaler is not None:
            session.scaler.load_state_dict(scaler)
        set_rng_state(rng)
        p = progress
        p.global_step, p.epoch, p.batch_pos = int(info["global_step"]), int(info["epoch"]), int(info["batch_pos"])
        p.skipped_total, p.last_loss = int(info.get("skipped_total", 0)), info.get("last_loss")
        return [str(x) for x in info.get("intermediates", [])]
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        raise TrainingFailed(f"{folder}: the state does not fit this run ({type(e).__name__})", DAMAGED_ADVICE) from None
