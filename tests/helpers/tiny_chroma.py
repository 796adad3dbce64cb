"""A tiny Chroma (2 double + 2 single blocks, hidden 64, a 2-layer approximator) with a tiny T5 and 16-channel VAE,
built from configs with random weights and a tokenizer made here (no download), saved the three ways users keep
Chroma: a diffusers folder, one ComfyUI-layout checkpoint, and split files (transformer, t5xxl, ae).

``tiny_config_dir`` writes what ``resources/models/chroma`` holds for the full model, at the tiny sizes, so the real
loading code builds the parts a file does not describe. diffusers converts only BFL -> diffusers (at width 3072),
so the BFL files here are written by our converter; ``tests/test_chroma_convert.py`` checks it against diffusers'
converter at full width on ``meta``."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.paths import resources_dir
from helpers import tiny_flux

HIDDEN, HEADS, HEAD_DIM = tiny_flux.HIDDEN, tiny_flux.HEADS, tiny_flux.HEAD_DIM


def transformer_config() -> dict[str, Any]:
    return {
        "in_channels": 64,  # 16 latent channels x 2x2
        "num_layers": 2,
        "num_single_layers": 2,
        "attention_head_dim": HEAD_DIM,
        "num_attention_heads": HEADS,
        "joint_attention_dim": tiny_flux.T5_WIDTH,
        "axes_dims_rope": [4, 6, 6],
        "approximator_num_channels": 16,
        "approximator_hidden_dim": 32,
        "approximator_layers": 2,
    }


@dataclass
class TinyChroma:
    """The tiny model's parts (fp32, random weights from ``seed``)."""

    transformer: Any
    vae: Any
    t5: Any
    tokenizer: Any
    scheduler: Any


def build(seed: int = 0) -> TinyChroma:
    from diffusers import AutoencoderKL, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    tok = tiny_flux.t5_tokenizer()
    scheduler_cfg = json.loads((resources_dir() / "models" / "chroma" / "scheduler" / "scheduler_config.json").read_text())
    return TinyChroma(
        transformer=ChromaTransformer2DModel(**transformer_config()),
        vae=AutoencoderKL(**tiny_flux.vae_config()),
        t5=T5EncoderModel(T5Config(**tiny_flux.t5_config(len(tok)))),
        tokenizer=tok,
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(scheduler_cfg),
    )


def save_diffusers(tiny: TinyChroma, folder: Path) -> Path:
    """The tiny model as a diffusers ChromaPipeline folder."""
    from diffusers import ChromaPipeline

    ChromaPipeline(scheduler=tiny.scheduler, vae=tiny.vae, text_encoder=tiny.t5, tokenizer=tiny.tokenizer,
                   transformer=tiny.transformer).save_pretrained(folder)
    return folder


def tiny_config_dir(tiny: TinyChroma, folder: Path, *, with_tokenizer: bool = True) -> Path:
    """What ``resources/models/chroma`` holds, at the tiny sizes (and, unless told otherwise, the T5 tokenizer in
    ``tokenizer/``, where the loader looks for one)."""
    configs = {
        "transformer": {"_class_name": "ChromaTransformer2DModel", **transformer_config()},
        "vae": {"_class_name": "AutoencoderKL", **tiny_flux.vae_config()},
        "text_encoder": {"architectures": ["T5EncoderModel"], "model_type": "t5", **tiny_flux.t5_config(len(tiny.tokenizer))},
    }
    for part, cfg in configs.items():
        (folder / part).mkdir(parents=True, exist_ok=True)
        (folder / part / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    (folder / "scheduler").mkdir(exist_ok=True)
    shutil.copy(resources_dir() / "models" / "chroma" / "scheduler" / "scheduler_config.json", folder / "scheduler")
    if with_tokenizer:
        tiny.tokenizer.save_pretrained(str(folder / "tokenizer"))
    return folder


def bfl_transformer(tiny: TinyChroma) -> dict[str, torch.Tensor]:
    from guitrainer.engine.families.chroma.convert import diffusers_to_bfl

    return {k: v.clone().contiguous() for k, v in diffusers_to_bfl(tiny.transformer.state_dict()).items()}


def t5_file(tiny: TinyChroma) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in tiny.t5.state_dict().items() if k != "encoder.embed_tokens.weight"}


def ae_file(tiny: TinyChroma) -> dict[str, torch.Tensor]:
    return tiny_flux.ae_file(tiny)  # type: ignore[arg-type]  # reads only .vae


def save_comfy_checkpoint(tiny: TinyChroma, path: Path) -> Path:
    """One file holding everything, in ComfyUI's checkpoint layout."""
    from safetensors.torch import save_file

    sd = {f"model.diffusion_model.{k}": v for k, v in bfl_transformer(tiny).items()}
    sd |= {f"text_encoders.t5xxl.transformer.{k}": v for k, v in t5_file(tiny).items()}
    sd |= {f"vae.{k}": v for k, v in ae_file(tiny).items()}
    save_file(sd, str(path))
    return path


def save_split(tiny: TinyChroma, folder: Path) -> dict[str, Path]:
    """The three files of a split install: transformer (BFL layout), t5xxl, ae."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "transformer": (folder / "chroma-tiny.safetensors", bfl_transformer(tiny)),
        "t5": (folder / "t5xxl_tiny.safetensors", t5_file(tiny)),
        "vae": (folder / "ae.safetensors", ae_file(tiny)),
    }
    for path, sd in files.values():
        save_file(sd, str(path))
    return {part: path for part, (path, _) in files.items()}
