"""The built-in demo: a tiny SD-1.x-shaped model of our own that draws flat shapes, and the dataset it learns from.

The model ships with the app (``resources/models/demo_base``: a normal diffusers folder, about 8 MB). Its
weights were trained from scratch by ``resources/make_demo_base.py`` on the shapes of
:mod:`guitrainer.core.demo.shapes` ("a blue square", "a red circle", …) with a fixed seed, so its samples at
64 px show the shape and colour a prompt names; nothing is downloaded. It is loaded like any other folder
(:func:`guitrainer.engine.models.loading.load_base_model` with ``model.base = "demo"``). :func:`build_demo_model`
writes the same architecture with untrained weights (the training script's start, and the memory spec's
model on ``meta``). The Demo dataset is drawn on first use (:mod:`guitrainer.core.demo.dataset`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.paths import resources_dir
from guitrainer.core.demo.dataset import demo_dataset_dir, ensure_demo_dataset
from guitrainer.core.model.clip_bpe import bytes_to_unicode
from guitrainer.engine.models.types import ModelLoadError

log = logging.getLogger(__name__)

__all__ = [
    "DEMO_MARKER", "DEMO_NAME", "DEMO_VERSION", "DEMO_WORDS", "build_demo_model", "demo_components",
    "demo_dataset_dir", "demo_model_dir", "demo_vocab", "ensure_demo_dataset", "ensure_demo_model",
    "write_demo_folder", "write_demo_tokenizer",
]

DEMO_NAME = "demo"
#: the shipped model's version: ``make_demo_base.py`` writes it into :data:`DEMO_MARKER`; a folder with
#: another version (an older install's) is refused with a message rather than trained on
DEMO_VERSION = 4
#: the file in the model folder that says what made it (version, seed, steps, time, the check's figures)
DEMO_MARKER = "guitrainer_demo.json"
DEMO_WORDS = [
    *("a", "an", "photo", "of", "red", "green", "blue", "yellow", "purple", "white", "black"),
    *("circle", "square", "triangle", "small", "big", "on", "background", "shape", "drawing", "demo"),
]


def demo_model_dir() -> Path:
    """The shipped demo base model's folder (inside the install: read only)."""
    return resources_dir() / "models" / "demo_base"


def ensure_demo_model() -> Path:
    """The demo base model's folder, checked: its marker must say :data:`DEMO_VERSION`."""
    folder = demo_model_dir()
    marker = folder / DEMO_MARKER
    try:
        version = json.loads(marker.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        version = None
    if version != DEMO_VERSION:
        found = "is missing" if version is None else f"is version {version}, this app needs {DEMO_VERSION}"
        raise ModelLoadError(
            f"the built-in demo model in {folder} {found}: reinstall guitrainer, or rebuild it with "
            "'python resources/make_demo_base.py' (about 40 minutes on a 2-core CPU)"
        )
    return folder


def write_demo_tokenizer(tok_dir: Path) -> dict[str, int]:
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


def demo_components(vocab: dict[str, int], seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """The demo architecture with untrained weights from ``seed``: ``(unet, vae, text_encoder, scheduler)``."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

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
    return unet, vae, text_encoder, scheduler


def build_demo_model(folder: Path, seed: int = 0) -> None:
    """Write the demo architecture with untrained weights from ``seed`` into ``folder`` (a diffusers folder)."""
    folder = Path(folder)
    vocab = write_demo_tokenizer(folder / "tokenizer")
    write_demo_folder(folder, *demo_components(vocab, seed))


def write_demo_folder(folder: Path, unet: Any, vae: Any, text_encoder: Any, scheduler: Any) -> None:
    """Save the demo's modules as a diffusers ``StableDiffusionPipeline`` folder (the tokenizer is written apart)."""
    folder = Path(folder)
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
