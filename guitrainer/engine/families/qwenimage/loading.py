"""Loading Qwen-Image: a diffusers folder (``QwenImagePipeline``), one file holding everything (ComfyUI's checkpoint
layout), or the split files its users keep (``qwen_image_bf16.safetensors``, ``qwen_2.5_vl_7b.safetensors``,
``qwen_image_vae.safetensors``) — always offline.

The parts a file does not describe come from the shipped configs (``resources/models/qwenimage``: the transformer,
the VAE, Qwen2.5-VL-7B's language model, the scheduler of Qwen/Qwen-Image); the transformer's widths and counts are
read from its tensors, so a tiny test model loads through the same code as the 20 B one.

Only Qwen2.5-VL's language model is built (transformers' ``Qwen2_5_VLTextModel``): a text prompt never reaches the
vision tower (0.68 B parameters) or the LM head, and for text alone the model's 3-D RoPE positions are the plain
ones, so its hidden states are the full model's. Its weights are read from whichever names the file has:
transformers 5's ``model.language_model.``, the older ``model.`` of the released files and ComfyUI's, or bare. The
VAE in Wan's original names (ComfyUI's file) is renamed by diffusers' own ``convert_wan_vae_to_diffusers``.

The Qwen2.5 tokenizer is not shipped: it is taken from the diffusers folder, a ``tokenizer/`` folder beside the model
files or in the config folder, or the Hugging Face cache (Qwen-Image's, Qwen2.5-VL-7B's); otherwise the error gives
the one command that downloads it.
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
from guitrainer.core.families import qwenimage as facts
from guitrainer.engine.families.flux1 import loading as flux_loading
from guitrainer.engine.models import split_install
from guitrainer.engine.models.tokenizer_lookup import TokenizerSource, find_tokenizer
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, model_identity

log = logging.getLogger(__name__)

TOKENIZER_REPOS: tuple[tuple[str, str], ...] = (
    ("Qwen/Qwen-Image", "tokenizer"),
    ("Qwen/Qwen-Image-2512", "tokenizer"),
    ("Qwen/Qwen2.5-VL-7B-Instruct", ""),
)
TOKENIZER_COMMAND = 'hf download Qwen/Qwen-Image --include "tokenizer/*"'
TOKENIZER_FOLDERS = ("tokenizer", "qwen25_tokenizer")
#: the template's special tokens: a tokenizer without them is not Qwen2.5's
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>")


def denoiser_of(model: LoadedModel) -> nn.Module:
    return model.denoiser


def transformer_config(state: Mapping[str, torch.Tensor], config_dir: Path) -> dict[str, Any]:
    """The shipped transformer config with what the weights say put in: width, heads, layer count, caption width."""
    cfg = split_install.read_config(config_dir, "transformer")
    width = int(state["img_in.weight"].shape[0])
    head_dim = int(state["transformer_blocks.0.attn.norm_q.weight"].shape[0])
    blocks = {int(k.split(".")[1]) for k in state if k.startswith("transformer_blocks.") and k.split(".")[1].isdigit()}
    axes = cfg.get("axes_dims_rope", (16, 56, 56))
    if sum(axes) != head_dim:
        raise ModelLoadError(f"the transformer's heads are {head_dim} wide but the config's RoPE axes {list(axes)} sum "
                             f"to {sum(axes)}: give a config folder made for this model")
    cfg.update(
        in_channels=int(state["img_in.weight"].shape[1]), out_channels=int(state["proj_out.weight"].shape[0]) // 4,
        num_layers=max(blocks) + 1 if blocks else 0, attention_head_dim=head_dim, num_attention_heads=width // head_dim,
        joint_attention_dim=int(state["txt_in.weight"].shape[1]),
        guidance_embeds=any(k.startswith("time_text_embed.guidance_embedder.") for k in state),
    )
    return cfg


def build_transformer(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    """The QwenImageTransformer2DModel of a diffusers-named state dict (the released files' and ComfyUI's)."""
    from accelerate import init_empty_weights
    from diffusers import QwenImageTransformer2DModel

    split_install.refuse_scaled_fp8(state, "Qwen-Image transformer", "qwen_image_bf16.safetensors")
    try:
        cfg = transformer_config(state, config_dir)
    except KeyError as e:
        raise ModelLoadError(f"the Qwen-Image transformer is incomplete or not Qwen-Image: no {e.args[0]}") from e
    with init_empty_weights():
        model = QwenImageTransformer2DModel.from_config(cfg)
    split_install.assign(model, state, "the Qwen-Image transformer", dtype)
    return nn.Module.to(model, dtype)


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: a Qwen2.5-VL config's ``text_config`` (transformers 5's folders) or the flat one
    (older folders, and the shipped config)."""
    inner = config.get("text_config")
    cfg = dict(inner) if isinstance(inner, Mapping) else dict(config)
    return {k: v for k, v in cfg.items() if not k.startswith("_") and k not in ("architectures", "vision_config")}


def build_qwen25(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], dtype: torch.dtype) -> nn.Module:
    """Qwen2.5-VL's language model (``Qwen2_5_VLTextModel``) from a state dict in any of the names the module
    docstring lists; the vision tower and the LM head are dropped."""
    from accelerate import init_empty_weights
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    split_install.refuse_scaled_fp8(state, "Qwen2.5-VL-7B", "qwen_2.5_vl_7b.safetensors (bf16)")
    prefix = facts.qwen25_prefix(state)
    if prefix is None:
        raise ModelLoadError("the text encoder is not Qwen2.5-VL's language model (no layers.0.self_attn.q_proj.bias "
                             f"beside embed_tokens): choose {facts.PART_FILES['qwen25vl']}")
    own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    own = {k: v for k, v in own.items() if not k.startswith(("visual.", "lm_head.", "language_model.", "model."))}
    with init_empty_weights():
        model = Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(**text_config(config)))
    split_install.assign(model, own, "the Qwen2.5-VL-7B text encoder", dtype)
    return nn.Module.to(model, dtype)


def vae_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The VAE's tensors in diffusers' names (Wan's original names renamed by diffusers' converter)."""
    if not facts.vae_is_original(state):
        return dict(state)
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    return convert_wan_vae_to_diffusers(dict(state))


def build_vae(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLQwenImage

    cfg = split_install.read_config(config_dir, "vae")
    named = vae_state(state)
    if "encoder.conv_in.weight" in named:
        cfg["base_dim"] = int(named["encoder.conv_in.weight"].shape[0])
    with init_empty_weights():
        vae = AutoencoderKLQwenImage.from_config(cfg)
    split_install.assign(vae, named, "the Qwen-Image VAE", dtype)
    return nn.Module.to(vae, dtype)


def _scheduler(config_dir: Path) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_config(split_install.read_config(config_dir, "scheduler"))


def is_qwen_tokenizer(tokenizer: Any) -> bool:
    """A real vocabulary (not transformers' lone special tokens) with the template's special tokens."""
    vocab = tokenizer.get_vocab()
    return flux_loading.has_vocabulary(tokenizer) and all(t in vocab for t in SPECIAL_TOKENS)


TOKENIZER = TokenizerSource(
    name="Qwen2.5", family="Qwen-Image", folders=TOKENIZER_FOLDERS, repos=TOKENIZER_REPOS, command=TOKENIZER_COMMAND,
    accepts=is_qwen_tokenizer, missing="Qwen2.5's vocabulary and special tokens",
)


def tokenizer_for(near: Sequence[Path], config_dir: Path) -> Any:
    """The Qwen2.5 tokenizer (see the module docstring for where it is looked for)."""
    return find_tokenizer(near, config_dir, TOKENIZER)


def _folder_tensors(folder: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of a diffusers part folder's .safetensors files (shards included), each cast as it is read."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise OSError(f"{folder} holds no .safetensors weights")
    out: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                if not key.startswith(("visual.", "model.visual.", "lm_head.")):
                    out[key] = f.get_tensor(key).to(dtype)
    return out


# --------------------------------------------------------------------------- the three ways in


def load_folder(
    path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
    vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """A diffusers Qwen-Image folder (or a hub id in the cache), each weight in ``dtype`` as it is read."""
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel
    from huggingface_hub import snapshot_download
    from transformers import AutoTokenizer

    src = str(path)
    index_file = Path(src) / "model_index.json"
    if index_file.is_file():
        index = json.loads(index_file.read_text(encoding="utf-8"))
        if not facts.detect_folder(index):
            raise ModelLoadError(f"{src} is a {index.get('_class_name') or 'unknown'} model, not Qwen-Image (a "
                                 "QwenImagePipeline folder)")
    kw: dict[str, Any] = {"local_files_only": local_files_only}
    part = "transformer"
    try:
        transformer = QwenImageTransformer2DModel.from_pretrained(src, subfolder="transformer", torch_dtype=dtype, **kw)
        part = "vae"
        vae = AutoencoderKLQwenImage.from_pretrained(src, subfolder="vae", torch_dtype=vae_dtype or dtype, **kw)
        part = "text_encoder"
        root = Path(src) if Path(src).is_dir() else Path(snapshot_download(src, allow_patterns=["text_encoder/*"], **kw))
        te_config = json.loads((root / "text_encoder" / "config.json").read_text(encoding="utf-8"))
        qwen25 = build_qwen25(_folder_tensors(root / "text_encoder", dtype), te_config, dtype)
        part = "tokenizer"
        tokenizer = AutoTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)
        if not is_qwen_tokenizer(tokenizer):
            raise ModelLoadError(f"{src} is not a complete Qwen-Image diffusers folder: tokenizer/ holds no Qwen2.5 "
                                 "vocabulary")
        part = "scheduler"
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(src, subfolder="scheduler", **kw)
    except ModelLoadError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelLoadError(f"{src} is not a complete Qwen-Image diffusers folder ({part}/ is missing or broken): "
                             f"{first_line(e)}") from e
    ident = model_identity(src) if Path(src).is_dir() else hashlib.sha256(src.encode()).hexdigest()[:24]
    return split_install.assemble("qwenimage", transformer, vae, [qwen25], [tokenizer], scheduler, path=src,
                                  identity=ident, source="folder")


def part_state(part: str, state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    if part == "qwen25vl":
        return dict(state)  # build_qwen25 finds its own prefix
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def build_all(
    states: Mapping[str, Mapping[str, torch.Tensor]], near: Sequence[Path], *, config_dir: Path, dtype: torch.dtype,
    path: str, identity: str, source: str, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    transformer = build_transformer(states["transformer"], config_dir, dtype)
    vae = build_vae(states["vae"], config_dir, vae_dtype or dtype)
    qwen25 = build_qwen25(states["qwen25vl"], split_install.read_config(config_dir, "text_encoder"), dtype)
    return split_install.assemble("qwenimage", transformer, vae, [qwen25], [tokenizer_for(near, config_dir)],
                                  _scheduler(config_dir), path=path, identity=identity, source=source)
