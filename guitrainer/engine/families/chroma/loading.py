"""Loading Chroma: a diffusers folder (``ChromaPipeline``), one file holding everything (ComfyUI's checkpoint layout:
``model.diffusion_model.`` + ``text_encoders.t5xxl.transformer.`` + ``vae.``), or the split files its users keep
(``Chroma1-HD.safetensors``, ``t5xxl_fp16.safetensors``, Flux's ``ae.safetensors``) — always offline.

The parts a file does not describe come from the shipped configs (``resources/models/chroma``: the transformer of
Chroma1-HD, Flux's 16-channel VAE, the T5-XXL encoder, the scheduler); the transformer's widths and counts come
from its own tensors (:mod:`.convert`), so a tiny test model loads through the same code as the 8.9 B one. The VAE
and T5 are Flux's parts and are built by Flux's loaders (:mod:`guitrainer.engine.families.flux1.loading`), which
take the config folder they read from.

The T5 tokenizer (Google's ``spiece.model``) is not shipped: it is taken from the diffusers folder, a
``tokenizer/`` (or ``t5_tokenizer/``, ``tokenizer_2/``) folder beside the model files or in the config folder, or
the Hugging Face cache (Chroma1-HD's, FLUX.1's, ``google/t5-v1_1-xxl``); otherwise the error gives the one command
that downloads it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.core.families import chroma as facts
from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.chroma import convert
from guitrainer.engine.families.flux1 import loading as flux_loading
from guitrainer.engine.models.state_dicts import in_dtype
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, model_identity

#: where the Hugging Face cache may hold the T5-XXL tokenizer Chroma uses: (repo id, subfolder)
T5_TOKENIZER_REPOS: tuple[tuple[str, str], ...] = (
    ("lodestones/Chroma1-HD", "tokenizer"),
    ("lodestones/Chroma1-Base", "tokenizer"),
    *flux_loading.T5_TOKENIZER_REPOS,
)
T5_TOKENIZER_COMMAND = 'hf download lodestones/Chroma1-HD --include "tokenizer/*"'
T5_TOKENIZER_FOLDERS = ("tokenizer", "t5_tokenizer", "tokenizer_2")
#: the shipped config folder's name of T5's config (ChromaPipeline's ``text_encoder``)
T5_PART = "text_encoder"


def denoiser_of(model: LoadedModel) -> nn.Module:
    """The transformer of a loaded model."""
    return model.denoiser


def _assemble(
    transformer: nn.Module, vae: nn.Module, t5: nn.Module, tokenizer: Any, scheduler: Any,
    *, path: str, identity: str, source: str,
) -> LoadedModel:
    """The :class:`LoadedModel` of Chroma's parts (the one call that constructs it), frozen and in eval mode."""
    for module in (transformer, vae, t5):
        module.requires_grad_(False)
        module.eval()
    return LoadedModel(
        denoiser=transformer, vae=vae, text_encoders=[t5], tokenizers=[tokenizer], noise_scheduler=scheduler,
        family="chroma", path=path, identity=identity, source=source,
    )


def _read_config(config_dir: Path, part: str) -> dict[str, Any]:
    path = config_dir / part / ("scheduler_config.json" if part == "scheduler" else "config.json")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"the model config folder {config_dir} is incomplete: {path.name} of {part}/ cannot be "
                             f"read ({first_line(e)}); reinstall the app") from e


def transformer_config(state: Mapping[str, torch.Tensor], config_dir: Path) -> dict[str, Any]:
    """The shipped transformer config with everything the weights say put in: widths, block and approximator
    counts, the text width. Only the RoPE axes (no weights) come from the config alone."""
    shape = convert.diffusers_shape(state)
    cfg = _read_config(config_dir, "transformer")
    first = "transformer_blocks.0" if shape.double_blocks else "single_transformer_blocks.0"
    head_dim = int(state[f"{first}.attn.norm_q.weight"].shape[0])
    if shape.mlp != 4 * shape.hidden:
        raise ModelLoadError(f"this Chroma transformer's MLP is {shape.mlp} wide, not 4 x {shape.hidden}: not Chroma")
    if sum(cfg.get("axes_dims_rope", (16, 56, 56))) != head_dim:
        raise ModelLoadError(
            f"the transformer's heads are {head_dim} wide but the config's RoPE axes {cfg.get('axes_dims_rope')} "
            f"sum to {sum(cfg.get('axes_dims_rope', ()))}: give a config folder made for this model"
        )
    cfg.update(
        in_channels=int(state["x_embedder.weight"].shape[1]),
        num_layers=shape.double_blocks,
        num_single_layers=shape.single_blocks,
        attention_head_dim=head_dim,
        num_attention_heads=shape.hidden // head_dim,
        joint_attention_dim=int(state["context_embedder.weight"].shape[1]),
        approximator_num_channels=int(state["distilled_guidance_layer.in_proj.weight"].shape[1]),
        approximator_hidden_dim=int(state["distilled_guidance_layer.in_proj.weight"].shape[0]),
        approximator_layers=shape.approximator_layers,
    )
    return cfg


def build_transformer(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    """The ChromaTransformer2DModel of a BFL-layout (any prefix) or diffusers-named state dict, each tensor cast to
    ``dtype`` as it is assigned."""
    from accelerate import init_empty_weights
    from diffusers import ChromaTransformer2DModel

    try:
        named = dict(state) if facts.is_diffusers_transformer(state) else convert.bfl_to_diffusers(state)
    except KeyError as e:
        raise ModelLoadError(f"the Chroma transformer is incomplete or not Chroma: {e.args[0]}") from e
    with init_empty_weights():
        model = ChromaTransformer2DModel.from_config(transformer_config(named, config_dir))
    expected = model.state_dict()
    missing = sorted(set(expected) - set(named))
    unexpected = sorted(set(named) - set(expected))
    wrong = [k for k in expected if k in named and tuple(named[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or wrong:
        detail = (f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}" if unexpected
                  else f"{wrong[0]} is {tuple(named[wrong[0]].shape)}, the architecture has {tuple(expected[wrong[0]].shape)}")
        raise ModelLoadError(f"the Chroma transformer does not match its architecture ({detail})")
    model.load_state_dict(in_dtype(named, dtype), strict=True, assign=True)
    return nn.Module.to(model, dtype)  # torch's own .to: diffusers' ModelMixin.to warns on every dtype cast


def _scheduler(config_dir: Path) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_config(_read_config(config_dir, "scheduler"))


def t5_tokenizer(near: Sequence[Path], config_dir: Path) -> Any:
    """The T5-XXL tokenizer (see the module docstring for where it is looked for)."""
    return flux_loading.t5_tokenizer(near, config_dir, folders=T5_TOKENIZER_FOLDERS, repos=T5_TOKENIZER_REPOS,
                                     command=T5_TOKENIZER_COMMAND, label="Chroma")


# --------------------------------------------------------------------------- the three ways in


def load_folder(
    path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
    vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """A diffusers Chroma folder (or a hub id in the cache): ChromaTransformer2DModel, the 16-channel VAE, the
    T5-XXL encoder, its tokenizer and the FlowMatchEulerDiscreteScheduler; each weight in ``dtype`` (the VAE's in
    ``vae_dtype``, default ``dtype``) as it is read."""
    from diffusers import AutoencoderKL, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler
    from transformers import T5EncoderModel, T5TokenizerFast

    src = str(path)
    index_file = Path(src) / "model_index.json"
    if index_file.is_file():
        index = json.loads(index_file.read_text(encoding="utf-8"))
        if not facts.detect_folder(index):
            raise ModelLoadError(f"{src} is a {index.get('_class_name') or 'unknown'} model, not Chroma (a "
                                 "ChromaPipeline folder)")
    kw: dict[str, Any] = {"local_files_only": local_files_only}
    part = "transformer"
    try:
        transformer = ChromaTransformer2DModel.from_pretrained(src, subfolder="transformer", torch_dtype=dtype, **kw)
        part = "vae"
        vae = AutoencoderKL.from_pretrained(src, subfolder="vae", torch_dtype=vae_dtype or dtype, **kw)
        part = "text_encoder"
        t5 = T5EncoderModel.from_pretrained(src, subfolder="text_encoder", dtype=dtype, **kw)
        part = "tokenizer"
        tokenizer = T5TokenizerFast.from_pretrained(src, subfolder="tokenizer", **kw)
        if not flux_loading.has_vocabulary(tokenizer):
            raise ModelLoadError(f"{src} is not a complete Chroma diffusers folder: tokenizer/ holds no vocabulary")
        part = "scheduler"
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(src, subfolder="scheduler", **kw)
    except ModelLoadError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelLoadError(f"{src} is not a complete Chroma diffusers folder ({part}/ is missing or broken): "
                             f"{first_line(e)}") from e
    ident = model_identity(src) if Path(src).is_dir() else hashlib.sha256(src.encode()).hexdigest()[:24]
    return _assemble(transformer, vae, t5, tokenizer, scheduler, path=src, identity=ident, source="folder")


def _headers(state: Mapping[str, torch.Tensor]) -> dict[str, dict[str, list[int]]]:
    """A state dict as the torch-free detectors read a safetensors header: name -> {"shape": …}."""
    return {k: {"shape": list(v.shape)} for k, v in state.items()}


def _part_state(part: str, state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """One part's tensors from the file that holds it, its prefix removed (the transformer's: only its own keys)."""
    if part == "transformer":
        return convert.strip_prefix(state)
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def _build_all(
    states: Mapping[str, Mapping[str, torch.Tensor]], config_dir: Path, dtype: torch.dtype, near: Sequence[Path],
    *, path: str, identity: str, source: str, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    transformer = build_transformer(states["transformer"], config_dir, dtype)
    vae = flux_loading.build_vae(states["vae"], config_dir, vae_dtype or dtype)
    t5 = flux_loading.build_t5(states["t5"], config_dir, dtype, part=T5_PART)
    return _assemble(transformer, vae, t5, t5_tokenizer(near, config_dir), _scheduler(config_dir),
                     path=path, identity=identity, source=source)


def load_single_file(
    path: Path, state: dict[str, torch.Tensor], *, config_dir: Path, dtype: torch.dtype = torch.float32,
    vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """One file holding the whole model (ComfyUI's checkpoint layout). A transformer-only file (the usual
    release) is refused with the files to choose with it."""
    name = Path(path).name
    headers = _headers(state)
    verdict = facts.detect_file(headers, {}, name)
    if verdict is None or not verdict[0]:
        raise ModelLoadError(verdict[2] if verdict else f"{name} holds no Chroma transformer")
    report = facts.check_parts((name, headers))
    if report.problems:
        raise ModelLoadError(
            f"{name} holds the Chroma transformer without every other part: {facts.missing_parts_sentence(facts.file_parts(headers))} "
            "(the files of a split model are chosen together), or choose a diffusers folder"
        )
    states = {part: _part_state(part, state, prefix) for part, (_file, prefix) in report.sources.items()}
    return _build_all(states, config_dir, dtype, [Path(path)], path=str(path), identity=model_identity(path),
                      source="single_file", vae_dtype=vae_dtype)


def _read(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(header, tensors) of one part's .safetensors file."""
    from safetensors.torch import load_file

    from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header

    if path.suffix.lower() != ".safetensors":
        raise ModelLoadError(f"{path.name}: the files of a split Chroma model are read as .safetensors only")
    try:
        header, _meta = read_safetensors_header(path)
        return header, load_file(str(path))
    except CheckpointError as e:
        raise ModelLoadError(str(e)) from e
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ModelLoadError(f"{path.name} cannot be read as .safetensors: {first_line(e)}") from e


def load_parts(
    parts: ModelParts, *, config_dir: Path, dtype: torch.dtype = torch.float32, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """A split install: the transformer's file, T5-XXL's and the VAE's (a CLIP file among them is left out, as
    :func:`~guitrainer.core.families.chroma.check_parts` notes); ModelLoadError naming each part that is missing,
    chosen twice or of the wrong kind."""
    files = [Path(parts.denoiser), *map(Path, parts.text_encoders), *([Path(parts.vae)] if parts.vae else [])]
    for f in files:
        if not f.is_file():
            raise ModelLoadError(f"{f}: the file does not exist. Check the path, or choose the file again.")
    read = {f.name: (f, *_read(f)) for f in files}
    if len(read) != len(files):
        raise ModelLoadError("two of the chosen files have the same name: choose each part once")
    tables = [(f.name, read[f.name][1]) for f in files]
    report = facts.check_parts(tables[0], tables[1:])
    if report.problems:
        raise ModelLoadError(" ".join(report.problems))
    states = {part: _part_state(part, read[file][2], prefix) for part, (file, prefix) in report.sources.items()}
    identity = hashlib.sha256("\n".join(model_identity(f) for f in files).encode()).hexdigest()[:24]
    return _build_all(states, config_dir, dtype, files, path=str(parts.denoiser), identity=identity,
                      source="split_files", vae_dtype=vae_dtype)
