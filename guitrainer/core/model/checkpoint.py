"""What a base model is, found instantly and without torch.

:func:`detect_model` looks at a path (or "demo", or a hub id) and says which family it is (SD 1.5 or
SDXL), what kind of thing it is, and, for anything this app cannot train on, why, in words an artist
understands. A ``.safetensors`` file is recognised from its header alone (8-byte little-endian length,
then JSON), so a 7 GB checkpoint is read in microseconds; a pickle ``.ckpt`` is recognised from the
key names in its ``data.pkl`` (scanned with :mod:`pickletools`, never unpickled).
"""

from __future__ import annotations

import json
import logging
import os
import pickletools
import re
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from guitrainer.base import safe_open
from guitrainer.base.constants import PICKLE_SUFFIXES
from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.core.families.registry import all_facts, facts

log = logging.getLogger(__name__)

Family = str  # a name of guitrainer.config.families.FAMILY_NAMES
Kind = Literal["diffusers_folder", "single_file", "hub_id", "demo", "missing", "unknown"]
Level = Literal["info", "warning", "error"]

SINGLE_FILE_SUFFIXES = (".safetensors",)
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit
#: largest JSON config of a model folder read (model_index.json, unet/config.json: a few kilobytes each)
MAX_JSON_BYTES = 16 * 1024 * 1024
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

def _supported() -> str:
    """The families this app trains, for refusals: "This app trains LoRAs for SD 1.5, SDXL and Flux.1 base models."."""
    labels = [f.label for f in all_facts() if f.name != "demo"]
    listed = ", ".join(labels[:-1]) + f" and {labels[-1]}" if len(labels) > 1 else labels[0]
    return f"This app trains LoRAs for {listed} base models."



@dataclass(frozen=True)
class ModelDetection:
    """What :func:`detect_model` found.

    Attributes:
        family: "sd15", "sdxl", "demo", or None when unknown or unsupported.
        kind: "diffusers_folder", "single_file", "hub_id", "demo", "missing" or "unknown".
        message: one or two sentences for the user.
        ok: True when training can use it (possibly with a warning).
        level: "info" (fine), "warning" (usable, read this) or "error" (cannot be used).
        prediction_type: "epsilon" / "v_prediction" when known.
    """

    family: Family | None
    kind: Kind
    message: str
    ok: bool
    level: Level = "info"
    path: str = ""
    prediction_type: str | None = None

    @property
    def family_label(self) -> str:
        return facts(self.family).label if self.family else "unknown"


class CheckpointError(ValueError):
    """A checkpoint file cannot be read; the message names the file and what is wrong."""


# --------------------------------------------------------------------------- safetensors header


def read_safetensors_header(path: str | Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensor table and ``__metadata__`` of a .safetensors file, from its header only.

    Returns:
        (tensors, metadata): tensors maps a name to ``{"dtype", "shape", "data_offsets"}``.
    Raises:
        CheckpointError: the file is too short, truncated, or its header is not safetensors JSON.
    """
    p = Path(path)
    name = p.name
    try:
        with safe_open.open_file(p) as f:  # a named pipe or a device is refused before it is opened
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"{name} is only {size} bytes: a .safetensors file starts with an 8-byte header length."
                )
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER_BYTES:
                raise CheckpointError(f"{name} is not a .safetensors file: its header length ({n} bytes) makes no sense.")
            if n > size - 8:
                raise CheckpointError(
                    f"{name} is truncated: its header needs {n} bytes but only {size - 8} follow "
                    "(incomplete download?)."
                )
            raw = f.read(n)
    except safe_open.PathError as e:
        raise CheckpointError(f"{printable(name)} {e.reason}.") from e
    except OSError as e:
        raise CheckpointError(f"{printable(name)} cannot be read: {e.strerror or e}.") from e
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{name} is not a valid .safetensors file: its header is not JSON ({e}).") from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{name} is not a valid .safetensors file: its header is not a table of tensors.")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{name} is not a valid .safetensors file: its __metadata__ is not a table.")
    metadata = {str(k): str(v) for k, v in metadata.items()}
    data_end = 0
    for key, info in header.items():
        if not isinstance(info, dict) or "shape" not in info or "data_offsets" not in info:
            raise CheckpointError(f"{name} is not a valid .safetensors file: entry {key!r} has no shape or offsets.")
        offsets = info["data_offsets"]
        if (
            not isinstance(offsets, list | tuple)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise CheckpointError(
                f"{name} is not a valid .safetensors file: entry {key!r} has malformed data offsets ({offsets!r:.60})."
            )
        shape = info["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise CheckpointError(f"{name} is not a valid .safetensors file: entry {key!r} has a malformed shape.")
        data_end = max(data_end, offsets[1])
    available = size - 8 - n
    if data_end > available:
        raise CheckpointError(
            f"{name} is truncated: its tensors need {data_end:,} bytes of data but the file holds only "
            f"{available:,} (incomplete download? download it again)."
        )
    return header, {str(k): str(v) for k, v in metadata.items()}


# --------------------------------------------------------------------------- key analysis


def _shape(tensors: Mapping[str, Any], key: str) -> list[int] | None:
    info = tensors.get(key)
    if isinstance(info, dict):
        return list(info.get("shape") or [])
    return None


def classify_keys(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, name: str = "This file"
) -> tuple[Family | None, bool, Level, str, str | None]:
    """Family of a single-file checkpoint from its key names (and the shapes that matter).

    Args:
        tensors: key -> safetensors header entry (``{"shape": ...}``), or key -> None when shapes are unknown.
        metadata: the file's ``__metadata__``.
    Returns:
        (family, ok, level, message, prediction_type)
    """
    metadata = metadata or {}
    keys = list(tensors)
    n = len(keys)
    if metadata.get("ss_network_module") or any(
        s in k for k in keys for s in ("lora_down", "lora_up", "lora_A", "lora_B", "hada_w1", "lokr_w1")
    ):
        return None, False, "error", (
            f"{name} is a LoRA, not a base model ({n} LoRA tensors). Choose the checkpoint the LoRA was made for; "
            "to keep training this LoRA, set it as 'Continue from LoRA' instead."
        ), None
    # The transformer families recognise their own files (core/families/<name>.py). A family that takes the file
    # wins over another's refusal of it (families that share block names, as Flux.1 and Chroma do, each refuse the
    # other's variants by name), whatever the order of the list.
    refusal: tuple[None, bool, Level, str, str | None] | None = None
    for known in all_facts():
        if known.detect_file is not None:
            verdict = known.detect_file(tensors, metadata, name)
            if verdict is not None:
                ok, level, message, prediction = verdict
                if ok:
                    return known.name, ok, level, message, prediction
                refusal = refusal or (None, ok, level, message, prediction)
    if refusal is not None:
        return refusal
    has = lambda prefix: any(k.startswith(prefix) for k in keys)  # noqa: E731
    pred = None
    if "v_pred" in tensors or metadata.get("modelspec.prediction_type", "").lower() in ("v", "v_prediction"):
        pred = "v_prediction"
    unet = has("model.diffusion_model.")
    if not unet:
        if has("double_blocks.") or has("model.diffusion_model.double_blocks."):
            what = "a Flux model"
        elif has("joint_blocks.") or has("model.diffusion_model.joint_blocks."):
            what = "a Stable Diffusion 3 model"
        elif has("down_blocks.") and "conv_in.weight" in tensors:
            what = "one part (the UNet or VAE) of a diffusers model; choose the folder that holds model_index.json"
        elif has("text_model.") or has("encoder.down_blocks."):
            what = "one part (a text encoder or VAE) of a model, not a whole checkpoint"
        else:
            sample = ", ".join(repr(k) for k in keys[:2]) or "no tensors"
            what = f"not a Stable Diffusion checkpoint (no UNet keys; {n} tensors, e.g. {sample})"
        return None, False, "error", f"{name} is {what}. {_supported()}", pred
    conv_in = _shape(tensors, "model.diffusion_model.input_blocks.0.0.weight")
    if conv_in and len(conv_in) == 4 and conv_in[1] != 4:
        kind = "an inpainting model" if conv_in[1] == 9 else f"a model with {conv_in[1]} input channels (e.g. instruct-pix2pix)"
        return None, False, "error", (
            f"{name} is {kind}: its UNet takes {conv_in[1]} channels, not 4. Use the normal (non-inpainting) "
            "version of this model."
        ), pred
    if has("conditioner.embedders.1.model."):
        family: Family = "sdxl"
    elif has("conditioner.embedders.0.model."):
        return None, False, "error", (
            f"{name} is an SDXL refiner. LoRAs are trained on the SDXL base model; choose that instead."
        ), pred
    elif has("cond_stage_model.model."):
        return None, False, "error", (
            f"{name} is a Stable Diffusion 2.x model (OpenCLIP text encoder), which is not supported. {_supported()}"
        ), pred
    elif has("cond_stage_model.transformer."):
        family = "sd15"
    else:
        return None, False, "error", (
            f"{name} has a UNet but no text encoder this app knows (no cond_stage_model / conditioner keys). {_supported()}"
        ), pred
    label = facts(family).label
    if pred == "v_prediction":
        return family, True, "warning", (
            f"{label} checkpoint that predicts v (v-prediction, marked in the file). The LoRA is trained with a "
            "v-prediction target; use it with v-prediction models (v-prediction switched on where you generate)."
        ), pred
    return family, True, "info", f"{label} checkpoint ({n} tensors).", pred


# --------------------------------------------------------------------------- pickle checkpoints


def pickle_keys(path: str | Path, *, limit: int = 64 * 1024 * 1024) -> dict[str, None]:
    """Key names of a torch zip checkpoint, read from ``data.pkl`` with pickletools (never unpickled)."""
    with zipfile.ZipFile(path) as zf:
        entry = next((i for i in zf.infolist() if i.filename.endswith("data.pkl")), None)
        if entry is None:
            raise CheckpointError(f"{Path(path).name} is a zip without data.pkl, not a torch checkpoint.")
        if entry.file_size > limit:
            raise CheckpointError(f"{Path(path).name}: its data.pkl is {entry.file_size:,} bytes, too large to scan.")
        data = zf.read(entry)
    keys: dict[str, None] = {}
    try:
        for _op, arg, _pos in pickletools.genops(data):
            if isinstance(arg, str) and "." in arg and " " not in arg and len(arg) < 300:
                keys[arg] = None
    except Exception as e:  # noqa: BLE001 - a damaged pickle: keep what was read so far
        log.debug("pickle scan of %s stopped: %s", path, e)
    return keys


# --------------------------------------------------------------------------- detection


def detect_model(path: str | Path) -> ModelDetection:
    """What ``path`` is: "demo", a diffusers folder, a single-file checkpoint, or a hub id. Never raises."""
    text = str(path).strip()
    if not text:
        return ModelDetection(None, "missing", "Choose a base model: a folder, a .safetensors file, or the built-in demo.", False, "error")
    if text == "demo":
        return ModelDetection("demo", "demo", "Built-in tiny demo model: trains on a CPU in seconds.", True, path=text)
    p = expand(text)
    try:
        kind = safe_open.look(p).kind
        if kind == "folder":
            return _detect_folder(p)
        if kind == "file":
            return _detect_file(p)
        if kind != "missing":  # a named pipe, a device: refused at once, never taken for a hub id
            why = f"is {safe_open.KIND_WORDS[kind]}, not a model file or folder"
            return ModelDetection(None, "unknown", f"{printable(text)} {why}.", False, "error", str(p))
    except safe_open.PathError as e:
        return ModelDetection(None, "unknown", f"{e}.", False, "error", str(p))
    except OSError as e:
        return ModelDetection(None, "unknown", f"{p.name} cannot be read: {e.strerror or e}.", False, "error", str(p))
    except Exception as e:  # noqa: BLE001 - detection must never take the UI down
        log.exception("model detection failed for %s", p)
        return ModelDetection(None, "unknown", f"{p.name} could not be checked: {e}.", False, "error", str(p))
    if _looks_like_hub_id(text):
        return _detect_hub_id(text)
    return ModelDetection(
        None, "missing", f"{printable(text)} {safe_open.missing_reason(text)}. Check the path, or browse for the model "
        "again.", False, "error", text
    )


def _looks_like_hub_id(text: str) -> bool:
    return bool(_HUB_ID.match(text)) and not text.lower().endswith(SINGLE_FILE_SUFFIXES + PICKLE_SUFFIXES)


def _detect_hub_id(text: str) -> ModelDetection:
    low = text.lower()
    note = "It is downloaded on first use (needs internet)."
    if "inpaint" in low or "refiner" in low:
        return ModelDetection(None, "hub_id", f"{text} looks like an inpainting or refiner model, which cannot be trained here. {_supported()}", False, "error", text)
    if re.search(r"stable-diffusion-2|sd-?2[.-]", low):
        return ModelDetection(None, "hub_id", f"{text} looks like Stable Diffusion 2.x, which is not supported. {_supported()}", False, "error", text)
    if "xl" in low:
        return ModelDetection("sdxl", "hub_id", f"Hugging Face model {text}, probably SDXL. {note}", True, "info", text)
    if re.search(r"v1[-_.]?[45]|sd-?1[-_.]?5|stable-diffusion-v1", low):
        return ModelDetection("sd15", "hub_id", f"Hugging Face model {text}, probably SD 1.5. {note}", True, "info", text)
    return ModelDetection(
        None, "hub_id", f"Hugging Face model {text}: its family is detected when it is downloaded. {note}", True, "warning", text
    )


def _read_json(p: Path) -> dict[str, Any] | None:
    """A model's JSON config (None when there is none); :class:`safe_open.PathError` for one that cannot be read:
    a named pipe, a device, a file over :data:`MAX_JSON_BYTES`, text that is not JSON."""
    if safe_open.look(p).kind == "missing":
        return None
    data = safe_open.read_json(p, limit=MAX_JSON_BYTES, what="a model config")
    return data if isinstance(data, dict) else None


def _detect_folder(folder: Path) -> ModelDetection:
    where = str(folder)
    name = folder.name or where
    if (folder / "guitrainer_demo.json").is_file():
        return ModelDetection("demo", "diffusers_folder", "The built-in tiny demo model.", True, "info", where)
    try:
        index = _read_json(folder / "model_index.json")
    except safe_open.PathError as e:
        return ModelDetection(None, "diffusers_folder", f"{printable(name)}/model_index.json {e.reason}.", False, "error",
                              where)
    if index is None:
        files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.ckpt"))
        if files:
            hint = f"It holds {len(files)} checkpoint file{'s' if len(files) != 1 else ''} (e.g. {files[0].name}): choose one of them."
        else:
            hint = "Choose a diffusers model folder (with model_index.json) or a .safetensors checkpoint."
        return ModelDetection(None, "unknown", f"{name} is not a diffusers model folder (no model_index.json). {hint}", False, "error", where)
    cls = str(index.get("_class_name", ""))
    for known in all_facts():  # the transformer families recognise their own folders (core/families/<name>.py)
        if known.detect_folder is not None and known.detect_folder(index):
            return ModelDetection(known.name, "diffusers_folder", f"{known.label} diffusers model.", True, "info", where)  # type: ignore[arg-type]
    try:
        unet_cfg = _read_json(folder / "unet" / "config.json")
        te_cfg = _read_json(folder / "text_encoder" / "config.json")
        sched = _read_json(folder / "scheduler" / "scheduler_config.json")
    except safe_open.PathError as e:
        return ModelDetection(None, "diffusers_folder", f"{printable(name)} has a config file that cannot be read: "
                              f"{e}.", False, "error", where)
    if unet_cfg is None:
        return ModelDetection(None, "diffusers_folder", f"{name} is incomplete: it has no unet/config.json.", False, "error", where)
    in_channels = int(unet_cfg.get("in_channels", 4))
    if "Inpaint" in cls or in_channels != 4:
        return ModelDetection(
            None, "diffusers_folder",
            f"{name} is an inpainting model (its UNet takes {in_channels} channels). Use the normal version of this model.",
            False, "error", where,
        )
    family: Family | None
    if cls == "StableDiffusionPipeline":
        if te_cfg is not None and int(te_cfg.get("hidden_size", 768)) == 1024:
            return ModelDetection(
                None, "diffusers_folder", f"{name} is a Stable Diffusion 2.x model, which is not supported. {_supported()}",
                False, "error", where,
            )
        family = "sd15"
    elif cls in ("StableDiffusionXLPipeline", "StableDiffusionXLImg2ImgPipeline"):
        te = index.get("text_encoder")
        if cls.endswith("Img2ImgPipeline") and (not te or te == [None, None]):
            return ModelDetection(
                None, "diffusers_folder", f"{name} is an SDXL refiner. LoRAs are trained on the SDXL base model.", False, "error", where
            )
        family = "sdxl"
    else:
        return ModelDetection(
            None, "diffusers_folder", f"{name} is a {cls or 'unknown'} model, which is not supported. {_supported()}", False, "error", where
        )
    pred = str((sched or {}).get("prediction_type", "epsilon"))
    label = facts(family).label
    if pred == "v_prediction":
        return ModelDetection(
            family, "diffusers_folder",
            f"{label} diffusers model that predicts v (v-prediction, from its scheduler). The LoRA is trained with "
            "a v-prediction target; use it with v-prediction models (v-prediction switched on where you generate).",
            True, "warning", where, pred,
        )
    return ModelDetection(family, "diffusers_folder", f"{label} diffusers model.", True, "info", where, pred)


def _detect_file(p: Path) -> ModelDetection:
    where = str(p)
    suffix = p.suffix.lower()
    if suffix in SINGLE_FILE_SUFFIXES:
        try:
            tensors, metadata = read_safetensors_header(p)
        except CheckpointError as e:
            return ModelDetection(None, "single_file", str(e), False, "error", where)
        family, ok, level, message, pred = classify_keys(tensors, metadata, name=p.name)
        return ModelDetection(family, "single_file", message, ok, level, where, pred)
    if suffix in PICKLE_SUFFIXES:
        pickle_note = "Pickle checkpoint: convert it to .safetensors, or it will be loaded with weights_only=True."
        try:
            keys = pickle_keys(p) if zipfile.is_zipfile(p) else {}
        except (CheckpointError, zipfile.BadZipFile, OSError) as e:
            return ModelDetection(None, "single_file", f"{p.name} cannot be read: {e}", False, "error", where)
        if not keys:
            return ModelDetection(None, "single_file", f"{pickle_note} Its family could not be read; choose it below.", True, "warning", where)
        family, ok, level, message, pred = classify_keys(keys, name=p.name)
        if not ok:
            return ModelDetection(None, "single_file", message, False, "error", where, pred)
        return ModelDetection(family, "single_file", f"{message} {pickle_note}", True, "warning", where, pred)
    if p.name == "model_index.json":
        return _detect_folder(p.parent)
    return ModelDetection(
        None, "unknown",
        f"{p.name} is not a model file. Choose a .safetensors checkpoint or a diffusers folder.",
        False, "error", where,
    )
