"""What a run reads and writes on disk, checked before the model loads: the one set of disk checks the start check
(the Training page) and ``guitrainer-train --check`` share, so both say the same words.

The image, class image and validation folders exist, are folders and hold usable images; the base model, the
VAE (``model.vae``) and the LoRA to continue from (``model.init_lora``) are there and of a kind that can be read;
the output folder can be written; the state to resume from (``schedule.resume_from``) is a saved state whose
settings fit. ``--check`` also reads the caption files: unreadable ones are errors, captions not in UTF-8 and
images that cannot be read are named (see :mod:`guitrainer.core.dataset.captions`). Pure Python, no torch; nothing
here blocks on a named pipe, reads a device or raises for an odd path (:mod:`guitrainer.base.safe_open`).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from guitrainer.base import safe_open
from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core.dataset.captions import encoding_label, read_caption
from guitrainer.core.dataset.folder_check import FolderLook, look_at_folders
from guitrainer.core.dataset.scan import Flag, scan_folders
from guitrainer.core.families.facts import NamedTensors
from guitrainer.core.families.registry import facts
from guitrainer.core.memory.specs import config_family
from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header
from guitrainer.core.model.init_lora import init_lora_problem
from guitrainer.core.model.vae_choice import vae_problem, vae_warning
from guitrainer.core.runs import state as run_state

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: how many file names a message quotes before "and N more"
SHOWN = 3


@dataclass(frozen=True)
class Problem:
    """One finding about the disk: the setting it concerns, a sentence saying it, and whether it stops a run.

    Attributes:
        field: the setting, as the config names it: ``dataset.folders[0]``, ``model.base``, ``output.folder``.
        message: the sentence the start check shows (``--check`` prints it after the field).
        level: "error" stops a run; "note" is worth a word.
    """

    field: str
    message: str
    level: Literal["error", "note"] = "error"


@dataclass
class InputReport:
    """Problems that stop a run (``errors``) and facts worth a word (``notes``), each starting with the setting."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_inputs(cfg: TrainingConfig, *, captions: bool = True) -> InputReport:
    """:func:`disk_problems` (nothing is created) and, with ``captions``, the caption files, as ``--check`` prints
    them: ``<setting>: <the start check's sentence>``."""
    report = InputReport()
    for p in disk_problems(cfg, create_output=False):
        (report.errors if p.level == "error" else report.notes).append(f"{p.field}: {p.message}")
    if captions and not report.errors:
        _check_captions(cfg, report)
    return report


def disk_problems(
    cfg: TrainingConfig, *, create_output: bool, looks: list[FolderLook] | None = None
) -> list[Problem]:
    """Every disk check of a run, in the order a user fixes them. ``create_output``: make the output folder and
    write a probe file in it (the start, which writes there next); else only look (``--check``). ``looks``, when
    given, receives what the image-folder check found in each training and class image folder (the start's RAM
    estimate counts their images without listing them again)."""
    return [
        *dataset_problems(cfg, looks),
        *model_problems(cfg.model.base),
        *split_install_problems(cfg),
        *vae_problems(cfg),
        *init_lora_problems(cfg),
        *output_problems(cfg.output.folder, create=create_output),
        *resume_problems(cfg),
        *validation_problems(cfg),
    ]


# --------------------------------------------------------------------------- image folders


def dataset_problems(cfg: TrainingConfig, looks: list[FolderLook] | None = None) -> list[Problem]:
    """The training and class image folders: there, folders, readable, holding images training can use. ``looks``
    receives what was found in each folder (nothing for folders that are not there)."""
    d = cfg.dataset
    out: list[Problem] = []
    if not d.folders and cfg.model.base.strip() != "demo":  # the demo model brings its own images
        out.append(Problem("dataset.folders", "No training images: add an image folder on the Dataset page."))
    keys = [f"dataset.folders[{i}]" for i in range(len(d.folders))]
    out += folder_problems(d.folders, keys, "dataset.folders", d.caption_extension, d.exclude,
                           what="training images", label="image folder", looks=looks)
    keys = [f"dataset.regularization_folders[{i}]" for i in range(len(d.regularization_folders))]
    out += folder_problems(d.regularization_folders, keys, "dataset.regularization_folders", d.caption_extension,
                           d.exclude, what="class images", label="class image folder", looks=looks)
    return out


def validation_problems(cfg: TrainingConfig) -> list[Problem]:
    """``validation.folder``, as training reads it: each image once, nothing left out."""
    text = str(cfg.validation.folder)
    if not text.strip():
        return []
    return folder_problems([DatasetFolder(path=text, repeats=1)], ["validation.folder"], "validation.folder",
                           cfg.dataset.caption_extension, (), what="validation images", label="validation folder")


def folder_problems(
    folders: Sequence[DatasetFolder],
    keys: Sequence[str],
    key: str,
    caption_extension: str,
    exclude: Sequence[str],
    *,
    what: str,
    label: str,
    looks: list[FolderLook] | None = None,
) -> list[Problem]:
    """Errors for ``folders`` that training could not read (missing, not a folder, unreadable, or no usable image in
    any of them), notes for single folders that add nothing. ``keys`` name each folder's setting, ``key`` all of
    them; ``what`` names the images ("training images"), ``label`` one folder ("image folder"). ``looks``
    receives what was found in each folder, when every folder could be listed."""
    out = [Problem(k, f"The {label} “{printable(f.path)}” {why}.") for f, k in zip(folders, keys, strict=True)
           if (why := _folder_why(f.path))]
    if out or not folders:
        return out
    found = look_at_folders(folders, caption_extension, exclude)
    if looks is not None:
        looks.extend(found)
    looks = found
    empty = [(lk, k) for lk, k in zip(looks, keys, strict=True) if not lk.images]
    if len(empty) == len(looks):
        if len(looks) == 1:
            return [Problem(keys[0], f"No usable {what} in “{printable(looks[0].path)}”: {looks[0].reason()}.")]
        said = "; ".join(f"“{printable(lk.path)}”: {lk.reason()}" for lk in looks)
        return [Problem(key, f"No usable {what} in the {label}s: {said}.")]
    return [Problem(k, f"The {label} “{printable(lk.path)}” adds no {what}: {lk.reason()}.", "note") for lk, k in empty]


def _folder_why(path: str) -> str:
    """Why ``path`` is not a folder training can list ("" when it is)."""
    why = safe_open.problem(path, "folder")
    if why:
        return why
    try:
        with os.scandir(expand(path)) as it:
            next(it, None)
    except OSError as e:
        return "cannot be read (no permission)" if e.errno in (errno.EACCES, errno.EPERM) else \
            f"cannot be read ({e.strerror or e})"
    return ""


# --------------------------------------------------------------------------- models


def model_problems(base: str) -> list[Problem]:
    """``model.base``: chosen, and (unless it is a hub id, checked when it downloads) a readable folder or file."""
    text = str(base).strip()
    if not text:
        return [Problem("model.base", "No base model chosen: pick one on the Model & Precision page.")]
    if text == "demo":
        return []
    shown = printable(text)
    try:
        found = safe_open.look(text)
    except safe_open.PathError as e:
        return [Problem("model.base", f"The base model {e}. Choose a model folder or file on the Model & Precision page.")]
    if found.kind in ("file", "folder"):
        mode = os.R_OK if found.kind == "file" else os.R_OK | os.X_OK
        if not os.access(expand(text), mode):
            return [Problem("model.base", f"The base model “{shown}” cannot be read (no permission).")]
        return []
    if found.kind != "missing":  # a named pipe, a device: never taken for a hub id
        return [Problem("model.base", f"The base model “{shown}” is {safe_open.KIND_WORDS[found.kind]}, not a model "
                                      "file or folder. Choose a model folder or file on the Model & Precision page.")]
    looks_like_path = text.startswith(("/", ".", "~", "\\")) or ":" in text or text.lower().endswith(
        (".safetensors", ".ckpt")
    )
    if looks_like_path or not HUB_ID.match(text):
        why = safe_open.missing_reason(text).removeprefix("does not exist")
        return [Problem("model.base", f"The base model “{shown}” was not found{why}. Choose a model folder or file "
                                      "on the Model & Precision page.")]
    return []  # a hub id: checked when it is downloaded


def split_install_problems(cfg: TrainingConfig) -> list[Problem]:
    """A base model that is one .safetensors file of a family kept as split files (Flux.1, SD 3.5): the files chosen
    (``model.base``, ``model.text_encoders``, ``model.vae``) make one model, each recognised from its tensors
    (:attr:`~guitrainer.core.families.facts.FamilyFacts.check_parts`); a family of one-file checkpoints takes no
    text-encoder files."""
    base = str(cfg.model.base).strip()
    named = [str(t).strip() for t in cfg.model.text_encoders if str(t).strip()]
    if not base.lower().endswith(".safetensors") or safe_open.look(base).kind != "file":
        return []
    family = config_family(cfg)
    known = facts(family)
    if known.check_parts is None:
        if named:
            return [Problem("model.text_encoders", f"{known.label} checkpoints hold their own text encoders: clear "
                                                   "the text encoder files (they are for a split Flux.1 or SD 3.5 install).")]
        return []
    tables: list[NamedTensors] = []
    for field_name, path in [("model.base", base), *(("model.text_encoders", t) for t in named)]:
        try:
            tables.append((Path(path).name, read_safetensors_header(expand(path))[0]))
        except (CheckpointError, OSError) as e:
            return [Problem(field_name, f"“{printable(path)}” cannot be read as a .safetensors file: {e}.")]
    vae_text = str(cfg.model.vae).strip()
    vae: NamedTensors | None = None
    if vae_text.lower().endswith(".safetensors") and safe_open.look(vae_text).kind == "file":
        try:
            vae = (Path(vae_text).name, read_safetensors_header(expand(vae_text))[0])
        except (CheckpointError, OSError) as e:
            return [Problem("model.vae", f"“{printable(vae_text)}” cannot be read as a .safetensors file: {e}.")]
    report = known.check_parts(tables[0], tables[1:], vae)
    field_of = "model.text_encoders" if named else "model.base"
    return [*(Problem(field_of, m) for m in report.problems), *(Problem(field_of, m, "note") for m in report.notes)]


def vae_problems(cfg: TrainingConfig) -> list[Problem]:
    """``model.vae``: usable with this base model (an error), or usable but unlike the base's own (a note)."""
    problem = vae_problem(cfg)
    if problem:
        return [Problem("model.vae", problem.rstrip(".") + ".")]
    warning = vae_warning(cfg)
    return [Problem("model.vae", f"{warning}.", "note")] if warning else []


def init_lora_problems(cfg: TrainingConfig) -> list[Problem]:
    """``model.init_lora``: a LoRA file this network type continues (a resume continues its own state instead)."""
    if cfg.schedule.resume_from:
        return []
    problem = init_lora_problem(cfg.model.init_lora, cfg.network.type, cfg.network.dora_layout)
    return [Problem("model.init_lora", problem + ".")] if problem else []


# --------------------------------------------------------------------------- output and resume


def output_problems(folder: str, *, create: bool) -> list[Problem]:
    """``output.folder`` can be written: a folder (or one that can be made), on a disk that is not read-only, with
    permission. ``create`` makes it and writes a probe file (the start); else it is only looked at (``--check``)."""
    shown = printable(str(folder))
    why = _output_why(str(folder), create)
    return [Problem("output.folder", f"Cannot write to the output folder “{shown}”: {why}.")] if why else []


def _output_why(text: str, create: bool) -> str:
    try:
        found = safe_open.look(text)
    except safe_open.PathError as e:
        return f"it {e.reason}"
    if found.kind not in ("folder", "missing"):
        return f"it is {safe_open.KIND_WORDS[found.kind]}, not a folder"
    folder = expand(text)
    if found.kind == "missing":
        ancestor = _nearest_existing(folder)
        if ancestor is not None and _kind(ancestor) != "folder":
            return f"“{printable(str(ancestor))}” is {safe_open.KIND_WORDS[_kind(ancestor)]}, not a folder"
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".guitrainer-write-test-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            return _write_why(folder, e.errno or 0, e.strerror or str(e))
        return ""
    target = folder if found.kind == "folder" else _nearest_existing(folder)
    if target is not None and not os.access(target, os.W_OK | os.X_OK):
        return _write_why(target, errno.EACCES, "")
    return ""


def _nearest_existing(path: Path) -> Path | None:
    """``path``'s nearest ancestor that exists (as anything), or None."""
    for parent in path.parents:
        if _kind(parent) != "missing":
            return parent
    return None


def _kind(path: Path) -> str:
    try:
        return safe_open.look(path).kind
    except safe_open.PathError:
        return "missing"


def _write_why(where: Path, code: int, strerror: str) -> str:
    """A failed write in ``where`` in plain words: read-only disk, no permission, full disk."""
    if code == errno.EROFS or _read_only(where):
        return "the disk is mounted read-only"
    if code in (errno.EACCES, errno.EPERM):
        return "no permission to write there"
    if code == errno.ENOSPC:
        return "the disk is full"
    if code == errno.ENOTDIR:
        return "a part of the path is a file, not a folder"
    return strerror or os.strerror(code)


def _read_only(where: Path) -> bool:
    """The disk holding ``where`` (or its nearest existing ancestor) is mounted read-only."""
    target = where if _kind(where) != "missing" else _nearest_existing(where)
    try:
        return target is not None and bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs on Windows
        return False


def resume_problems(cfg: TrainingConfig) -> list[Problem]:
    """``schedule.resume_from``: a saved state whose settings this run may continue (errors), and what changed that
    a resumed run allows but should say (notes). Checked before the model loads; the engine checks again."""
    value = str(cfg.schedule.resume_from)
    if not value.strip():
        return []
    key, shown = "schedule.resume_from", printable(value)
    if not run_state.is_state_folder(value):
        why = safe_open.problem(value, "folder")
        return [Problem(key, f"“{shown}” is not a saved training state" + (f": it {why}." if why else "."))]
    try:
        info = run_state.read_info(value)
        mismatches = run_state.resume_mismatches(info, cfg)
        differences = run_state.resume_differences(info, cfg)
    except Exception as e:  # noqa: BLE001 - a damaged state: the engine refuses it with the details
        return [Problem(key, f"The saved state “{shown}” cannot be read: {e}")]
    out = []
    for setting, was, now in mismatches:
        label = run_state.setting_label(cfg, setting)
        out.append(Problem(key, f"The saved state was trained with {label} = {was!r}; it is {now!r} now. "
                                f"Set {label} back to {was!r} to resume, or start a new run."))
    for setting, was, now in differences:
        label = run_state.setting_label(cfg, setting)
        then, today = run_state.shown_value(setting, was), run_state.shown_value(setting, now)
        out.append(Problem(key, f"The saved state was trained with {label} = {then}; it is {today} now, so the latents "
                                f"differ from the ones the run learned from so far (set {label} back to {then} to "
                                "continue from the same latents).", "note"))
    return out


# --------------------------------------------------------------------------- captions (--check only)


def _check_captions(cfg: TrainingConfig, report: InputReport) -> None:
    """Caption files that are not readable files (errors), captions not in UTF-8 and images that cannot be read
    (notes: training reads the one and skips the other). Opens every image's header: ``--check`` only."""
    d = cfg.dataset
    folders = [(f.path, f.repeats) for f in [*d.folders, *d.regularization_folders]]
    scan = scan_folders(folders, d.caption_extension, d.resolution, d.exclude)
    legacy: dict[str, list[str]] = {}
    broken: list[str] = []
    unreadable: list[str] = []
    for item in scan.items:
        if Flag.UNREADABLE in item.flags:
            unreadable.append(f"{printable(item.name)} ({item.problem or Flag.UNREADABLE.description})")
        c = read_caption(item.caption_path)
        if c.problem:
            broken.append(printable(c.problem))
        elif c.exists and not c.was_utf8:
            legacy.setdefault(c.encoding, []).append(printable(item.caption_path.name))
    if broken:
        report.errors.append(f"dataset.folders: {len(broken)} caption path(s) are not readable files: {_some(broken)}")
    for encoding, names in legacy.items():
        report.notes.append(
            f"dataset.folders: {len(names)} caption(s) are not UTF-8; read as {encoding_label(encoding)}: {_some(names)}"
        )
    if unreadable:
        report.notes.append(f"dataset.folders: {len(unreadable)} image(s) cannot be read and are skipped: "
                            f"{_some(unreadable)}")


def _some(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more
