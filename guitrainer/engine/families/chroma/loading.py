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
from guitrainer.engine.families.chroma import convert
from guitrainer.engine.families.flux1 import loading as flux_loading
from guitrainer.engine.models import split_install
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


def transformer_config(state: Mapping[str, torch.Tensor], config_dir: Path) -> dict[str, Any]:
    """The shipped transformer config with everything the weights say put in: widths, block and approximator
    counts, the text width. Only the RoPE axes (no weights) come from the config alone."""
    shape = convert.diffusers_shape(state)
    cfg = split_install.read_config(config_dir, "transformer")
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

    split_install.refuse_scaled_fp8(state, "Chroma transformer", "the bf16 file (Chroma1-HD.safetensors) or an unscaled fp8 one")
    try:
        named = dict(state) if facts.is_diffusers_transformer(state) else convert.bfl_to_diffusers(state)
    except KeyError as e:
        raise ModelLoadError(f"the Chroma transformer is incomplete or not Chroma: {e.args[0]}") from e
    with init_empty_weights():
        model = ChromaTransformer2DModel.from_config(transformer_config(named, config_dir))
    split_install.assign(model, named, "the Chroma transformer", dtype)
    return nn.Module.to(model, dtype)  # torch's own .to: diffusers' ModelMixin.to warns on every dtype cast


def _scheduler(config_dir: Path) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_config(split_install.read_config(config_dir, "scheduler"))


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
    return split_install.assemble("chroma", transformer, vae, [t5], [tokenizer], scheduler, path=src, identity=ident, source="folder")


def part_state(part: str, state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """One part's tensors from the file that holds it, its prefix removed (the transformer's: only its own keys)."""
    if part == "transformer":
        return convert.strip_prefix(state)
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def build_all(
    states: Mapping[str, Mapping[str, torch.Tensor]], near: Sequence[Path], *, config_dir: Path, dtype: torch.dtype,
    path: str, identity: str, source: str, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    transformer = build_transformer(states["transformer"], config_dir, dtype)
    vae = flux_loading.build_vae(states["vae"], config_dir, vae_dtype or dtype)
    t5 = flux_loading.build_t5(states["t5"], config_dir, dtype, part=T5_PART)
    return split_install.assemble("chroma", transformer, vae, [t5], [t5_tokenizer(near, config_dir)], _scheduler(config_dir),
                     path=path, identity=identity, source=source)
