"""A tiny Flux.1 (2 double + 2 single blocks, hidden 64) with a tiny T5, CLIP-L and 16-channel VAE, built from
configs with random weights and tokenizers made here (no download), saved the three ways users keep Flux:
a diffusers folder, one ComfyUI-layout checkpoint, and split files (transformer, t5xxl, clip_l, ae).

``tiny_config_dir`` writes what ``resources/models/flux1`` holds for the full model, at the tiny sizes, so the
real loading code builds the parts a file does not describe."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.paths import resources_dir

CLIP_TOKENIZER = resources_dir() / "models" / "flux1" / "tokenizer"
HIDDEN, HEADS, HEAD_DIM = 64, 4, 16
T5_WIDTH, CLIP_WIDTH = 32, 32
WORDS = ["a", "photo", "of", "the", "cat", "dog", "red", "blue", "green", "sks", "person", "woman", "man", "sitting", "on", "in", "with", "and", "square", "circle"]


def t5_tokenizer() -> Any:
    """A T5 tokenizer (Unigram, like T5's sentencepiece model) over a few words and every letter and digit."""
    from transformers import T5TokenizerFast

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    vocab += [("▁" + w, -5.0 - 0.1 * len(w)) for w in WORDS if len(w) > 1]
    vocab += [("▁" + c, -9.0) for c in string.ascii_lowercase]
    vocab += [(c, -10.0) for c in string.ascii_lowercase + string.digits + ",."]
    return T5TokenizerFast(vocab=vocab, extra_ids=0)


def transformer_config(dev: bool = True) -> dict[str, Any]:
    return {
        "in_channels": 64,  # 16 latent channels x 2x2
        "num_layers": 2,
        "num_single_layers": 2,
        "attention_head_dim": HEAD_DIM,
        "num_attention_heads": HEADS,
        "joint_attention_dim": T5_WIDTH,
        "pooled_projection_dim": CLIP_WIDTH,
        "guidance_embeds": dev,
        "axes_dims_rope": [4, 6, 6],
    }


def vae_config() -> dict[str, Any]:
    return {
        "in_channels": 3, "out_channels": 3, "latent_channels": 16,
        "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2,
        "block_out_channels": [32, 32], "layers_per_block": 1, "norm_num_groups": 32, "sample_size": 32,
        "scaling_factor": 0.3611, "shift_factor": 0.1159, "use_quant_conv": False, "use_post_quant_conv": False,
    }


def clip_config() -> dict[str, Any]:
    return {
        "vocab_size": 49408, "hidden_size": CLIP_WIDTH, "intermediate_size": 2 * CLIP_WIDTH, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 77, "projection_dim": CLIP_WIDTH,
        "hidden_act": "quick_gelu", "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1,
    }


def t5_config(vocab: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab, "d_model": T5_WIDTH, "d_ff": 2 * T5_WIDTH, "d_kv": 8, "num_heads": 4, "num_layers": 2,
        "feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
        "is_encoder_decoder": False, "use_cache": False, "pad_token_id": 0, "eos_token_id": 1,
    }


@dataclass
class TinyFlux:
    """The tiny model's parts (fp32, random weights from ``seed``)."""

    transformer: Any
    vae: Any
    clip: Any
    t5: Any
    clip_tokenizer: Any
    t5_tokenizer: Any
    scheduler: Any

    @property
    def dev(self) -> bool:
        return bool(self.transformer.config.guidance_embeds)


def build(seed: int = 0, *, dev: bool = True) -> TinyFlux:
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer, T5Config, T5EncoderModel

    torch.manual_seed(seed)
    t5_tok = t5_tokenizer()
    scheduler_cfg = json.loads((resources_dir() / "models" / "flux1" / "scheduler" / "scheduler_config.json").read_text())
    if not dev:
        scheduler_cfg.update(use_dynamic_shifting=False, shift=1.0)
    return TinyFlux(
        transformer=FluxTransformer2DModel(**transformer_config(dev)),
        vae=AutoencoderKL(**vae_config()),
        clip=CLIPTextModel(CLIPTextConfig(**clip_config())),
        t5=T5EncoderModel(T5Config(**t5_config(len(t5_tok)))),
        clip_tokenizer=CLIPTokenizer.from_pretrained(str(CLIP_TOKENIZER)),
        t5_tokenizer=t5_tok,
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(scheduler_cfg),
    )


def save_diffusers(tiny: TinyFlux, folder: Path) -> Path:
    """The tiny model as a diffusers FluxPipeline folder."""
    from diffusers import FluxPipeline

    FluxPipeline(
        scheduler=tiny.scheduler, vae=tiny.vae, text_encoder=tiny.clip, tokenizer=tiny.clip_tokenizer,
        text_encoder_2=tiny.t5, tokenizer_2=tiny.t5_tokenizer, transformer=tiny.transformer,
    ).save_pretrained(folder)
    return folder


def tiny_config_dir(tiny: TinyFlux, folder: Path, *, with_t5_tokenizer: bool = True) -> Path:
    """What ``resources/models/flux1`` holds, at the tiny sizes (and, unless told otherwise, a T5 tokenizer in
    ``tokenizer_2/``, where the loader looks for one)."""
    import shutil

    configs = {
        "transformer": {"_class_name": "FluxTransformer2DModel", **transformer_config(tiny.dev)},
        "vae": {"_class_name": "AutoencoderKL", **vae_config()},
        "text_encoder": {"architectures": ["CLIPTextModel"], "model_type": "clip_text_model", **clip_config()},
        "text_encoder_2": {"architectures": ["T5EncoderModel"], "model_type": "t5", **t5_config(len(tiny.t5_tokenizer))},
    }
    for part, cfg in configs.items():
        (folder / part).mkdir(parents=True, exist_ok=True)
        (folder / part / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    (folder / "scheduler").mkdir(exist_ok=True)
    shutil.copy(resources_dir() / "models" / "flux1" / "scheduler" / "scheduler_config.json", folder / "scheduler")
    shutil.copytree(CLIP_TOKENIZER, folder / "tokenizer", dirs_exist_ok=True)
    if with_t5_tokenizer:
        tiny.t5_tokenizer.save_pretrained(str(folder / "tokenizer_2"))
    return folder


# --------------------------------------------------------------------------- the files users keep


def bfl_transformer(tiny: TinyFlux) -> dict[str, torch.Tensor]:
    from guitrainer.engine.families.flux1.convert import diffusers_to_bfl

    return {k: v.clone().contiguous() for k, v in diffusers_to_bfl(tiny.transformer.state_dict()).items()}


def clip_file(tiny: TinyFlux) -> dict[str, torch.Tensor]:
    """``clip_l.safetensors``: the HF layout with transformers 4's ``text_model.`` level, as the files keep it."""
    return {f"text_model.{k}": v.clone() for k, v in tiny.clip.state_dict().items() if not k.endswith("position_ids")}


def t5_file(tiny: TinyFlux) -> dict[str, torch.Tensor]:
    """``t5xxl_fp16.safetensors``: the encoder's keys with the token embedding once, as ``shared.weight``."""
    return {k: v.clone() for k, v in tiny.t5.state_dict().items() if k != "encoder.embed_tokens.weight"}


def ae_file(tiny: TinyFlux) -> dict[str, torch.Tensor]:
    """``ae.safetensors``: the VAE in BFL's (LDM) layout, no prefix."""
    from guitrainer.engine.models.singlefile import vae_to_original

    ldm = vae_to_original(tiny.vae.state_dict(), len(tiny.vae.config.block_out_channels))
    return {k.removeprefix("first_stage_model."): v.clone().contiguous() for k, v in ldm.items()}


def save_comfy_checkpoint(tiny: TinyFlux, path: Path) -> Path:
    """One file holding everything, in ComfyUI's checkpoint layout."""
    from safetensors.torch import save_file

    sd = {f"model.diffusion_model.{k}": v for k, v in bfl_transformer(tiny).items()}
    sd |= {f"text_encoders.clip_l.transformer.{k}": v for k, v in clip_file(tiny).items()}
    sd |= {f"text_encoders.t5xxl.transformer.{k}": v for k, v in t5_file(tiny).items()}
    sd |= {f"vae.{k}": v for k, v in ae_file(tiny).items()}
    save_file(sd, str(path))
    return path


def save_split(tiny: TinyFlux, folder: Path) -> dict[str, Path]:
    """The four files of a split install: transformer (BFL layout), t5xxl, clip_l, ae."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "transformer": (folder / "flux1-tiny.safetensors", bfl_transformer(tiny)),
        "t5": (folder / "t5xxl_tiny.safetensors", t5_file(tiny)),
        "clip_l": (folder / "clip_l.safetensors", clip_file(tiny)),
        "vae": (folder / "ae.safetensors", ae_file(tiny)),
    }
    for path, sd in files.values():
        save_file(sd, str(path))
    return {part: path for part, (path, _) in files.items()}
