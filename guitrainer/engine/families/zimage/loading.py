"""Loading Z-Image: a diffusers folder (``ZImagePipeline``), one file holding everything (ComfyUI's checkpoint
layout), or the split files its users keep (``z_image_turbo_bf16.safetensors``, ``qwen_3_4b.safetensors``, Flux's
``ae.safetensors``) — always offline.

The parts a file does not describe come from the shipped configs (``resources/models/zimage``: the transformer of
Z-Image-Turbo, Flux's VAE, Qwen3-4B, the scheduler); the transformer's widths and counts are read from its tensors,
so a tiny test model loads through the same code as the 6 B one. The VAE is Flux's part, built by Flux's loader.

The Qwen3 tokenizer (``vocab.json`` / ``merges.txt`` with Qwen3's chat template) is not shipped: it is taken from
the diffusers folder, a ``tokenizer/`` folder beside the model files or in the config folder, or the Hugging Face
cache (Z-Image-Turbo's, Qwen3-4B's); otherwise the error gives the one command that downloads it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.core.families import zimage as facts
from guitrainer.engine.families.flux1 import loading as flux_loading
from guitrainer.engine.families.zimage import convert
from guitrainer.engine.models import split_install
from guitrainer.engine.models.tokenizer_lookup import TokenizerSource, find_tokenizer
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, model_identity

log = logging.getLogger(__name__)

TOKENIZER_REPOS: tuple[tuple[str, str], ...] = (
    ("Tongyi-MAI/Z-Image-Turbo", "tokenizer"),
    ("Tongyi-MAI/Z-Image", "tokenizer"),
    ("Qwen/Qwen3-4B", ""),
)
TOKENIZER_COMMAND = 'hf download Tongyi-MAI/Z-Image-Turbo --include "tokenizer/*"'
TOKENIZER_FOLDERS = ("tokenizer", "qwen3_tokenizer")


def denoiser_of(model: LoadedModel) -> nn.Module:
    return model.denoiser


def transformer_config(state: Mapping[str, torch.Tensor], config_dir: Path) -> dict[str, Any]:
    """The shipped transformer config with what the weights say put in: width, heads, layer counts, caption width."""
    cfg = split_install.read_config(config_dir, "transformer")
    dim = int(state["all_x_embedder.2-1.weight"].shape[0])
    head_dim = int(state["layers.0.attention.norm_q.weight"].shape[0])
    kv = int(state["layers.0.attention.to_k.weight"].shape[0]) // head_dim

    def count(name: str) -> int:
        found = {int(k.split(".")[1]) for k in state if k.startswith(f"{name}.") and k.split(".")[1].isdigit()}
        return max(found) + 1 if found else 0

    if sum(cfg.get("axes_dims", (32, 48, 48))) != head_dim:
        raise ModelLoadError(f"the transformer's heads are {head_dim} wide but the config's RoPE axes "
                             f"{cfg.get('axes_dims')} sum to {sum(cfg.get('axes_dims', ()))}: give a config folder made "
                             "for this model")
    cfg.update(
        in_channels=int(state["all_x_embedder.2-1.weight"].shape[1]) // 4,
        dim=dim, n_heads=dim // head_dim, n_kv_heads=kv, n_layers=count("layers"),
        n_refiner_layers=count("noise_refiner"), cap_feat_dim=int(state["cap_embedder.1.weight"].shape[1]),
    )
    return cfg


def build_transformer(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    """The ZImageTransformer2DModel of an original-layout (any prefix) or diffusers-named state dict."""
    from accelerate import init_empty_weights
    from diffusers import ZImageTransformer2DModel

    split_install.refuse_scaled_fp8(state, "Z-Image transformer", "z_image_turbo_bf16.safetensors / z_image_bf16.safetensors")
    try:
        named = dict(state) if facts.is_diffusers_transformer(state) else convert.original_to_diffusers(state)
        cfg = transformer_config(named, config_dir)
    except KeyError as e:
        raise ModelLoadError(f"the Z-Image transformer is incomplete or not Z-Image: no {e.args[0]}") from e
    with init_empty_weights():
        model = ZImageTransformer2DModel.from_config(cfg)
    split_install.assign(model, named, "the Z-Image transformer", dtype)
    return nn.Module.to(model, dtype)


def build_qwen3(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    """Qwen3-4B (transformers' Qwen3Model: no LM head, which Z-Image never runs) from a ``qwen_3_4b.safetensors``-
    style state dict: Hugging Face names, with ``model.`` (a Qwen3ForCausalLM's) or without; ``lm_head`` dropped."""
    from accelerate import init_empty_weights
    from transformers import Qwen3Config, Qwen3Model

    cfg = {k: v for k, v in split_install.read_config(config_dir, "text_encoder").items() if not k.startswith("_") and k != "architectures"}
    split_install.refuse_scaled_fp8(state, "Qwen3-4B", "qwen_3_4b.safetensors (bf16)")
    prefix = facts.qwen3_prefix(state) or ""
    own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix) and not k[len(prefix):].startswith("lm_head.")}
    own.pop("lm_head.weight", None)
    with init_empty_weights():
        model = Qwen3Model(Qwen3Config(**cfg))
    split_install.assign(model, own, "the Qwen3-4B text encoder", dtype)
    return nn.Module.to(model, dtype)


def _scheduler(config_dir: Path) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_config(split_install.read_config(config_dir, "scheduler"))


def accepts_tokenizer(tokenizer: Any) -> bool:
    """A real vocabulary (not transformers' lone special tokens) with Qwen3's chat template."""
    return bool(getattr(tokenizer, "chat_template", None)) and flux_loading.has_vocabulary(tokenizer)


TOKENIZER = TokenizerSource(
    name="Qwen3", family="Z-Image", folders=TOKENIZER_FOLDERS, repos=TOKENIZER_REPOS, command=TOKENIZER_COMMAND,
    accepts=accepts_tokenizer, missing="Qwen3's vocabulary or chat template",
)


def tokenizer_for(near: Sequence[Path], config_dir: Path) -> Any:
    """The Qwen3 tokenizer (see the module docstring for where it is looked for)."""
    return find_tokenizer(near, config_dir, TOKENIZER)


# --------------------------------------------------------------------------- the three ways in


def load_folder(
    path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
    vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """A diffusers Z-Image folder (or a hub id in the cache), each weight in ``dtype`` as it is read."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImageTransformer2DModel
    from transformers import AutoTokenizer, Qwen3Model

    src = str(path)
    index_file = Path(src) / "model_index.json"
    if index_file.is_file():
        index = json.loads(index_file.read_text(encoding="utf-8"))
        if not facts.detect_folder(index):
            raise ModelLoadError(f"{src} is a {index.get('_class_name') or 'unknown'} model, not Z-Image (a "
                                 "ZImagePipeline folder)")
    kw: dict[str, Any] = {"local_files_only": local_files_only}
    part = "transformer"
    try:
        transformer = ZImageTransformer2DModel.from_pretrained(src, subfolder="transformer", torch_dtype=dtype, **kw)
        part = "vae"
        vae = AutoencoderKL.from_pretrained(src, subfolder="vae", torch_dtype=vae_dtype or dtype, **kw)
        part = "text_encoder"
        qwen3 = Qwen3Model.from_pretrained(src, subfolder="text_encoder", dtype=dtype, **kw)
        part = "tokenizer"
        tokenizer = AutoTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)
        if not flux_loading.has_vocabulary(tokenizer) or not getattr(tokenizer, "chat_template", None):
            raise ModelLoadError(f"{src} is not a complete Z-Image diffusers folder: tokenizer/ holds no vocabulary "
                                 "or chat template")
        part = "scheduler"
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(src, subfolder="scheduler", **kw)
    except ModelLoadError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelLoadError(f"{src} is not a complete Z-Image diffusers folder ({part}/ is missing or broken): "
                             f"{first_line(e)}") from e
    ident = model_identity(src) if Path(src).is_dir() else hashlib.sha256(src.encode()).hexdigest()[:24]
    return split_install.assemble("zimage", transformer, vae, [qwen3], [tokenizer], scheduler, path=src, identity=ident, source="folder")


def part_state(part: str, state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    if part == "transformer":
        return convert.strip_prefix(state)
    if part == "qwen3":
        return dict(state)  # build_qwen3 finds its own prefix
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def build_all(
    states: Mapping[str, Mapping[str, torch.Tensor]], near: Sequence[Path], *, config_dir: Path, dtype: torch.dtype,
    path: str, identity: str, source: str, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    transformer = build_transformer(states["transformer"], config_dir, dtype)
    vae = flux_loading.build_vae(states["vae"], config_dir, vae_dtype or dtype)
    qwen3 = build_qwen3(states["qwen3"], config_dir, dtype)
    return split_install.assemble("zimage", transformer, vae, [qwen3], [tokenizer_for(near, config_dir)], _scheduler(config_dir),
                     path=path, identity=identity, source=source)
