"""Base models: a diffusers folder, a single-file checkpoint (offline), a hub id, or the tiny built-in demo.

* diffusers folder (SD 1.5 or SDXL layout): :func:`load_diffusers_folder`.
* single file ``.safetensors`` (the civitai kind): :func:`load_single_file`. The family comes from the
  file's keys (:func:`guitrainer.core.model.checkpoint.detect_model`); the architecture configs, tokenizers
  and scheduler come from a local config folder (``resources/models/<family>``, no weights), so
  nothing is downloaded. ``.ckpt`` / ``.pt`` pickles are read only with ``torch.load(weights_only=True)``:
  anything but tensors is refused and never executed.
* hub id: downloaded (online) with progress reported through a callback, then loaded as a folder.

The demo model (:mod:`~guitrainer.engine.models.demo`) is built on first use and loaded like any other folder;
``model.vae`` replaces the base model's own VAE (:mod:`~guitrainer.engine.models.vae`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.constants import PICKLE_SUFFIXES
from guitrainer.base.errors import first_line
from guitrainer.base.paths import expand, resources_dir
from guitrainer.engine.models.demo import DEMO_NAME, ensure_demo_model
from guitrainer.engine.models.hub import HUB_ADVICE, download_model, is_offline
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, Progress, model_identity
from guitrainer.engine.models.vae import use_configured_vae

log = logging.getLogger(__name__)



# --------------------------------------------------------------------------- loading


def load_base_model(
    model_cfg: Any,
    *,
    offline: bool | None = None,
    config_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> LoadedModel:
    """Load ``model_cfg.base`` (a :class:`guitrainer.config.ModelConfig`), with ``model_cfg.vae`` as its VAE
    when set (:func:`~guitrainer.engine.models.vae.use_configured_vae`); arguments as :func:`_load_base`."""
    m = _load_base(model_cfg, offline=offline, config_dir=config_dir, progress=progress)
    vae = str(getattr(model_cfg, "vae", "") or "").strip()
    if vae:
        use_configured_vae(m, vae, offline=offline, progress=progress)
    return m


def _load_base(
    model_cfg: Any,
    *,
    offline: bool | None = None,
    config_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> LoadedModel:
    """Load the base model with its own VAE.

    Args:
        model_cfg: ``base`` is "demo", a diffusers folder, a single-file checkpoint or a hub id;
            ``family`` is "auto" or the family to expect.
        offline: no downloads (default: from ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``).
        config_dir: for single files, the folder with the architecture configs, tokenizers and
            scheduler (default ``resources/models/<family>``).
        progress: called as ``progress(what, done, total)`` while a hub model downloads.
    Raises:
        ModelLoadError: naming the file and what is wrong with it.
    """
    base = str(model_cfg.base).strip()
    family = str(getattr(model_cfg, "family", "auto"))
    if not base:
        raise ModelLoadError("no base model chosen: pick a diffusers folder, a .safetensors checkpoint or 'demo'")
    if base == DEMO_NAME:
        m = load_diffusers_folder(ensure_demo_model(), family="demo")
        m.source = "demo"
        return m
    path = expand(base)
    if path.is_dir():
        return load_diffusers_folder(path, family=family)
    if path.is_file() or path.suffix.lower() in (".safetensors", *PICKLE_SUFFIXES):
        return load_single_file(path, family=family, config_dir=config_dir)
    if offline is None:
        offline = is_offline()
    if offline:
        try:
            m = load_diffusers_folder(base, family=family, local_files_only=True)
        except (ModelLoadError, OSError, ValueError) as e:
            raise ModelLoadError(
                f"could not load the base model {base!r}: working offline, and it is not in the Hugging Face cache",
                ("connect to the network and unset HF_HUB_OFFLINE to download it", *HUB_ADVICE[1:]),
            ) from e
    else:
        folder = download_model(base, progress)
        m = load_diffusers_folder(folder, family=family)
    m.source = "hub"
    return m


def load_diffusers_folder(path: str | Path, *, family: str = "auto", local_files_only: bool = True) -> LoadedModel:
    """Load unet / vae / text encoder(s) / tokenizer(s) / scheduler from a diffusers layout (folder or hub id)."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    src = str(path)
    kw: dict[str, Any] = {"local_files_only": local_files_only}
    try:
        index = _read_model_index(path)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{Path(src) / 'model_index.json'} cannot be read: {e}") from e
    has_te2 = "text_encoder_2" in index and index["text_encoder_2"][0] is not None if index else Path(src, "text_encoder_2").is_dir()
    if family in ("auto", ""):
        family = "sdxl" if has_te2 else "sd15"
    part = "unet"
    try:
        unet = UNet2DConditionModel.from_pretrained(src, subfolder="unet", **kw)
        part = "vae"
        vae = AutoencoderKL.from_pretrained(src, subfolder="vae", **kw)
        part = "text_encoder"
        text_encoders = [CLIPTextModel.from_pretrained(src, subfolder="text_encoder", **kw)]
        part = "tokenizer"
        tokenizers = [CLIPTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)]
        if has_te2:
            part = "text_encoder_2"
            text_encoders.append(CLIPTextModelWithProjection.from_pretrained(src, subfolder="text_encoder_2", **kw))
            part = "tokenizer_2"
            tokenizers.append(CLIPTokenizer.from_pretrained(src, subfolder="tokenizer_2", **kw))
        part = "scheduler"
        scheduler = DDPMScheduler.from_pretrained(src, subfolder="scheduler", **kw)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelLoadError(f"{src} is not a complete diffusers model folder ({part}/ is missing or broken): {e}") from e
    _freeze(unet, vae, *text_encoders)
    ident = model_identity(src) if Path(src).is_dir() else hashlib.sha256(src.encode()).hexdigest()[:24]
    return LoadedModel(unet, vae, text_encoders, tokenizers, scheduler, family=family, path=src, identity=ident)


def _freeze(*modules: Any) -> None:
    for m in modules:
        m.requires_grad_(False)
        m.eval()


def _read_model_index(path: str | Path) -> dict[str, Any] | None:
    f = Path(path) / "model_index.json"
    if f.is_file():
        return json.loads(f.read_text(encoding="utf-8"))
    return None


# --------------------------------------------------------------------------- single-file checkpoints

#: what a config folder for single-file loading must hold, per family
CONFIG_FILES: dict[str, tuple[str, ...]] = {
    "sd15": (
        "unet/config.json",
        "vae/config.json",
        "text_encoder/config.json",
        "tokenizer/vocab.json|tokenizer/tokenizer.json",
        "tokenizer/merges.txt|tokenizer/tokenizer.json",
        "scheduler/scheduler_config.json",
    ),
}
CONFIG_FILES["sdxl"] = CONFIG_FILES["sd15"] + (
    "text_encoder_2/config.json",
    "tokenizer_2/vocab.json|tokenizer_2/tokenizer.json",
    "tokenizer_2/merges.txt|tokenizer_2/tokenizer.json",
)


def default_config_dir(family: str) -> Path:
    """``resources/models/<family>``: the shipped architecture configs (no weights)."""
    return resources_dir() / "models" / family


def load_single_file(path: str | Path, *, family: str = "auto", config_dir: str | Path | None = None) -> LoadedModel:
    """Load a single-file SD 1.5 / SDXL checkpoint (original layout) without any download.

    ``.safetensors`` is read directly; ``.ckpt`` / ``.pt`` only through ``torch.load(weights_only=True)``.
    """
    from guitrainer.core.model.checkpoint import CheckpointError, classify_keys, read_safetensors_header

    p = Path(path)
    name = p.name
    if not p.is_file():
        raise ModelLoadError(f"{p}: the model file does not exist. Check the path, or choose the model again.")
    suffix = p.suffix.lower()
    if suffix == ".safetensors":
        try:
            header, meta = read_safetensors_header(p)
        except CheckpointError as e:
            raise ModelLoadError(str(e)) from e
        detected, ok, _level, message, pred = classify_keys(header, meta, name=name)
        if not ok or detected is None:
            raise ModelLoadError(message)
        state = _load_safetensors(p)
    elif suffix in PICKLE_SUFFIXES:
        state = load_pickle_weights(p)
        shapes = {k: {"shape": list(v.shape)} for k, v in state.items()}
        detected, ok, _level, message, pred = classify_keys(shapes, name=name)
        if not ok or detected is None:
            raise ModelLoadError(message)
    else:
        raise ModelLoadError(f"{name} is not a model file: choose a .safetensors checkpoint or a diffusers folder.")
    if family in ("sd15", "sdxl") and family != detected:
        log.warning("%s: the settings say %s but the file is %s; using %s", name, family, detected, detected)
    cfg_dir = Path(config_dir) if config_dir else default_config_dir(detected)
    check_config_dir(cfg_dir, detected)
    try:
        m = _components_from_state(state, detected, cfg_dir, prediction_type=pred)
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - shape mismatches, missing keys: the file is not what it claims
        raise ModelLoadError(f"{name} does not match the {detected} architecture in {cfg_dir}: {e}") from e
    m.path, m.identity, m.source = str(p), model_identity(p), "single_file"
    return m


def check_config_dir(folder: Path, family: str) -> None:
    """Raise :class:`ModelLoadError` naming the first file a config folder lacks."""
    for choices in CONFIG_FILES[family]:
        rels = choices.split("|")
        if not any((folder / rel).is_file() for rel in rels):
            raise ModelLoadError(f"the model config folder {folder} is incomplete: {rels[0]} is missing (reinstall the app)")


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


def _components_from_state(
    state: dict[str, torch.Tensor], family: str, cfg_dir: Path, *, prediction_type: str | None = None
) -> LoadedModel:
    """Build the diffusers parts from an original-layout state dict and the configs in ``cfg_dir``.

    ``prediction_type`` (detected from the file, e.g. its ``v_pred`` key) overrides the config folder's
    scheduler, whose shipped value is "epsilon": the trainer takes its target from the scheduler.
    """
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from diffusers.loaders.single_file_utils import create_diffusers_clip_model_from_ldm
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    cfg = str(cfg_dir)
    kw: dict[str, Any] = {"config": cfg, "local_files_only": True}
    unet = UNet2DConditionModel.from_single_file(state, subfolder="unet", **kw)
    vae = AutoencoderKL.from_single_file(state, subfolder="vae", **kw)
    tes = [create_diffusers_clip_model_from_ldm(CLIPTextModel, state, subfolder="text_encoder", **kw)]
    toks = [CLIPTokenizer.from_pretrained(cfg, subfolder="tokenizer", local_files_only=True)]
    if family == "sdxl":
        tes.append(create_diffusers_clip_model_from_ldm(CLIPTextModelWithProjection, state, subfolder="text_encoder_2", **kw))
        toks.append(CLIPTokenizer.from_pretrained(cfg, subfolder="tokenizer_2", local_files_only=True))
    sched_kw: dict[str, Any] = {"prediction_type": prediction_type} if prediction_type else {}
    scheduler = DDPMScheduler.from_pretrained(cfg, subfolder="scheduler", local_files_only=True, **sched_kw)
    for te in tes:
        te.to(torch.float32)
    unet.to(torch.float32)
    vae.to(torch.float32)
    _freeze(unet, vae, *tes)
    return LoadedModel(unet, vae, tes, toks, scheduler, family=family)


