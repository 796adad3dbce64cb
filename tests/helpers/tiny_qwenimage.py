"""A tiny Qwen-Image (2 blocks, width 64) with a tiny Qwen2.5 language model and a tiny Wan 3-D VAE, built from
configs with random weights and a tokenizer made here (Z-Image's test tokenizer: a word-level vocabulary with Qwen's
special tokens; no download), saved the three ways users keep Qwen-Image: a diffusers folder (its text encoder as
transformers 5 saves Qwen2.5-VL, vision tower included), one ComfyUI-layout checkpoint, and split files
(transformer, qwen_2.5_vl, VAE in Wan's original names). ``tiny_config_dir`` writes what
``resources/models/qwenimage`` holds, at the tiny sizes.

The VAE keeps Qwen-Image's ``dim_mult`` [1, 2, 4, 4] and two residual blocks per stage (only its width is tiny):
diffusers' ``convert_wan_vae_to_diffusers`` assumes that layout."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.paths import resources_dir
from helpers import tiny_zimage

QWEN_WIDTH = 32


def tokenizer() -> Any:
    return tiny_zimage.tokenizer()


def transformer_config() -> dict[str, Any]:
    return {
        "patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 2, "attention_head_dim": 16,
        "num_attention_heads": 4, "joint_attention_dim": QWEN_WIDTH, "axes_dims_rope": [4, 6, 6],
    }


def vae_config() -> dict[str, Any]:
    cfg = json.loads((resources_dir() / "models" / "qwenimage" / "vae" / "config.json").read_text(encoding="utf-8"))
    return {**{k: v for k, v in cfg.items() if not k.startswith("_")}, "base_dim": 8}


def qwen25_config(vocab: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab, "hidden_size": QWEN_WIDTH, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
        "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}, "use_cache": False, "tie_word_embeddings": False,
        "bos_token_id": 0, "eos_token_id": 0,
    }


@dataclass
class TinyQwenImage:
    transformer: Any
    vae: Any
    qwen25: Any
    tokenizer: Any
    scheduler: Any


def build(seed: int = 0) -> TinyQwenImage:
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    torch.manual_seed(seed)
    tok = tokenizer()
    scheduler_cfg = json.loads((resources_dir() / "models" / "qwenimage" / "scheduler" / "scheduler_config.json").read_text())
    transformer = QwenImageTransformer2DModel(**transformer_config())
    return TinyQwenImage(
        transformer=transformer,
        vae=AutoencoderKLQwenImage(**vae_config()),
        qwen25=Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(**qwen25_config(len(tok)))),
        tokenizer=tok,
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(scheduler_cfg),
    )


def qwen25_folder_weights(tiny: TinyQwenImage) -> dict[str, torch.Tensor]:
    """Qwen2.5-VL as transformers 5 saves ``Qwen2_5_VLForConditionalGeneration``: ``model.language_model.``, a
    vision tower and an LM head (which the app skips)."""
    sd = {f"model.language_model.{k}": v.clone() for k, v in tiny.qwen25.state_dict().items()}
    sd["model.visual.patch_embed.proj.weight"] = torch.randn(4, 3, 2, 2, 2)
    sd["lm_head.weight"] = torch.randn(len(tiny.tokenizer), QWEN_WIDTH)
    return sd


def save_diffusers(tiny: TinyQwenImage, folder: Path) -> Path:
    """A QwenImagePipeline folder; its text_encoder/ rewritten as a Qwen2.5-VL's (nested text_config)."""
    from diffusers import QwenImagePipeline
    from safetensors.torch import save_file

    QwenImagePipeline(scheduler=tiny.scheduler, vae=tiny.vae, text_encoder=tiny.qwen25, tokenizer=tiny.tokenizer,
                      transformer=tiny.transformer).save_pretrained(folder)
    te = folder / "text_encoder"
    shutil.rmtree(te)
    te.mkdir()
    config = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
              "text_config": {"model_type": "qwen2_5_vl_text", **qwen25_config(len(tiny.tokenizer))},
              "vision_config": {"depth": 1}}
    (te / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    weights = qwen25_folder_weights(tiny)
    keys = sorted(weights)
    half = len(keys) // 2  # two shards, as the released folder has (four)
    save_file({k: weights[k] for k in keys[:half]}, str(te / "model-00001-of-00002.safetensors"))
    save_file({k: weights[k] for k in keys[half:]}, str(te / "model-00002-of-00002.safetensors"))
    return folder


def tiny_config_dir(tiny: TinyQwenImage, folder: Path, *, with_tokenizer: bool = True) -> Path:
    configs = {
        "transformer": {"_class_name": "QwenImageTransformer2DModel", **transformer_config()},
        "vae": {"_class_name": "AutoencoderKLQwenImage", **vae_config()},
        "text_encoder": {"architectures": ["Qwen2_5_VLTextModel"], "model_type": "qwen2_5_vl_text",
                         **qwen25_config(len(tiny.tokenizer))},
    }
    for part, cfg in configs.items():
        (folder / part).mkdir(parents=True, exist_ok=True)
        (folder / part / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    (folder / "scheduler").mkdir(exist_ok=True)
    shutil.copy(resources_dir() / "models" / "qwenimage" / "scheduler" / "scheduler_config.json", folder / "scheduler")
    if with_tokenizer:
        tiny.tokenizer.save_pretrained(str(folder / "tokenizer"))
    return folder


_RESIDUAL = {"norm1.gamma": "residual.0.gamma", "conv1": "residual.2", "norm2.gamma": "residual.3.gamma",
             "conv2": "residual.6", "conv_shortcut": "shortcut"}


def _residual(rest: str) -> str:
    for new, old in _RESIDUAL.items():
        if rest.startswith(new):
            return old + rest[len(new):]
    return rest


def wan_name(key: str) -> str:
    """A diffusers AutoencoderKLQwenImage weight's name in Wan's original VAE (``wan/modules/vae.py``: flat
    ``downsamples`` / ``upsamples`` Sequentials of residual blocks, ``residual`` Sequentials inside them, ``middle``,
    ``head``, ``conv1`` / ``conv2`` around the latent), written from Wan's module structure; the decoder's stages
    hold ``num_res_blocks + 1`` residual blocks and an upsampler each (the last none): 4 entries per stage."""
    fixed = {"quant_conv.": "conv1.", "post_quant_conv.": "conv2."}
    for new, old in fixed.items():
        if key.startswith(new):
            return old + key[len(new):]
    part, rest = key.split(".", 1)
    if rest.startswith("conv_in."):
        return f"{part}.conv1.{rest[len('conv_in.'):]}"
    if rest.startswith("norm_out."):
        return f"{part}.head.0.{rest[len('norm_out.'):]}"
    if rest.startswith("conv_out."):
        return f"{part}.head.2.{rest[len('conv_out.'):]}"
    if m := re.match(r"mid_block\.resnets\.(\d)\.(.*)", rest):
        return f"{part}.middle.{2 * int(m[1])}.{_residual(m[2])}"
    if m := re.match(r"mid_block\.attentions\.0\.(.*)", rest):
        return f"{part}.middle.1.{m[1]}"
    if m := re.match(r"down_blocks\.(\d+)\.(.*)", rest):
        return f"{part}.downsamples.{m[1]}.{_residual(m[2])}"
    if m := re.match(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", rest):
        return f"{part}.upsamples.{4 * int(m[1]) + int(m[2])}.{_residual(m[3])}"
    if m := re.match(r"up_blocks\.(\d+)\.upsamplers\.0\.(.*)", rest):
        return f"{part}.upsamples.{4 * int(m[1]) + 3}.{m[2]}"
    raise AssertionError(f"no Wan name for {key}")


def wan_vae_file(tiny: TinyQwenImage) -> dict[str, torch.Tensor]:
    """``qwen_image_vae.safetensors``: the VAE in Wan's original names, as ComfyUI's file has them."""
    return {wan_name(k): v.clone().contiguous() for k, v in tiny.vae.state_dict().items()}


def qwen25_file(tiny: TinyQwenImage) -> dict[str, torch.Tensor]:
    """``qwen_2.5_vl_7b.safetensors``: the older Qwen2.5-VL names (``model.`` before the language model's layers,
    ``visual.`` for the vision tower)."""
    sd = {f"model.{k}": v.clone() for k, v in tiny.qwen25.state_dict().items()}
    sd["visual.patch_embed.proj.weight"] = torch.randn(4, 3, 2, 2, 2)
    return sd


def transformer_file(tiny: TinyQwenImage) -> dict[str, torch.Tensor]:
    return {k: v.clone().contiguous() for k, v in tiny.transformer.state_dict().items()}


def save_comfy_checkpoint(tiny: TinyQwenImage, path: Path) -> Path:
    from safetensors.torch import save_file

    sd = {f"model.diffusion_model.{k}": v for k, v in transformer_file(tiny).items()}
    sd |= {f"text_encoders.qwen25_7b.transformer.{k}": v for k, v in qwen25_file(tiny).items()}
    sd |= {f"vae.{k}": v for k, v in wan_vae_file(tiny).items()}
    save_file(sd, str(path))
    return path


def save_split(tiny: TinyQwenImage, folder: Path) -> dict[str, Path]:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "transformer": (folder / "qwen_image_tiny_bf16.safetensors", transformer_file(tiny)),
        "qwen25vl": (folder / "qwen_2.5_vl_tiny.safetensors", qwen25_file(tiny)),
        "vae": (folder / "qwen_image_vae.safetensors", wan_vae_file(tiny)),
    }
    for path, sd in files.values():
        save_file(sd, str(path))
    return {part: path for part, (path, _) in files.items()}
