"""Loading SD 3 / 3.5 for training, offline: a diffusers folder, one checkpoint file, or the split files ComfyUI
users keep — each to the same diffusers modules, frozen, fp32, on the CPU.

* **diffusers folder** (``StableDiffusion3Pipeline``): ``transformer/``, ``vae/``, ``text_encoder/`` (CLIP-L),
  ``text_encoder_2/`` (CLIP-G), ``text_encoder_3/`` (T5-XXL, optional), their tokenizers, ``scheduler/``.
* **one file** in Stability's / ComfyUI's checkpoint layout: the MMDiT under ``model.diffusion_model.``, the VAE
  under ``first_stage_model.``, the text encoders under ``text_encoders.{clip_l,clip_g,t5xxl}.transformer.`` —
  whichever the file holds; what it lacks makes a :class:`ModelLoadError` that says to choose the split files.
* **split files** (:class:`~guitrainer.engine.families.base.ModelParts`): the transformer's file (which may carry the
  VAE, as Stability's ``sd3.5_large.safetensors`` does), ``clip_l``, ``clip_g``, optionally ``t5xxl``, and the VAE
  when the transformer's file has none. Checked first by :func:`guitrainer.core.families.sd35.check_parts`.

The transformer's config is read from its tensors (:func:`.convert.config_from_original`), so any depth loads;
the other parts' configs, the CLIP tokenizers and the scheduler come from ``config_dir`` (the app ships them in
``resources/models/sd35``). T5's tokenizer cannot be shipped: it is looked for in ``config_dir/tokenizer_3``,
beside the model's files (``tokenizer_3/``), then in the Hugging Face cache; failing that the error gives the
download command. Without T5 weights the model loads without T5 (:data:`.loaded.NO_T5_NOTE`).

Two choices the clients made and we follow:

* CLIP-L's pooled output is used **unprojected** for SD 3 when it comes from a checkpoint or a standalone
  ``clip_l.safetensors``: ComfyUI's ``sd3_clip`` builds CLIP-L with ``return_projected_pooled=False`` and
  diffusers' single-file loader sets its ``text_projection`` to the identity
  (``create_diffusers_clip_model_from_ldm``); a diffusers folder's own projection is kept as saved.
* T5's ``shared`` and ``encoder.embed_tokens`` are the same embedding; files carry one or both.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.core.families import sd35 as facts
from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.sd35 import convert
from guitrainer.engine.families.sd35.loaded import NO_T5_NOTE, loaded_model
from guitrainer.engine.models.state_dicts import in_dtype
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, model_identity

log = logging.getLogger(__name__)

#: where a T5-XXL tokenizer may already be in the Hugging Face cache: (repo, folder in it)
T5_TOKENIZER_REPOS: tuple[tuple[str, str], ...] = (
    ("stabilityai/stable-diffusion-3.5-large", "tokenizer_3"),
    ("stabilityai/stable-diffusion-3.5-medium", "tokenizer_3"),
    ("stabilityai/stable-diffusion-3-medium-diffusers", "tokenizer_3"),
    ("google/t5-v1_1-xxl", ""),
)
#: the commands that put a T5 tokenizer in the Hugging Face cache (the first repo is gated: accept its licence on
#: huggingface.co and ``hf auth login`` first; the second ships only ``spiece.model``, which needs sentencepiece)
T5_TOKENIZER_DOWNLOADS = (
    'hf download stabilityai/stable-diffusion-3.5-large --include "tokenizer_3/*"',
    "pip install sentencepiece && hf download google/t5-v1_1-xxl spiece.model tokenizer_config.json "
    "special_tokens_map.json",
)
#: what ``config_dir`` must hold for a checkpoint or split files (T5's config only when T5 is loaded)
CONFIG_FILES = (
    "vae/config.json", "text_encoder/config.json", "text_encoder_2/config.json", "scheduler/scheduler_config.json",
    "tokenizer/vocab.json", "tokenizer/merges.txt", "tokenizer_2/vocab.json", "tokenizer_2/merges.txt",
)
_F32 = torch.float32


# --------------------------------------------------------------------------- diffusers folder


def load_folder(
    path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = _F32, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """An SD 3 / 3.5 diffusers folder (or a hub id already in the cache), frozen; each weight in ``dtype`` (the VAE's in
    ``vae_dtype``, default ``dtype``) as it is read."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    src = str(path)
    d_kw: dict[str, Any] = {"local_files_only": local_files_only, "torch_dtype": dtype}
    t_kw: dict[str, Any] = {"local_files_only": local_files_only, "dtype": dtype}  # transformers 5's name
    part = "transformer"
    try:
        transformer = SD3Transformer2DModel.from_pretrained(src, subfolder="transformer", **d_kw)
        part = "vae"
        vae = AutoencoderKL.from_pretrained(src, subfolder="vae", **{**d_kw, "torch_dtype": vae_dtype or dtype})
        part = "text_encoder"
        encoders: list[nn.Module] = [CLIPTextModelWithProjection.from_pretrained(src, subfolder="text_encoder", **t_kw)]
        part = "text_encoder_2"
        encoders.append(CLIPTextModelWithProjection.from_pretrained(src, subfolder="text_encoder_2", **t_kw))
        part = "tokenizer"
        tokenizers: list[Any] = [CLIPTokenizer.from_pretrained(src, subfolder=sub, local_files_only=local_files_only)
                                 for sub in ("tokenizer", "tokenizer_2")]
        if _folder_has_t5(Path(src)) or not Path(src).is_dir():
            part = "text_encoder_3"
            encoders.append(T5EncoderModel.from_pretrained(src, subfolder="text_encoder_3", **t_kw))
            part = "tokenizer_3"
            tokenizers.append(T5TokenizerFast.from_pretrained(src, subfolder="tokenizer_3", local_files_only=local_files_only))
        part = "scheduler"
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(src, subfolder="scheduler", local_files_only=local_files_only)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelLoadError(f"{src} is not a complete SD 3.5 diffusers folder ({part}/ is missing or broken): {e}") from e
    _freeze(transformer, vae, *encoders)
    if len(encoders) < 3:
        log.warning("%s: %s", src, NO_T5_NOTE)
    identity = model_identity(src) if Path(src).is_dir() else hashlib.sha256(src.encode()).hexdigest()[:24]
    return loaded_model(
        transformer=transformer, vae=vae, text_encoders=encoders, tokenizers=tokenizers, scheduler=scheduler,
        variant=facts.version_of_config(dict(transformer.config)), path=src, identity=identity, source="folder",
    )


def _folder_has_t5(folder: Path) -> bool:
    """The folder's model_index names a T5 (diffusers writes ``[null, null]`` for a pipeline saved without it)."""
    import json

    index = folder / "model_index.json"
    if index.is_file():
        entry = json.loads(index.read_text(encoding="utf-8")).get("text_encoder_3")
        if not entry or entry[0] is None:
            return False
    return (folder / "text_encoder_3").is_dir()


# --------------------------------------------------------------------------- one file, split files


def load_single_file(
    path: Path, state: dict[str, torch.Tensor], *, config_dir: Path, dtype: torch.dtype = _F32,
    vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """One checkpoint file in Stability's / ComfyUI's layout (``state`` its tensors), the rest from ``config_dir``;
    each part in ``dtype`` (the VAE in ``vae_dtype``, default ``dtype``)."""
    report = facts.check_parts((path.name, state))
    if not report.ok:
        raise ModelLoadError(
            f"{path.name} does not hold a whole SD 3.5 model: " + "; ".join(report.problems) + ".",
            ("choose the transformer, clip_l, clip_g (and t5xxl) files together as the model's parts",),
        )
    states = {kind: _strip(state, prefix) for kind, (_name, prefix) in report.sources.items()}
    m = _assemble(states, config_dir, beside=[path.parent], notes=report.notes, name=path.name, dtype=dtype,
                  vae_dtype=vae_dtype or dtype)
    m.path, m.identity, m.source = str(path), model_identity(path), "single_file"
    return m


def load_parts(
    parts: ModelParts, *, config_dir: Path, dtype: torch.dtype = _F32, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """A split install: the transformer's file, the text encoders' files (any order) and the VAE's file; each part in
    ``dtype`` (the VAE in ``vae_dtype``, default ``dtype``)."""
    files = [parts.denoiser, *parts.text_encoders, *([parts.vae] if parts.vae else [])]
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise ModelLoadError(f"{missing[0]}: the file does not exist. Check the path, or choose the part again.")
    headers = {Path(f): _header(Path(f)) for f in files}
    unique = len({Path(f).name for f in files}) == len(set(map(Path, files)))
    label = {Path(f): Path(f).name if unique else str(f) for f in files}  # full paths only when two names clash
    report = facts.check_parts(
        (label[parts.denoiser], headers[parts.denoiser]),
        [(label[Path(f)], headers[Path(f)]) for f in parts.text_encoders],
        (label[parts.vae], headers[parts.vae]) if parts.vae else None,
    )
    if not report.ok:
        raise ModelLoadError("The model's files do not make an SD 3.5 model: " + "; ".join(report.problems) + ".")
    by_label = {label[Path(f)]: Path(f) for f in files}
    loaded: dict[Path, dict[str, torch.Tensor]] = {}
    states: dict[str, dict[str, torch.Tensor]] = {}
    for kind, (file_label, prefix) in report.sources.items():
        file = by_label[file_label]
        if file not in loaded:
            loaded[file] = _read_state(file)
        states[kind] = _strip(loaded[file], prefix)
    loaded.clear()
    beside = list(dict.fromkeys(Path(f).parent for f in files))
    m = _assemble(states, config_dir, beside=beside, notes=report.notes, name=parts.denoiser.name, dtype=dtype,
                  vae_dtype=vae_dtype or dtype)
    m.path, m.source = str(parts.denoiser), "split_files"
    m.identity = hashlib.sha256("\n".join(model_identity(f) for f in files).encode()).hexdigest()[:24]
    return m


def _header(path: Path) -> Mapping[str, Any]:
    """A file's tensor table without its data (a pickle is read whole: only its tensors' shapes are kept)."""
    from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header

    if path.suffix.lower() == ".safetensors":
        try:
            return read_safetensors_header(path)[0]
        except CheckpointError as e:
            raise ModelLoadError(str(e)) from e
    return {k: {"shape": list(v.shape)} for k, v in _read_state(path).items()}


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    from guitrainer.engine.models.loading import load_pickle_weights

    if path.suffix.lower() != ".safetensors":
        return load_pickle_weights(path)
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ModelLoadError(f"{path.name} cannot be read as .safetensors: {e}") from e


def _strip(state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under ``prefix``, without it ("" = the file's bare keys, less any checkpoint part's)."""
    if prefix:
        return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return facts.mmdit_keys(state, "") if facts.mmdit_prefix(state) == "" else dict(state)


def _assemble(
    states: Mapping[str, dict[str, torch.Tensor]], config_dir: Path, *, beside: Iterable[Path], notes: Iterable[str], name: str,
    dtype: torch.dtype = _F32, vae_dtype: torch.dtype = _F32,
) -> LoadedModel:
    """Build every part from its tensors (bare keys), its config from ``config_dir``, in ``dtype`` (the VAE in
    ``vae_dtype``); T5 only when given."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    from transformers import CLIPTokenizer

    check_config_dir(Path(config_dir), with_t5="t5" in states)
    cfg = str(config_dir)
    part = "transformer"
    try:
        transformer = build_transformer(states["transformer"], dtype)
        part = "VAE"
        vae = build_vae(states["vae"], Path(config_dir), vae_dtype)
        part = "CLIP-L"
        encoders: list[nn.Module] = [
            build_clip(states["clip_l"], Path(config_dir), "text_encoder", identity_projection=True, dtype=dtype)
        ]
        part = "CLIP-G"
        encoders.append(build_clip(states["clip_g"], Path(config_dir), "text_encoder_2", identity_projection=False, dtype=dtype))
        if "t5" in states:
            part = "T5-XXL"
            encoders.append(build_t5(states["t5"], Path(config_dir), dtype))
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - shape mismatches, missing keys: the file is not what it claims
        raise ModelLoadError(
            f"{name}: its {part} does not match the SD 3.5 architecture (configs in {cfg}): {first_line(e, 300)}"
        ) from e
    tokenizers: list[Any] = [CLIPTokenizer.from_pretrained(cfg, subfolder=s, local_files_only=True) for s in ("tokenizer", "tokenizer_2")]
    if "t5" in states:
        tokenizers.append(t5_tokenizer([Path(config_dir), *beside]))
    else:
        log.warning("%s: %s", name, NO_T5_NOTE)
    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(cfg, subfolder="scheduler", local_files_only=True)
    _freeze(transformer, vae, *encoders)
    return loaded_model(
        transformer=transformer, vae=vae, text_encoders=encoders, tokenizers=tokenizers, scheduler=scheduler,
        variant=facts.version_of_config(dict(transformer.config)), path="", identity="", source="single_file",
        notes=tuple(notes),
    )


def check_config_dir(folder: Path, *, with_t5: bool) -> None:
    """Raise :class:`ModelLoadError` naming the first file the config folder lacks."""
    needed = CONFIG_FILES + (("text_encoder_3/config.json",) if with_t5 else ())
    for rel in needed:
        if not (folder / rel).is_file():
            raise ModelLoadError(f"the model config folder {folder} is incomplete: {rel} is missing (reinstall the app)")


# --------------------------------------------------------------------------- the parts


def _refuse_scaled_fp8(state: Mapping[str, torch.Tensor], what: str) -> None:
    if "scaled_fp8" in state or any(k.endswith(".scale_weight") for k in state):
        raise ModelLoadError(
            f"the {what} is a scaled-fp8 file (ComfyUI's *_fp8_scaled): its weights need per-layer scales this app "
            "does not apply. Use the bf16 / fp16 file, or a plain float8_e4m3fn one."
        )


def build_transformer(original: Mapping[str, torch.Tensor], dtype: torch.dtype = _F32) -> nn.Module:
    """An ``SD3Transformer2DModel`` from original-layout MMDiT tensors (bare keys), its config read from them."""
    from accelerate import init_empty_weights
    from diffusers import SD3Transformer2DModel

    _refuse_scaled_fp8(original, "transformer")
    config = convert.config_from_original(original)
    weights = in_dtype(convert.to_diffusers(original), dtype)
    with init_empty_weights(include_buffers=True):
        model = SD3Transformer2DModel.from_config(config)
    model.load_state_dict(weights, strict=True, assign=True)
    return model


def build_vae(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype = _F32) -> nn.Module:
    """The 16-channel VAE from its tensors in the original (``encoder.down.0…``) or the diffusers layout."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    config = AutoencoderKL.load_config(str(config_dir), subfolder="vae", local_files_only=True)
    weights = dict(state)
    if any(k.startswith("encoder.down.") for k in weights):
        weights = convert_ldm_vae_checkpoint(weights, config)
    with init_empty_weights(include_buffers=True):
        model = AutoencoderKL.from_config(config)
    model.load_state_dict(in_dtype(weights, dtype), strict=True, assign=True)
    return model


def build_clip(
    state: Mapping[str, torch.Tensor], config_dir: Path, subfolder: str, *, identity_projection: bool, dtype: torch.dtype = _F32,
) -> nn.Module:
    """A ``CLIPTextModelWithProjection`` from a transformers-layout CLIP's tensors (``text_model.`` optional).

    ``identity_projection``: CLIP-L for SD 3, whose pooled output the clients use unprojected (see the module
    docstring); CLIP-G keeps its file's projection (identity, with a warning, when the file has none).
    """
    from accelerate import init_empty_weights
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    config = CLIPTextConfig.from_pretrained(str(config_dir), subfolder=subfolder, local_files_only=True)
    weights: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith("position_ids") or key == "logit_scale":
            continue  # a buffer older transformers saved, and the image-text logit scale: not text-model weights
        weights[key if key.startswith(("text_model.", "text_projection")) else f"text_model.{key}"] = value
    if identity_projection or "text_projection.weight" not in weights:
        if not identity_projection:
            log.warning("%s: the CLIP-G file has no text_projection; using the identity", subfolder)
        weights["text_projection.weight"] = torch.eye(config.projection_dim, config.hidden_size)
    with init_empty_weights(include_buffers=False):
        model = CLIPTextModelWithProjection(config)
    model.load_state_dict(in_dtype(weights, dtype), strict=True, assign=True)
    return model


def build_t5(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype = _F32) -> nn.Module:
    """A ``T5EncoderModel`` from a T5 v1.1 encoder's tensors (``shared`` and/or ``encoder.embed_tokens``)."""
    from accelerate import init_empty_weights
    from transformers import T5Config, T5EncoderModel

    _refuse_scaled_fp8(state, "T5-XXL")
    config = T5Config.from_pretrained(str(config_dir), subfolder="text_encoder_3", local_files_only=True)
    weights = {k: v for k, v in state.items() if not k.startswith(("decoder.", "lm_head."))}
    embedding = weights.get("shared.weight", weights.get("encoder.embed_tokens.weight"))
    if embedding is None:
        raise ModelLoadError("the T5-XXL file has no token embedding (shared.weight / encoder.embed_tokens.weight)")
    weights["shared.weight"] = weights["encoder.embed_tokens.weight"] = embedding
    with init_empty_weights(include_buffers=False):
        model = T5EncoderModel(config)
    model.load_state_dict(in_dtype(weights, dtype), strict=True, assign=True)
    model.encoder.embed_tokens = model.shared  # one embedding, as T5EncoderModel ties them
    return model


def t5_tokenizer(folders: Iterable[Path]) -> Any:
    """T5-XXL's tokenizer: ``<folder>/tokenizer_3`` for each folder given, then the Hugging Face cache
    (:data:`T5_TOKENIZER_REPOS`); :class:`ModelLoadError` with the download command when none is found."""
    from transformers import T5TokenizerFast

    tried: list[str] = []
    for folder in folders:
        candidate = Path(folder) / "tokenizer_3"
        tried.append(str(candidate))
        if (candidate / "tokenizer.json").is_file() or (candidate / "spiece.model").is_file():
            try:
                return T5TokenizerFast.from_pretrained(str(candidate), local_files_only=True)
            except (OSError, ValueError, ImportError) as e:
                log.warning("%s holds a T5 tokenizer that cannot be read: %s", candidate, e)
    for repo, sub in T5_TOKENIZER_REPOS:
        tried.append(f"{repo} in the Hugging Face cache")
        cached = _cached_tokenizer_folder(repo, sub)
        if cached is not None:
            try:
                return T5TokenizerFast.from_pretrained(str(cached), local_files_only=True)
            except (OSError, ValueError, ImportError) as e:
                log.info("the cached T5 tokenizer of %s cannot be read: %s", repo, e)
    raise ModelLoadError(
        "T5-XXL's tokenizer was not found (looked in " + ", ".join(tried) + "). The app cannot ship it; download it "
        f"once with `{T5_TOKENIZER_DOWNLOADS[0]}` (after accepting the model's licence on huggingface.co and "
        f"`hf auth login`), or with `{T5_TOKENIZER_DOWNLOADS[1]}`; or leave the T5 file out to train without T5.",
        advice=(
            f"download T5's tokenizer: {T5_TOKENIZER_DOWNLOADS[0]}",
            f"or: {T5_TOKENIZER_DOWNLOADS[1]}",
            "or train without T5: leave the t5xxl file out of the model's parts",
        ),
    )


def _cached_tokenizer_folder(repo: str, sub: str) -> Path | None:
    """The snapshot folder of ``repo``'s tokenizer in the Hugging Face cache, None when it is not there (no network)."""
    from huggingface_hub import try_to_load_from_cache

    for filename in ("tokenizer.json", "spiece.model"):
        found = try_to_load_from_cache(repo, f"{sub}/{filename}" if sub else filename)
        if isinstance(found, str):
            return Path(found).parent
    return None


def _freeze(*modules: nn.Module) -> None:
    for m in modules:
        m.requires_grad_(False)
        m.eval()
