"""Base models: a diffusers folder, a single-file checkpoint (offline), split files, a hub id, or the built-in demo.

Which family a base model is comes from its files (:func:`guitrainer.core.model.checkpoint.detect_model`:
a folder's model_index.json, a file's tensor names); the family's engine side
(:mod:`guitrainer.engine.families`) then loads it:

* diffusers folder: :meth:`~guitrainer.engine.families.base.Family.load_folder`.
* single file ``.safetensors`` (the civitai kind): :func:`load_single_file`; the architecture configs,
  tokenizers and scheduler come from a local config folder (``resources/models/<family>``, no weights), so
  nothing is downloaded. ``.ckpt`` / ``.pt`` pickles are read only with ``torch.load(weights_only=True)``:
  anything but tensors is refused and never executed.
* split files (a transformer file with ``model.text_encoders`` and ``model.vae``, as ComfyUI users keep them):
  :meth:`~guitrainer.engine.families.base.Family.load_parts`.
* hub id: downloaded (online) with progress reported through a callback, then loaded as a folder.

The demo model (:mod:`~guitrainer.engine.models.demo`) is built on first use and loaded like any other folder;
``model.vae`` replaces the base model's own VAE (:mod:`~guitrainer.engine.models.vae`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guitrainer.base import safe_open
from guitrainer.base.constants import PICKLE_SUFFIXES
from guitrainer.base.errors import first_line
from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.engine.families import registry
from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.stable_diffusion import has_second_text_encoder
from guitrainer.engine.models.demo import DEMO_NAME, ensure_demo_model
from guitrainer.engine.models.hub import HUB_ADVICE, download_model, is_offline
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, Progress, model_identity
from guitrainer.engine.models.vae import use_configured_vae, vae_needs_fp32

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the dtypes a model is built in


@dataclass(frozen=True)
class LoadDtypes:
    """The dtypes a base model's parts are built in: the ones the run will place them in, so that no part is first
    made in fp32 on the CPU (issue 30: Flux.1 dev's transformer is 47.6 GB in fp32, 23.8 GB in bf16). The default,
    fp32 throughout, is what Verify, the precision lab's reference and the tools load in.

    A file's fp16 weight cast straight to bf16 rounds once, as fp16 → fp32 (exact) → bf16 does: the weights are
    the same bits as loading in fp32 and casting afterwards.
    """

    weights: torch.dtype = torch.float32  # the denoiser and the text encoders
    vae: torch.dtype = torch.float32  # the VAE of a family whose VAE runs in fp16 whatever its config says
    vae_upcast: torch.dtype = torch.float32  # the VAE of a family whose VAE may need fp32 (its config decides)

    def vae_for(self, family_upcasts: bool) -> torch.dtype:
        """The VAE's dtype for a family whose facts say (``vae_upcast``) that its VAE may overflow in fp16."""
        return self.vae_upcast if family_upcasts else self.vae


def load_dtypes(precision: str, dtype: torch.dtype, device_type: str) -> LoadDtypes:
    """The dtypes a run of ``precision`` (compute dtype ``dtype``) on a ``device_type`` device casts each part to,
    known before the model loads: everything in ``dtype``; the VAE in fp32 where
    :func:`~guitrainer.engine.models.vae.vae_needs_fp32` keeps it there. Whether an upcasting family's VAE
    (SDXL's) must stay fp32 is read from its own config (``force_upcast``) only once it is loaded, so such a VAE is
    built in fp32 whenever it might have to be, and cast down afterwards if not."""
    def vae(family_upcasts: bool) -> torch.dtype:
        return torch.float32 if vae_needs_fp32(precision, family_upcasts, True, device_type) else dtype

    return LoadDtypes(weights=dtype, vae=vae(False), vae_upcast=vae(True))


def _family_dtypes(name: str, dtypes: LoadDtypes | None) -> dict[str, torch.dtype]:
    """The seam's ``dtype`` / ``vae_dtype`` keywords for family ``name``."""
    d = dtypes or LoadDtypes()
    return {"dtype": d.weights, "vae_dtype": d.vae_for(registry.family(name).facts.precision.vae_upcast)}


# --------------------------------------------------------------------------- loading


def load_base_model(
    model_cfg: Any,
    *,
    offline: bool | None = None,
    config_dir: str | Path | None = None,
    progress: Progress | None = None,
    dtypes: LoadDtypes | None = None,
) -> LoadedModel:
    """Load ``model_cfg.base`` (a :class:`guitrainer.config.ModelConfig`), with ``model_cfg.vae`` as its VAE
    when set (:func:`~guitrainer.engine.models.vae.use_configured_vae`); arguments as :func:`_load_base`."""
    m = _load_base(model_cfg, offline=offline, config_dir=config_dir, progress=progress, dtypes=dtypes)
    vae = str(getattr(model_cfg, "vae", "") or "").strip()
    if vae and not m.extra.get("split_vae"):  # a split install's VAE file was loaded with it
        vae_dtype = _family_dtypes(m.family, dtypes)["vae_dtype"]
        use_configured_vae(m, vae, offline=offline, progress=progress, dtype=vae_dtype)
    return m


def _load_base(
    model_cfg: Any,
    *,
    offline: bool | None = None,
    config_dir: str | Path | None = None,
    progress: Progress | None = None,
    dtypes: LoadDtypes | None = None,
) -> LoadedModel:
    """Load the base model with its own VAE (split files: with the VAE file given, as one model).

    Args:
        model_cfg: ``base`` is "demo", a diffusers folder, a single-file checkpoint or a hub id;
            ``family`` is "auto" or the family to expect; ``text_encoders`` the text-encoder files of a split
            install.
        offline: no downloads (default: from ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``).
        config_dir: for single files, the folder with the architecture configs, tokenizers and
            scheduler (default ``resources/models/<family>``).
        progress: called as ``progress(what, done, total)`` while a hub model downloads.
        dtypes: the dtypes the parts are built in (:func:`load_dtypes`); None: fp32.
    Raises:
        ModelLoadError: naming the file and what is wrong with it.
    """
    base = str(model_cfg.base).strip()
    configured = str(getattr(model_cfg, "family", "auto"))
    if not base:
        raise ModelLoadError("no base model chosen: pick a diffusers folder, a .safetensors checkpoint or 'demo'")
    if base == DEMO_NAME:
        m = registry.family(DEMO_NAME).load_folder(ensure_demo_model(), **_family_dtypes(DEMO_NAME, dtypes))
        m.source = "demo"
        return m
    path = expand(base)
    kind = _path_kind(base)  # before any hub lookup: a named pipe or a device is refused at once
    if kind == "folder":
        return load_folder(path, configured, dtypes=dtypes)
    if kind == "file" or path.suffix.lower() in (".safetensors", *PICKLE_SUFFIXES):
        parts = [str(p) for p in getattr(model_cfg, "text_encoders", []) or [] if str(p).strip()]
        if parts:
            vae = str(getattr(model_cfg, "vae", "") or "").strip()
            return load_split_files(path, parts, vae, configured, config_dir=config_dir, dtypes=dtypes)
        return load_single_file(path, family=configured, config_dir=config_dir, dtypes=dtypes)
    if offline is None:
        offline = is_offline()
    if offline:
        try:
            m = load_folder(base, configured, local_files_only=True, dtypes=dtypes)
        except (ModelLoadError, OSError, ValueError) as e:
            raise ModelLoadError(
                f"could not load the base model {base!r}: working offline, and it is not in the Hugging Face cache",
                ("connect to the network and unset HF_HUB_OFFLINE to download it", *HUB_ADVICE[1:]),
            ) from e
    else:
        folder = download_model(base, progress)
        m = load_folder(folder, configured, dtypes=dtypes)
    m.source = "hub"
    return m


def _path_kind(base: str) -> str:
    """What ``model.base`` names on disk ("folder", "file" or "missing": a hub id); anything else that is there (a
    named pipe, a device, a name too long) raises :class:`ModelLoadError` at once, never reaching the hub."""
    try:
        kind = safe_open.look(base).kind
    except safe_open.PathError as e:
        raise ModelLoadError(f"the base model {e}", ("choose a model folder or a .safetensors file",)) from None
    if kind in ("folder", "file", "missing"):
        return kind
    raise ModelLoadError(f"the base model “{printable(base)}” is {safe_open.KIND_WORDS[kind]}, not a model file or folder",
                         ("choose a model folder or a .safetensors file",))


def folder_family(path: str | Path, configured: str = "auto") -> str:
    """The family of a diffusers folder (or a hub id's cached snapshot): what its files say; SD 1.5 or SDXL by its
    second text encoder where they say nothing; ``configured`` (the settings' family) only warned about when
    it disagrees."""
    from guitrainer.core.model.checkpoint import detect_model

    found = detect_model(path).family if Path(str(path)).is_dir() else None
    if found is None:
        found = "sdxl" if has_second_text_encoder(path) else configured if configured not in ("auto", "") else "sd15"
    if configured not in ("auto", "", found):
        log.warning("%s: the settings say %s but the model is %s; using %s", path, configured, found, found)
    return found


def load_folder(
    path: str | Path, configured: str = "auto", *, local_files_only: bool = True, dtypes: LoadDtypes | None = None
) -> LoadedModel:
    """A diffusers folder (or a cached hub id) loaded by its family (:func:`folder_family`)."""
    src = str(path)
    try:
        name = folder_family(path, configured)
    except safe_open.PathError as e:
        raise ModelLoadError(f"the model's index {e}") from e
    except (OSError, ValueError) as e:  # a model_index.json that is not JSON
        raise ModelLoadError(f"{Path(src) / 'model_index.json'} cannot be read: {e}") from e
    special = safe_open.first_special_file(src) if Path(src).is_dir() else None
    if special is not None:  # the libraries would block on a named pipe or read a device without end
        raise ModelLoadError(f"{special} in the model folder is not a regular file (a named pipe or a device): "
                             "remove it, or choose another model")
    return registry.family(name).load_folder(str(path), local_files_only=local_files_only, **_family_dtypes(name, dtypes))


# --------------------------------------------------------------------------- single-file checkpoints

def read_checkpoint(path: str | Path) -> tuple[str, dict[str, torch.Tensor], str | None]:
    """(family, tensors, prediction type) of a single-file checkpoint, its family from its tensor names.

    ``.safetensors`` is read directly; ``.ckpt`` / ``.pt`` only through ``torch.load(weights_only=True)``.
    """
    from guitrainer.core.model.checkpoint import CheckpointError, classify_keys, read_safetensors_header

    p = Path(path)
    name = p.name
    why = safe_open.problem(p, "file")
    if why:
        raise ModelLoadError(f"{printable(str(p))}: the model file {why}. Check the path, or choose the model again.")
    suffix = p.suffix.lower()
    if suffix == ".safetensors":
        try:
            header, meta = read_safetensors_header(p)
        except CheckpointError as e:
            raise ModelLoadError(str(e)) from e
        detected, ok, _level, message, pred = classify_keys(header, meta, name=name)
        if not ok or detected is None:
            raise ModelLoadError(message)
        return detected, _load_safetensors(p), pred
    if suffix in PICKLE_SUFFIXES:
        state = load_pickle_weights(p)
        shapes = {k: {"shape": list(v.shape)} for k, v in state.items()}
        detected, ok, _level, message, pred = classify_keys(shapes, name=name)
        if not ok or detected is None:
            raise ModelLoadError(message)
        return detected, state, pred
    raise ModelLoadError(f"{name} is not a model file: choose a .safetensors checkpoint or a diffusers folder.")


def _config_dir(detected: str, config_dir: str | Path | None) -> Path:
    return Path(config_dir) if config_dir else registry.family(detected).default_config_dir()


def load_single_file(
    path: str | Path, *, family: str = "auto", config_dir: str | Path | None = None, dtypes: LoadDtypes | None = None
) -> LoadedModel:
    """Load a single-file checkpoint (original layout) without any download, by the family its tensors name."""
    p = Path(path)
    detected, state, pred = read_checkpoint(p)
    if family not in ("auto", "", detected):
        log.warning("%s: the settings say %s but the file is %s; using %s", p.name, family, detected, detected)
    fam = registry.family(detected)
    cfg_dir = _config_dir(detected, config_dir)
    try:
        m = fam.load_single_file(p, state, config_dir=cfg_dir, **_family_dtypes(detected, dtypes))
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - shape mismatches, missing keys: the file is not what it claims
        raise ModelLoadError(f"{p.name} does not match the {fam.facts.label} architecture in {cfg_dir}: {e}") from e
    if pred:
        fam.use_prediction_type(m, pred)
    m.path, m.identity, m.source = str(p), model_identity(p), "single_file"
    return m


def load_split_files(
    path: str | Path, text_encoders: list[str], vae: str, configured: str = "auto", *, config_dir: str | Path | None = None,
    dtypes: LoadDtypes | None = None,
) -> LoadedModel:
    """A split install: the denoiser's file ``path``, its ``text_encoders`` files and the ``vae`` file (or "")."""
    from guitrainer.core.model.checkpoint import CheckpointError, classify_keys, read_safetensors_header

    p = Path(path)
    try:
        header, meta = read_safetensors_header(p)
    except CheckpointError as e:
        raise ModelLoadError(str(e)) from e
    detected, ok, _level, message, _pred = classify_keys(header, meta, name=p.name)
    if not ok or detected is None:
        raise ModelLoadError(message)
    if configured not in ("auto", "", detected):
        log.warning("%s: the settings say %s but the file is %s; using %s", p.name, configured, detected, detected)
    fam = registry.family(detected)
    parts = ModelParts(denoiser=p, text_encoders=tuple(expand(t) for t in text_encoders), vae=expand(vae) if vae else None)
    m = fam.load_parts(parts, config_dir=_config_dir(detected, config_dir), **_family_dtypes(detected, dtypes))
    files = [p, *parts.text_encoders, *([parts.vae] if parts.vae else [])]
    m.path, m.source = str(p), "split_files"
    m.identity = hashlib.sha256("|".join(model_identity(f) for f in files).encode()).hexdigest()[:24]
    m.extra["split_vae"] = bool(parts.vae)
    return m


def _load_safetensors(p: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(p))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ModelLoadError(f"{p.name} cannot be read as .safetensors: {e}") from e


def load_pickle_weights(p: Path) -> dict[str, torch.Tensor]:
    """The tensors of a pickle checkpoint, read with ``torch.load(weights_only=True)``.

    A pickle that holds anything but tensors and plain containers (e.g. code run by ``__reduce__``)
    is refused with :class:`ModelLoadError`; its payload is never executed.
    """
    import pickle

    try:
        try:
            # Memory-mapped: the file's bytes stay in the (reclaimable) page cache instead of a second
            # private copy next to the model built from them; a 4-7 GB checkpoint needs that headroom.
            obj = torch.load(str(p), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            obj = torch.load(str(p), map_location="cpu", weights_only=True)  # legacy (pre-zip) format
    except pickle.UnpicklingError as e:
        raise ModelLoadError(
            f"{p.name} was refused: it is a pickle that holds more than weights (it could run code when loaded). "
            "Download the .safetensors version of this model, or convert it with a tool you trust. "
            f"Detail: {first_line(e, 200)}"
        ) from e
    except Exception as e:  # noqa: BLE001 - truncated zip, not a pickle at all...
        raise ModelLoadError(f"{p.name} cannot be read as a checkpoint (damaged or incomplete download?): {e}") from e
    while isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ModelLoadError(f"{p.name} does not hold a table of weights (found {type(obj).__name__})")
    state = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not state:
        raise ModelLoadError(f"{p.name} holds no weights")
    return state
