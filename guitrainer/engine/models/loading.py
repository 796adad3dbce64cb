"""Base models: a diffusers folder, a single-file checkpoint (offline), a hub id, or the tiny built-in demo.

* diffusers folder (SD 1.5 or SDXL layout): :func:`load_diffusers_folder`.
* single file ``.safetensors`` (the civitai kind): :func:`load_single_file`. The family comes from the
  file's keys (:func:`guitrainer.core.model.checkpoint.detect_model`); the architecture configs, tokenizers
  and scheduler come from a local config folder (``resources/models/<family>``, no weights), so
  nothing is downloaded. ``.ckpt`` / ``.pt`` pickles are read only with ``torch.load(weights_only=True)``:
  anything but tensors is refused and never executed.
* hub id: downloaded (online) with progress reported through a callback, then loaded as a folder.

The demo model is made from configs with a fixed seed (random weights, no download), saved as a
normal diffusers folder under ``user_data_dir()/models/demo`` and loaded like any other folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from guitrainer.base import safe_open
from guitrainer.base.names import printable
from guitrainer.base.paths import expand, resources_dir, user_data_dir
from guitrainer.core.model.clip_bpe import bytes_to_unicode

log = logging.getLogger(__name__)

DEMO_NAME = "demo"
#: bump when the demo model's architecture changes, so an old cached copy is rebuilt
DEMO_VERSION = 3
DEMO_WORDS = [
    *("a", "photo", "of", "red", "green", "blue", "yellow", "purple", "orange", "white", "black"),
    *("circle", "square", "small", "big", "on", "background", "shape", "drawing", "demo"),
]
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin")
#: largest model_index.json read (a few hundred bytes in every diffusers model)
MAX_JSON_BYTES = 16 * 1024 * 1024
#: ``progress(what, done, total)`` while a model is downloaded
Progress = Callable[[str, int, int], None]


class ModelLoadError(RuntimeError):
    """The base model could not be loaded; the message says what was tried and what to do.

    ``advice`` (optional) replaces the trainer's general model advice where the cause is known.
    """

    def __init__(self, message: str, advice: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.advice = advice


@dataclass
class LoadedModel:
    """The parts of a Stable Diffusion model the trainer needs (all on CPU, fp32, frozen as loaded).

    ``identity`` names the exact weights (path + sizes/mtimes of the weight files): caches key on it.
    ``vae_identity`` names the VAE's weights when ``model.vae`` replaced the base's own ("" otherwise): the
    latent cache keys on it too. ``source`` is "demo", "folder", "single_file" or "hub".
    """

    unet: Any
    vae: Any
    text_encoders: list[Any]
    tokenizers: list[Any]
    noise_scheduler: Any
    family: str  # "demo", "sd15", "sdxl"
    path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    identity: str = ""
    source: str = "folder"
    vae_identity: str = ""

    @property
    def text_encoder(self) -> Any:
        return self.text_encoders[0]

    @property
    def tokenizer(self) -> Any:
        return self.tokenizers[0]

    @property
    def prediction_type(self) -> str:
        return str(self.noise_scheduler.config.get("prediction_type", "epsilon"))

    @property
    def is_sdxl(self) -> bool:
        return len(self.text_encoders) > 1


# --------------------------------------------------------------------------- loading


def load_base_model(
    model_cfg: Any,
    *,
    offline: bool | None = None,
    config_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> LoadedModel:
    """Load ``model_cfg.base`` (a :class:`guitrainer.config.ModelConfig`), with ``model_cfg.vae`` as its VAE
    when set (:func:`guitrainer.engine.models.vae.use_configured_vae`); arguments as :func:`_load_base`."""
    m = _load_base(model_cfg, offline=offline, config_dir=config_dir, progress=progress)
    vae = str(getattr(model_cfg, "vae", "") or "").strip()
    if vae:
        from guitrainer.engine.models.vae import use_configured_vae

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
    kind = _path_kind(base)  # before any hub lookup: a named pipe or a device is refused at once
    if kind == "folder":
        return load_diffusers_folder(path, family=family)
    if kind == "file" or path.suffix.lower() in (".safetensors", *PICKLE_SUFFIXES):
        return load_single_file(path, family=family, config_dir=config_dir)
    from guitrainer.engine.models.hub import HUB_ADVICE, download_model, is_offline

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


def model_identity(path: str | Path) -> str:
    """A short hash naming exactly these weights: resolved path + (name, size, mtime) of every file under it."""
    p = Path(path)
    parts: list[str] = [str(p.resolve()) if p.exists() else str(path)]
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        parts.append(f"{f.relative_to(p) if f != p else f.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:24]


def load_diffusers_folder(path: str | Path, *, family: str = "auto", local_files_only: bool = True) -> LoadedModel:
    """Load unet / vae / text encoder(s) / tokenizer(s) / scheduler from a diffusers layout (folder or hub id)."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    src = str(path)
    kw: dict[str, Any] = {"local_files_only": local_files_only}
    try:
        index = _read_model_index(path)
    except safe_open.PathError as e:
        raise ModelLoadError(f"the model's index {e}") from e
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{Path(src) / 'model_index.json'} cannot be read: {e}") from e
    special = safe_open.first_special_file(src) if Path(src).is_dir() else None
    if special is not None:  # the libraries below would block on a named pipe or read a device without end
        raise ModelLoadError(f"{special} in the model folder is not a regular file (a named pipe or a device): "
                             "remove it, or choose another model")
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
    if safe_open.look(f).kind == "missing":
        return None
    return safe_open.read_json(f, limit=MAX_JSON_BYTES, what="a model index")


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
            f"Detail: {str(e).splitlines()[0][:200]}"
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


# --------------------------------------------------------------------------- demo model


def demo_model_dir() -> Path:
    return user_data_dir() / "models" / DEMO_NAME


def ensure_demo_model() -> Path:
    """Build the tiny demo model on first use (atomically: temp folder, then rename) and return its folder."""
    target = demo_model_dir()
    marker = target / "guitrainer_demo.json"
    if marker.is_file() and json.loads(marker.read_text()).get("version") == DEMO_VERSION:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo.", dir=target.parent))
    try:
        build_demo_model(tmp)
        (tmp / "guitrainer_demo.json").write_text(json.dumps({"version": DEMO_VERSION}))
        if target.exists():
            old = target.with_name(f".demo.old.{os.getpid()}")
            os.replace(target, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race; use theirs
            if not marker.is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("built the demo model in %s", target)
    return target


def _write_demo_tokenizer(tok_dir: Path) -> dict[str, int]:
    """The demo model's CLIP tokenizer files (its own tiny vocabulary); returns the vocabulary."""
    vocab, merges = demo_vocab()
    tok_dir.mkdir(parents=True, exist_ok=True)
    (tok_dir / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tok_dir / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n", encoding="utf-8")
    tok_cfg = {
        "tokenizer_class": "CLIPTokenizer",
        "model_max_length": 77,
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "do_lower_case": True,
    }
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2), encoding="utf-8")
    (tok_dir / "special_tokens_map.json").write_text(
        json.dumps({k: tok_cfg[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}), encoding="utf-8"
    )
    return vocab


def build_demo_model(folder: Path, seed: int = 0) -> None:
    """Write a tiny SD-1.x-shaped diffusers model (random weights from ``seed``) into ``folder``."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    folder = Path(folder)
    vocab = _write_demo_tokenizer(folder / "tokenizer")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(
            sample_size=8,
            in_channels=4,
            out_channels=4,
            block_out_channels=(32, 64),
            layers_per_block=1,
            down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32,
            attention_head_dim=8,
            norm_num_groups=32,
        )
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 3,
            up_block_types=("UpDecoderBlock2D",) * 3,
            block_out_channels=(32, 64, 64),
            layers_per_block=1,
            latent_channels=4,
            norm_num_groups=32,
            sample_size=64,
            scaling_factor=0.18215,
        )
        te_cfg = CLIPTextConfig(
            vocab_size=1000,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=77,
            bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=vocab["<|endoftext|>"],
            pad_token_id=vocab["<|endoftext|>"],
            projection_dim=32,
        )
        text_encoder = CLIPTextModel(te_cfg)
    scheduler = DDPMScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        prediction_type="epsilon",
        clip_sample=False,
        steps_offset=1,
    )
    unet.save_pretrained(folder / "unet")
    vae.save_pretrained(folder / "vae")
    text_encoder.save_pretrained(folder / "text_encoder")
    scheduler.save_pretrained(folder / "scheduler")
    index = {
        "_class_name": "StableDiffusionPipeline",
        "_diffusers_version": _version("diffusers"),
        "feature_extractor": [None, None],
        "safety_checker": [None, None],
        "requires_safety_checker": False,
        "scheduler": ["diffusers", "DDPMScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    (folder / "model_index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)


def demo_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A tiny CLIP BPE vocabulary: the byte alphabet (plain and word-final) plus merges for :data:`DEMO_WORDS`."""
    chars = list(bytes_to_unicode().values())
    tokens: list[str] = chars + [c + "</w>" for c in chars]
    merges: list[tuple[str, str]] = []
    for word in DEMO_WORDS:
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        left = parts[0]
        for right in parts[1:]:
            pair = (left, right)
            left = left + right
            if pair not in merges:
                merges.append(pair)
                if left not in tokens:
                    tokens.append(left)
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(tokens)}, merges


# --------------------------------------------------------------------------- demo dataset

_DEMO_SHAPES = (
    ("red", (220, 40, 40), "circle"),
    ("green", (40, 180, 60), "square"),
    ("blue", (40, 80, 220), "circle"),
    ("yellow", (230, 210, 40), "square"),
    ("purple", (150, 60, 190), "circle"),
    ("orange", (240, 140, 30), "square"),
    ("white", (245, 245, 245), "circle"),
    ("black", (15, 15, 15), "square"),
)


def demo_dataset_dir() -> Path:
    return user_data_dir() / "demo_dataset"


def ensure_demo_dataset(size: int = 96) -> Path:
    """Draw ~8 coloured circles / squares with .txt captions on first use; return the folder."""
    from PIL import Image, ImageDraw

    target = demo_dataset_dir()
    if (target / "done.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo_dataset.", dir=target.parent))
    try:
        for i, (color_name, rgb, shape) in enumerate(_DEMO_SHAPES):
            bg = (30, 30, 30) if color_name == "white" else (235, 235, 235)
            img = Image.new("RGB", (size, size), bg)
            draw = ImageDraw.Draw(img)
            m = size // 5 + (i % 3) * 4
            box = (m, m, size - m, size - m)
            if shape == "circle":
                draw.ellipse(box, fill=rgb)
            else:
                draw.rectangle(box, fill=rgb)
            img.save(tmp / f"{i:02d}_{color_name}_{shape}.png")
            (tmp / f"{i:02d}_{color_name}_{shape}.txt").write_text(f"a photo of a {color_name} {shape}", encoding="utf-8")
        (tmp / "done.json").write_text("{}")
        if not target.exists():
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
