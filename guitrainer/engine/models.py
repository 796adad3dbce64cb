"""Base models: load any local diffusers folder, and build the tiny built-in demo model and dataset.

The demo model is made from configs with a fixed seed (random weights, no download), saved as a
normal diffusers folder under ``user_data_dir()/models/demo`` and then loaded through the very same
:func:`load_diffusers_folder` as any other model, so the demo exercises the real loading code.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from guitrainer.core.paths import expand, user_data_dir

log = logging.getLogger(__name__)

DEMO_NAME = "demo"
#: bump when the demo model's architecture changes, so an old cached copy is rebuilt
DEMO_VERSION = 3
DEMO_WORDS = [
    *("a", "photo", "of", "red", "green", "blue", "yellow", "purple", "orange", "white", "black"),
    *("circle", "square", "small", "big", "on", "background", "shape", "drawing", "demo"),
]


class ModelLoadError(RuntimeError):
    """The base model could not be loaded; the message says what was tried and what to do."""


@dataclass
class LoadedModel:
    """The parts of a Stable Diffusion model the trainer needs (all on CPU, fp32, frozen as loaded)."""

    unet: Any
    vae: Any
    text_encoders: list[Any]
    tokenizers: list[Any]
    noise_scheduler: Any
    family: str  # "demo", "sd15", "sdxl"
    path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text_encoder(self) -> Any:
        return self.text_encoders[0]

    @property
    def tokenizer(self) -> Any:
        return self.tokenizers[0]

    @property
    def prediction_type(self) -> str:
        return str(self.noise_scheduler.config.get("prediction_type", "epsilon"))


# --------------------------------------------------------------------------- loading


def load_base_model(model_cfg: Any, *, offline: bool | None = None) -> LoadedModel:
    """Load ``model_cfg.base`` (a :class:`guitrainer.config.ModelConfig`): 'demo', a diffusers folder or a hub id.

    Single-file checkpoints (.safetensors / .ckpt) are not supported yet and raise :class:`ModelLoadError`.
    """
    base = str(model_cfg.base).strip()
    family = str(getattr(model_cfg, "family", "auto"))
    if base == DEMO_NAME:
        return load_diffusers_folder(ensure_demo_model(), family="demo")
    path = expand(base)
    if path.is_dir():
        return load_diffusers_folder(path, family=family)
    if path.suffix.lower() in (".safetensors", ".ckpt") or path.is_file():
        raise ModelLoadError(
            f"{base}: single-file checkpoints are not supported yet; use a diffusers folder (with model_index.json)."
        )
    if offline is None:
        offline = _offline()
    try:
        return load_diffusers_folder(base, family=family, local_files_only=offline)
    except (OSError, ValueError) as e:
        hint = " (offline: only models already in the Hugging Face cache can be used)" if offline else ""
        raise ModelLoadError(f"could not load base model {base!r}{hint}: {e}") from e


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get("TRANSFORMERS_OFFLINE", "0") not in ("", "0")


def load_diffusers_folder(path: str | Path, *, family: str = "auto", local_files_only: bool = True) -> LoadedModel:
    """Load unet / vae / text encoder(s) / tokenizer(s) / scheduler from a diffusers layout (folder or hub id)."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    src = str(path)
    kw: dict[str, Any] = {"local_files_only": local_files_only}
    index = _read_model_index(path)
    has_te2 = "text_encoder_2" in index if index else Path(src, "text_encoder_2").is_dir()
    if family in ("auto", ""):
        family = "sdxl" if has_te2 else "sd15"
    try:
        unet = UNet2DConditionModel.from_pretrained(src, subfolder="unet", **kw)
        vae = AutoencoderKL.from_pretrained(src, subfolder="vae", **kw)
        text_encoders = [CLIPTextModel.from_pretrained(src, subfolder="text_encoder", **kw)]
        tokenizers = [CLIPTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)]
        if has_te2:
            text_encoders.append(CLIPTextModelWithProjection.from_pretrained(src, subfolder="text_encoder_2", **kw))
            tokenizers.append(CLIPTokenizer.from_pretrained(src, subfolder="tokenizer_2", **kw))
        scheduler = DDPMScheduler.from_pretrained(src, subfolder="scheduler", **kw)
    except OSError as e:
        raise ModelLoadError(f"{src} is not a complete diffusers model folder: {e}") from e
    for m in (unet, vae, *text_encoders):
        m.requires_grad_(False)
        m.eval()
    return LoadedModel(unet, vae, text_encoders, tokenizers, scheduler, family=family, path=src)


def _read_model_index(path: str | Path) -> dict[str, Any] | None:
    f = Path(path) / "model_index.json"
    if f.is_file():
        return json.loads(f.read_text(encoding="utf-8"))
    return None


# --------------------------------------------------------------------------- demo model


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


def build_demo_model(folder: Path, seed: int = 0) -> None:
    """Write a tiny SD-1.x-shaped diffusers model (random weights from ``seed``) into ``folder``."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    folder = Path(folder)
    tok_dir = folder / "tokenizer"
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


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2 / CLIP byte-level BPE alphabet: every byte maps to a printable unicode character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


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
