"""Checks across a config's values that a field's own range cannot express.

Each returns :class:`ConfigError`\\ s naming the field (``dataset.folders[1]``, ``optimizer.betas[0]``) and
what to do instead. :meth:`TrainingConfig.errors` runs them all; ``guitrainer-train --check`` prints the first.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from guitrainer.base.constants import IMAGE_EXTENSIONS, PICKLE_SUFFIXES
from guitrainer.base.names import NAME_MAX, name_problem, safe_name
from guitrainer.config.families import FAMILY_LABELS, FLOW_FAMILIES, LORA_FORMATS
from guitrainer.config.fields import ConfigError, short_repr

if TYPE_CHECKING:
    from guitrainer.config.training import TrainingConfig

#: longest a path may be before the names the trainer adds (PATH_MAX 4096 on Linux, less the file name)
FOLDER_MAX = 4096 - NAME_MAX
#: room the trainer's additions to ``output.name`` need: ``_<n>``, ``-<epoch>``, ``_state``, ``.safetensors``
NAME_SUFFIX_ROOM = 40
#: a caption extension longer than this is a mistake (``.txt``, ``.caption``); long ones break long image names
CAPTION_EXTENSION_MAX = 16
#: the VAE downsamples by 8: sample sizes must be multiples of it
SAMPLE_MULTIPLE = 8


def check_all(cfg: TrainingConfig) -> list[ConfigError]:
    """Every cross-value problem of ``cfg`` (empty when it can train)."""
    return [
        *_caption_extension(cfg.dataset.caption_extension),
        *_folder_paths(cfg),
        *_output(cfg.output.folder, cfg.output.name),
        *_betas(cfg.optimizer.betas),
        *_learning_rates(cfg),
        *_sample_size(cfg.sampling.size),
        *_network_format(cfg.network.type, cfg.output.format),
        *_dropout_kinds(cfg.network),
        *_vae_value(cfg.model.vae),
        *_text_encoder_files(cfg.model.text_encoders, cfg.model.base),
        *_family_network(cfg),
    ]


def _caption_extension(ext: str) -> list[ConfigError]:
    path = "dataset.caption_extension"
    text = ext.strip()
    if not text or text == ".":
        return [ConfigError(path, "must not be empty: captions are files like image.txt (use .txt)")]
    normal = text if text.startswith(".") else f".{text}"
    if normal.lower() in IMAGE_EXTENSIONS:
        return [ConfigError(path, f"{short_repr(ext)} is an image extension: each image would be read as its own "
                                  "caption; use .txt")]
    if any(c in normal for c in "/\\\x00") or normal in ("..",):
        return [ConfigError(path, f"must be a file extension like .txt, without folder separators, got {short_repr(ext)}")]
    if len(normal.encode("utf-8")) > CAPTION_EXTENSION_MAX:
        return [ConfigError(path, f"is too long ({len(normal.encode('utf-8'))} bytes; at most {CAPTION_EXTENSION_MAX}): "
                                  "caption file names must fit the file system; use .txt")]
    return []


def _folder_paths(cfg: TrainingConfig) -> list[ConfigError]:
    out: list[ConfigError] = []
    for key in ("folders", "regularization_folders"):
        for i, folder in enumerate(getattr(cfg.dataset, key)):
            if not folder.path.strip():
                out.append(ConfigError(f"dataset.{key}[{i}]", "the folder path is empty (it would mean the current "
                                                               "folder); give the image folder or remove the entry"))
    return out


def _output(folder: str, name: str) -> list[ConfigError]:
    out: list[ConfigError] = []
    if not folder.strip():
        out.append(ConfigError("output.folder", "must not be empty: choose where the LoRA files go"))
    else:
        expanded = os.path.expanduser(folder)
        if len(expanded.encode("utf-8", "surrogatepass")) > FOLDER_MAX:
            out.append(ConfigError("output.folder", f"is too long for the file system (over {FOLDER_MAX} bytes); "
                                                    "choose a shorter folder"))
        else:
            long_part = next((p for p in Path(expanded).parts if len(p.encode("utf-8", "surrogatepass")) > NAME_MAX), None)
            if long_part is not None:
                out.append(ConfigError("output.folder", f"has a folder name longer than {NAME_MAX} bytes "
                                                        f"({short_repr(long_part, 40)}); no file system allows it"))
    stripped = name.strip()
    limit = NAME_MAX - NAME_SUFFIX_ROOM
    if not stripped:
        out.append(ConfigError("output.name", "must not be empty: it is the LoRA's file name (e.g. my_lora)"))
    elif any(c in name for c in "/\\") or ".." in name or stripped in (".",):
        out.append(ConfigError("output.name", f"must be a plain file name without folder separators or '..', got "
                                              f"{short_repr(name)}; choose the folder in output.folder"))
    elif name_problem(name):
        out.append(ConfigError("output.name", f"{short_repr(name)} {name_problem(name)}; use "
                                              f"{short_repr(safe_name(name, 'my_lora'))}, a name every system can "
                                              "write (presets are shared)"))
    elif len(name.encode("utf-8", "surrogatepass")) > limit:
        out.append(ConfigError("output.name", f"is too long for the file system ({len(name.encode('utf-8', 'surrogatepass'))} "
                                              f"bytes; at most {limit}, leaving room for numbers and extensions)"))
    return out


def _betas(betas: list[float]) -> list[ConfigError]:
    if len(betas) != 2:
        return [ConfigError("optimizer.betas", "needs exactly two numbers, e.g. [0.9, 0.999]")]
    out = []
    for i, b in enumerate(betas):
        if not math.isfinite(b) or not 0.0 <= b < 1.0:
            out.append(ConfigError(f"optimizer.betas[{i}]", f"must be at least 0 and below 1 (e.g. 0.9, 0.999), got {b!r}"))
    return out


def _learning_rates(cfg: TrainingConfig) -> list[ConfigError]:
    if cfg.network.train_text_encoder and cfg.optimizer.text_encoder_lr <= 0:
        return [ConfigError("optimizer.text_encoder_lr", "must be above 0 while the text encoder is trained "
                                                         "(0 trains a text-encoder LoRA that does nothing)")]
    return []


def _network_format(network_type: str, fmt: str) -> list[ConfigError]:
    """LoCon, LoHa, LoKr and DoRA are written in the kohya/LyCORIS layout only (the one ComfyUI and A1111/Forge read)."""
    if fmt == "diffusers" and network_type != "lora":
        return [ConfigError("output.format", f"a {network_type} network is saved in kohya's format only; choose "
                                             "output.format kohya (ComfyUI, A1111/Forge read it) or network.type lora")]
    return []


def _dropout_kinds(network: object) -> list[ConfigError]:
    """Each network type has its own dropouts: input dropout (LoRA, LoCon, DoRA) or rank / module dropout (LoHa, LoKr)."""
    kind = network.type  # type: ignore[attr-defined]
    if kind in ("loha", "lokr") and network.dropout > 0:  # type: ignore[attr-defined]
        return [ConfigError("network.dropout", f"{kind} has no input dropout; set it to 0 and use "
                                               "network.rank_dropout or network.module_dropout")]
    if kind not in ("loha", "lokr") and (network.rank_dropout > 0 or network.module_dropout > 0):  # type: ignore[attr-defined]
        field = "network.rank_dropout" if network.rank_dropout > 0 else "network.module_dropout"  # type: ignore[attr-defined]
        return [ConfigError(field, f"applies to LoHa and LoKr only; {kind} uses network.dropout")]
    return []


def _sample_size(size: int) -> list[ConfigError]:
    if size % SAMPLE_MULTIPLE:
        lower = max(SAMPLE_MULTIPLE, size // SAMPLE_MULTIPLE * SAMPLE_MULTIPLE)
        return [ConfigError("sampling.size", f"must be a multiple of {SAMPLE_MULTIPLE}, got {size}; use {lower} or "
                                             f"{lower + SAMPLE_MULTIPLE}")]
    return []


def _vae_value(vae: str) -> list[ConfigError]:
    """``model.vae`` is read from .safetensors or a diffusers folder only: a pickle could run code when loaded.
    Whether the path exists and holds a VAE is a question for the disk (:func:`guitrainer.core.model.vae_choice.vae_problem`)."""
    text = vae.strip()
    if text.lower().endswith(PICKLE_SUFFIXES):
        return [ConfigError("model.vae", f"{short_repr(text)} is a pickle file, which could run code when loaded; "
                                         "choose the .safetensors version of the VAE or its diffusers folder")]
    if text == "demo":
        return [ConfigError("model.vae", "'demo' is a base model, not a VAE; leave the VAE empty to use the base "
                                         "model's own")]
    return []


def _text_encoder_files(files: list[str], base: str) -> list[ConfigError]:
    """Split installs name their text encoders' .safetensors files beside a base model that is one file."""
    path = "model.text_encoders"
    named = [f for f in files if str(f).strip()]
    if not named:
        return []
    for f in named:
        if not str(f).strip().lower().endswith(".safetensors"):
            return [ConfigError(path, f"{short_repr(f)} is not a .safetensors file; a split install's text encoders "
                                      "are .safetensors files (clip_l.safetensors, t5xxl_fp16.safetensors, …)")]
    if not str(base).strip().lower().endswith(".safetensors"):
        return [ConfigError(path, "text encoder files go with a base model that is one .safetensors file (the "
                                  "transformer of a split install); clear them for a diffusers folder or the demo")]
    return []


#: each ``output.format`` in words, for the message refusing one
FORMAT_WORDS = {"kohya": "kohya's layout (what ComfyUI, Forge and sd-scripts read)", "diffusers": "diffusers' layout"}


def _family_network(cfg: TrainingConfig) -> list[ConfigError]:
    """The transformer families train a plain LoRA; every family saves in the layouts it can write
    (:data:`~guitrainer.config.families.LORA_FORMATS`). A family of "auto" is checked when the model is known."""
    family = cfg.model.family
    label = FAMILY_LABELS.get(family, family)
    if family in FLOW_FAMILIES and cfg.network.type != "lora":
        return [ConfigError("network.type", f"{label} trains a plain LoRA here; LoCon, LoHa, LoKr and DoRA are for "
                                            "SD 1.5 and SDXL: set Network type to LoRA")]
    formats = LORA_FORMATS.get(family, ())
    if formats and cfg.output.format not in formats:
        written = " or ".join(FORMAT_WORDS[f] for f in formats)
        return [ConfigError("output.format", f"{label} LoRAs are saved in {written}, not in "
                                             f"{FORMAT_WORDS[cfg.output.format]}: set the format to {formats[0]}")]
    return []
