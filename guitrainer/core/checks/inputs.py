"""What ``guitrainer-train --check`` (and the CLI before training) checks on disk, beyond the config's values.

The image folders, the base model and the VAE (``model.vae``) exist and can be read; caption files are readable files; captions not
in UTF-8 are named (they are read in their own encoding, see :mod:`guitrainer.core.dataset.captions`). Pure Python,
no torch; nothing here blocks on a FIFO or follows a symlink loop.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from guitrainer.base.paths import expand
from guitrainer.config import TrainingConfig
from guitrainer.core.dataset.captions import encoding_label, read_caption
from guitrainer.core.dataset.scan import scan_folders
from guitrainer.core.model.init_lora import init_lora_problem
from guitrainer.core.model.vae_choice import vae_problem

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: how many file names a message quotes before "and N more"
SHOWN = 3


@dataclass
class InputReport:
    """Problems that stop a run (``errors``) and facts worth a word (``notes``), each naming the path."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_inputs(cfg: TrainingConfig, *, captions: bool = True) -> InputReport:
    """The folders, the base model and (with ``captions``) the caption files of ``cfg``."""
    report = InputReport()
    for key, what in (("folders", "image folder"), ("regularization_folders", "class image folder")):
        for i, folder in enumerate(getattr(cfg.dataset, key)):
            problem = _folder_problem(folder.path)
            if problem:
                report.errors.append(f"dataset.{key}[{i}]: the {what} {folder.path!r} {problem}")
    base = cfg.model.base.strip()
    if base and base != "demo":
        problem = _model_problem(base)
        if problem:
            report.errors.append(f"model.base: {problem}")
    vae = vae_problem(cfg)
    if vae:
        report.errors.append(f"model.vae: {vae}")
    init = init_lora_problem(cfg.model.init_lora, cfg.network.type) if not cfg.schedule.resume_from else ""
    if init:
        report.errors.append(f"model.init_lora: {init}")
    if captions and not report.errors:
        _check_captions(cfg, report)
    return report


def _folder_problem(path: str) -> str:
    p = expand(path)
    try:
        if not p.exists():
            return "does not exist"
        if not p.is_dir():
            return "is not a folder"
        with os.scandir(p) as it:
            next(it, None)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return ""


def _model_problem(base: str) -> str:
    p = expand(base)
    try:
        if p.exists():
            if p.is_file() and not os.access(p, os.R_OK) or p.is_dir() and not os.access(p, os.R_OK | os.X_OK):
                return f"{base!r} cannot be read (no permission)"
            return ""
    except OSError as e:
        return f"{base!r} cannot be read ({e.strerror or e})"
    looks_like_path = base.startswith(("/", ".", "~", "\\")) or ":" in base or base.lower().endswith(
        (".safetensors", ".ckpt")
    )
    if looks_like_path or not _HUB_ID.match(base):
        return f"{base!r} was not found (a model folder, a .safetensors file, a hub id or 'demo')"
    return ""  # a hub id: checked when it is downloaded


def _check_captions(cfg: TrainingConfig, report: InputReport) -> None:
    d = cfg.dataset
    folders = [(f.path, f.repeats) for f in [*d.folders, *d.regularization_folders]]
    scan = scan_folders(folders, d.caption_extension, d.resolution, d.exclude)
    legacy: dict[str, list[str]] = {}
    broken: list[str] = []
    for item in scan.items:
        c = read_caption(item.caption_path)
        if c.problem:
            broken.append(c.problem)
        elif c.exists and not c.was_utf8:
            legacy.setdefault(c.encoding, []).append(item.caption_path.name)
    if broken:
        report.errors.append(f"{len(broken)} caption path(s) are not readable files: {_some(broken)}")
    for encoding, names in legacy.items():
        report.notes.append(
            f"{len(names)} caption(s) are not UTF-8; read as {encoding_label(encoding)}: {_some(names)}"
        )


def _some(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more

