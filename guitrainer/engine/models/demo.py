"""The built-in demo: a tiny SD-1.x-shaped model made from configs, and a dataset of coloured shapes to train it on.

The model has random weights from a fixed seed and its own tiny CLIP vocabulary (nothing is downloaded); it is
saved as a normal diffusers folder under ``user_data_dir()/models/demo`` and loaded like any other folder
(:func:`guitrainer.engine.models.loading.load_base_model` with ``model.base = "demo"``). The dataset is drawn
on first use under ``user_data_dir()/demo_dataset``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from guitrainer.base.paths import user_data_dir
from guitrainer.core.model.clip_bpe import bytes_to_unicode

log = logging.getLogger(__name__)

DEMO_NAME = "demo"
#: bump when the demo model's architecture changes, so an old cached copy is rebuilt
DEMO_VERSION = 3
DEMO_WORDS = [
    *("a", "photo", "of", "red", "green", "blue", "yellow", "purple", "orange", "white", "black"),
    *("circle", "square", "small", "big", "on", "background", "shape", "drawing", "demo"),
]


def demo_model_dir() -> Path:
    return user_data_dir() / "models" / DEMO_NAME


def ensure_demo_model() -> Path:
    """Build the tiny demo model on first use (atomically: temp folder, then rename) and return its folder."""
    target = demo_model_dir()
    marker = target / "guitrainer_demo.json"
    if marker.is_file() and json.loads(marker.read_text()).get("version") == DEMO_VERSION:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo.", dir=target.parent))
    try:
        build_demo_model(tmp)
        (tmp / "guitrainer_demo.json").write_text(json.dumps({"version": DEMO_VERSION}))
        if target.exists():
            old = target.with_name(f".demo.old.{os.getpid()}")
            os.replace(target, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race; use theirs
            if not marker.is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("built the demo model in %s", target)
    return target


def _write_demo_tokenizer(tok_dir: Path) -> dict[str, int]:
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


def build_demo_model(folder: Path, seed: int = 0) -> None:
    """Write a tiny SD-1.x-shaped diffusers model (random weights from ``seed``) into ``folder``."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    folder = Path(folder)
    vocab = _write_demo_tokenizer(folder / "tokenizer")
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


# --------------------------------------------------------------------------- demo dataset

_DEMO_SHAPES = (
    ("red", (220, 40, 40), "circle"),
    ("green", (40, 180, 60), "square"),
    ("blue", (40, 80, 220), "circle"),
    ("yellow", (230, 210, 40), "square"),
    ("purple", (150, 60, 190), "circle"),
    ("orange", (240, 140, 30), "square"),
    ("white", (245, 245, 245), "circle"),
    ("black", (15, 15, 15), "square"),
)


def demo_dataset_dir() -> Path:
    return user_data_dir() / "demo_dataset"


def ensure_demo_dataset(size: int = 96) -> Path:
    """Draw ~8 coloured circles / squares with .txt captions on first use; return the folder."""
    from PIL import Image, ImageDraw

    target = demo_dataset_dir()
    if (target / "done.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo_dataset.", dir=target.parent))
    try:
        for i, (color_name, rgb, shape) in enumerate(_DEMO_SHAPES):
            bg = (30, 30, 30) if color_name == "white" else (235, 235, 235)
            img = Image.new("RGB", (size, size), bg)
            draw = ImageDraw.Draw(img)
            m = size // 5 + (i % 3) * 4
            box = (m, m, size - m, size - m)
            if shape == "circle":
                draw.ellipse(box, fill=rgb)
            else:
                draw.rectangle(box, fill=rgb)
            img.save(tmp / f"{i:02d}_{color_name}_{shape}.png")
            (tmp / f"{i:02d}_{color_name}_{shape}.txt").write_text(f"a photo of a {color_name} {shape}", encoding="utf-8")
        (tmp / "done.json").write_text("{}")
        if not target.exists():
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
