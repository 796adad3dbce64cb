"""A tiny SD 3.5 built from configs (random weights, nothing downloaded), in the three layouts users have.

* the transformer: 3 joint blocks of width 192 (64 × depth, the rule ComfyUI and sd-scripts build MMDiTs by), RMS
  qk-norm and dual attention in block 0 like SD 3.5 Medium, so all three kinds of block are there: a dual one,
  a plain one and the last, pre-only one;
* CLIP-L and CLIP-G at their real widths (768 and 1280: that is how a split file's CLIP is told apart) but with
  2 layers and a small MLP; T5 v1.1 (gated GELU) with one block, of width 2304 = the transformer's
  ``joint_attention_dim``, wider than CLIP-L + CLIP-G's 2048 so the zero padding is exercised;
* a 2-level 16-channel VAE with SD 3's scale and shift;
* tokenizers built here: the CLIPs from the demo vocabulary (CLIP-G padding with "!", as OpenCLIP), T5 a
  ``tokenizers`` Unigram inside ``T5TokenizerFast``.

:func:`build_tiny_sd35` writes a diffusers folder, one Stability / ComfyUI-layout checkpoint holding everything,
and the split files (transformer + VAE as in Stability's ``sd3.5_large.safetensors``, ``clip_l``, ``clip_g``,
``t5xxl``, a standalone VAE).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DEPTH = 3
HIDDEN = 64 * DEPTH
JOINT_DIM = 2304
CLIP_L_WIDTH, CLIP_G_WIDTH = 768, 1280
T5_WORDS = ("a", "photo", "of", "cat", "dog", "red", "blue", "circle", "square", "on", "the", "table", "sks")
CAPTIONS = ["a photo of a red circle", "a blue square on the table"]


@dataclass(frozen=True)
class TinySd35:
    """Where each layout of the tiny model was written."""

    folder: Path
    single_file: Path
    transformer_file: Path
    clip_l: Path
    clip_g: Path
    t5: Path
    vae: Path


def transformer_config() -> dict[str, Any]:
    return {
        "sample_size": 16, "patch_size": 2, "in_channels": 16, "num_layers": DEPTH, "attention_head_dim": 64,
        "num_attention_heads": DEPTH, "joint_attention_dim": JOINT_DIM, "caption_projection_dim": HIDDEN,
        "pooled_projection_dim": CLIP_L_WIDTH + CLIP_G_WIDTH, "out_channels": 16, "pos_embed_max_size": 16,
        "dual_attention_layers": (0,), "qk_norm": "rms_norm",
    }


def _clip_tokenizer(folder: Path, pad: str) -> dict[str, int]:
    from guitrainer.engine.models.demo import demo_vocab

    vocab, merges = demo_vocab()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n", encoding="utf-8")
    special = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": pad}
    config = {"tokenizer_class": "CLIPTokenizer", "model_max_length": 77, "do_lower_case": True, **special}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(special), encoding="utf-8")
    return vocab


def t5_tokenizer(folder: Path) -> int:
    """A T5 tokenizer of :data:`T5_WORDS` (plus the letters, for anything else); returns its vocabulary size."""
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [(f"▁{w}", -1.0) for w in T5_WORDS] + [(c, -5.0) for c in "abcdefghijklmnopqrstuvwxyz"]
    tok = T5TokenizerFast(vocab=pieces, extra_ids=0)
    tok.model_max_length = 512
    tok.save_pretrained(str(folder))
    return len(pieces)


def _clip(width: int, vocab: dict[str, int], act: str):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=len(vocab), hidden_size=width, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=77, hidden_act=act, projection_dim=width,
        bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"],
    )
    return CLIPTextModelWithProjection(config)


def build_modules(folder: Path, seed: int = 0) -> dict[str, Any]:
    """The tiny model's modules (tokenizer files written into ``folder``)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import T5Config, T5EncoderModel

    vocab = _clip_tokenizer(folder / "tokenizer", "<|endoftext|>")
    _clip_tokenizer(folder / "tokenizer_2", "!")
    t5_vocab = t5_tokenizer(folder / "tokenizer_3")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        transformer = SD3Transformer2DModel(**transformer_config())
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 32), layers_per_block=1,
            latent_channels=16, norm_num_groups=32, sample_size=32, scaling_factor=1.5305, shift_factor=0.0609,
            use_quant_conv=False, use_post_quant_conv=False,
        )
        clip_l = _clip(CLIP_L_WIDTH, vocab, "quick_gelu")
        clip_g = _clip(CLIP_G_WIDTH, vocab, "gelu")
        with torch.no_grad():  # SD 3 uses CLIP-L's pooled output unprojected (see loading.py): identity, as SAI saved it
            clip_l.text_projection.weight.copy_(torch.eye(CLIP_L_WIDTH))
        t5 = T5EncoderModel(T5Config(
            vocab_size=t5_vocab, d_model=JOINT_DIM, d_kv=32, d_ff=64, num_layers=1, num_heads=2,
            feed_forward_proj="gated-gelu", relative_attention_num_buckets=8, relative_attention_max_distance=16,
            pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        ))
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    for m in (transformer, vae, clip_l, clip_g, t5):
        m.eval()
    return {"transformer": transformer, "vae": vae, "text_encoder": clip_l, "text_encoder_2": clip_g,
            "text_encoder_3": t5, "scheduler": scheduler}


def write_folder(folder: Path, modules: dict[str, Any]) -> None:
    """A diffusers folder of ``modules`` (tokenizers already written by :func:`build_modules`)."""
    for name, module in modules.items():
        module.save_pretrained(str(folder / name))
    index = {
        "_class_name": "StableDiffusion3Pipeline",
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_3": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "tokenizer_2": ["transformers", "CLIPTokenizer"],
        "tokenizer_3": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "SD3Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    (folder / "model_index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def original_layout(modules: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    """Each part in the layout single files use, without prefixes: the MMDiT's names, the VAE's LDM names
    (``encoder.down.0…``), the transformers layout for the CLIPs (CLIP-L without a projection, as ComfyUI's
    ``clip_l.safetensors``) and T5."""
    from guitrainer.engine.families.sd35 import convert
    from guitrainer.engine.models.singlefile import vae_to_original

    transformer, vae = modules["transformer"], modules["vae"]
    vae_sd = vae_to_original(vae.state_dict(), len(vae.config.block_out_channels))
    clip_l = {k: v for k, v in modules["text_encoder"].state_dict().items() if not k.startswith("text_projection")}
    t5 = dict(modules["text_encoder_3"].state_dict())
    t5.pop("encoder.embed_tokens.weight", None)  # t5xxl files carry the tied embedding once, as shared.weight
    return {
        "transformer": convert.to_original(transformer.state_dict(), transformer.config),
        "vae": {k.removeprefix("first_stage_model."): v for k, v in vae_sd.items()},
        "clip_l": clip_l,
        "clip_g": dict(modules["text_encoder_2"].state_dict()),
        "t5": t5,
    }


def _save(path: Path, tensors: dict[str, torch.Tensor]) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(path))
    return path


def build_tiny_sd35(root: Path, seed: int = 0) -> TinySd35:
    """Write the tiny model under ``root`` in every layout (a second call reuses what is there)."""
    root = Path(root)
    done = root / "done.json"
    folder = root / "diffusers"
    if not done.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        modules = build_modules(folder, seed)
        write_folder(folder, modules)
        parts = original_layout(modules)
        every = {f"model.diffusion_model.{k}": v for k, v in parts["transformer"].items()}
        every.update({f"first_stage_model.{k}": v for k, v in parts["vae"].items()})
        for kind, prefix in (("clip_l", "clip_l"), ("clip_g", "clip_g"), ("t5", "t5xxl")):
            every.update({f"text_encoders.{prefix}.transformer.{k}": v for k, v in parts[kind].items()})
        _save(root / "sd35_tiny_all.safetensors", every)
        split = root / "split"
        split.mkdir(exist_ok=True)
        with_vae = {f"model.diffusion_model.{k}": v for k, v in parts["transformer"].items()}
        with_vae.update({f"first_stage_model.{k}": v for k, v in parts["vae"].items()})
        _save(split / "sd3.5_tiny.safetensors", with_vae)
        _save(split / "clip_l.safetensors", parts["clip_l"])
        _save(split / "clip_g.safetensors", parts["clip_g"])
        _save(split / "t5xxl.safetensors", parts["t5"])
        _save(split / "sd35_vae.safetensors", parts["vae"])
        done.write_text("{}", encoding="utf-8")
    split = root / "split"
    return TinySd35(
        folder=folder, single_file=root / "sd35_tiny_all.safetensors", transformer_file=split / "sd3.5_tiny.safetensors",
        clip_l=split / "clip_l.safetensors", clip_g=split / "clip_g.safetensors", t5=split / "t5xxl.safetensors",
        vae=split / "sd35_vae.safetensors",
    )
