"""The base models on paper: parameter counts and the layers each LoRA target set trains, per family (no torch).

The tables below were computed once from the bundled configs (``resources/models``) and the models on ``meta``
by :func:`guitrainer.engine.memory.model_spec.compute_model_spec` and
:mod:`guitrainer.engine.memory.variant_spec`; ``tests/test_vram.py`` and ``tests/test_vram_variants.py``
recompute them.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from guitrainer.config import TrainingConfig

LoraTable = tuple[tuple[int, int, int, float], ...]  # (in, out, count, tokens per latent pixel; 0 = text tokens)

@dataclass(frozen=True)
class ModelSpec:
    """Parameter counts of one model family, and the shapes of the layers each LoRA target set trains."""

    family: str
    denoiser: int  # the UNet or the transformer
    text_encoders: tuple[int, ...]
    vae_encoder: int  # encoder + quant_conv
    vae_decoder: int  # decoder + post_quant_conv
    vae_channels: int  # channels of the VAE's first (full-resolution) block
    text_encoder_shapes: tuple[tuple[int, int, int], ...]  # (hidden, intermediate, layers) per text encoder
    cross_attention_dim: int
    denoiser_lora: dict[str, LoraTable] = field(default_factory=dict)
    text_encoder_lora: dict[str, tuple[LoraTable, ...]] = field(default_factory=dict)

    @property
    def vae(self) -> int:
        return self.vae_encoder + self.vae_decoder

    def lora_params_per_rank(self, target: str, text_encoder: bool = False) -> int:
        """Trainable parameters per unit of rank: sum of ``in + out`` over the targeted layers."""
        n = sum(c * (i + o) for i, o, c, _ in self.denoiser_lora[target])
        if text_encoder:
            n += sum(c * (i + o) for table in self.text_encoder_lora[target] for i, o, c, _ in table)
        return n


# fmt: off
MODEL_SPECS: dict[str, ModelSpec] = {
    "demo": ModelSpec(
        family='demo',
        denoiser=1055044,
        text_encoders=(51616,),
        vae_encoder=367344,
        vae_decoder=587223,
        vae_channels=32,
        text_encoder_shapes=((32, 64, 2),),
        cross_attention_dim=32,
        denoiser_lora={
            "attention": ((32, 32, 6, 0.0), (32, 32, 18, 1.0), (32, 64, 8, 0.0), (64, 64, 24, 0.25)),
            "attention_ff": ((32, 32, 6, 0.0), (32, 32, 18, 1.0), (32, 64, 8, 0.0), (32, 256, 3, 1.0), (64, 64, 24, 0.25), (64, 512, 4, 0.25), (128, 32, 3, 1.0), (256, 64, 4, 0.25)),
            "attention_ff_proj": ((32, 32, 6, 0.0), (32, 32, 24, 1.0), (32, 64, 8, 0.0), (32, 256, 3, 1.0), (64, 64, 32, 0.25), (64, 512, 4, 0.25), (128, 32, 3, 1.0), (256, 64, 4, 0.25)),
        },
        text_encoder_lora={
            "attention": (((32, 32, 8, 0.0),),),
            "attention_ff": (((32, 32, 8, 0.0),),),
            "attention_ff_proj": (((32, 32, 8, 0.0),),),
        },
    ),
    "sd15": ModelSpec(
        family='sd15',
        denoiser=859520964,
        text_encoders=(123060480,),
        vae_encoder=34163664,
        vae_decoder=49490199,
        vae_channels=128,
        text_encoder_shapes=((768, 3072, 12),),
        cross_attention_dim=768,
        denoiser_lora={
            "attention": ((320, 320, 30, 1.0), (640, 640, 30, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 1280, 6, 0.015625), (1280, 1280, 30, 0.0625)),
            "attention_ff": ((320, 320, 30, 1.0), (320, 2560, 5, 1.0), (640, 640, 30, 0.25), (640, 5120, 5, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 320, 5, 1.0), (1280, 1280, 6, 0.015625), (1280, 1280, 30, 0.0625), (1280, 10240, 1, 0.015625), (1280, 10240, 5, 0.0625), (2560, 640, 5, 0.25), (5120, 1280, 1, 0.015625), (5120, 1280, 5, 0.0625)),
            "attention_ff_proj": ((320, 320, 40, 1.0), (320, 2560, 5, 1.0), (640, 640, 40, 0.25), (640, 5120, 5, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 320, 5, 1.0), (1280, 1280, 8, 0.015625), (1280, 1280, 40, 0.0625), (1280, 10240, 1, 0.015625), (1280, 10240, 5, 0.0625), (2560, 640, 5, 0.25), (5120, 1280, 1, 0.015625), (5120, 1280, 5, 0.0625)),
        },
        text_encoder_lora={
            "attention": (((768, 768, 48, 0.0),),),
            "attention_ff": (((768, 768, 48, 0.0),),),
            "attention_ff_proj": (((768, 768, 48, 0.0),),),
        },
    ),
    "sdxl": ModelSpec(
        family='sdxl',
        denoiser=2567463684,
        text_encoders=(123060480, 694659840),
        vae_encoder=34163664,
        vae_decoder=49490199,
        vae_channels=128,
        text_encoder_shapes=((768, 3072, 12), (1280, 5120, 32)),
        cross_attention_dim=2048,
        denoiser_lora={
            "attention": ((640, 640, 60, 0.25), (1280, 1280, 360, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0)),
            "attention_ff": ((640, 640, 60, 0.25), (640, 5120, 10, 0.25), (1280, 1280, 360, 0.0625), (1280, 10240, 60, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0), (2560, 640, 10, 0.25), (5120, 1280, 60, 0.0625)),
            "attention_ff_proj": ((640, 640, 70, 0.25), (640, 5120, 10, 0.25), (1280, 1280, 372, 0.0625), (1280, 10240, 60, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0), (2560, 640, 10, 0.25), (5120, 1280, 60, 0.0625)),
        },
        text_encoder_lora={
            "attention": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
            "attention_ff": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
            "attention_ff_proj": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
        },
    ),
}

#: ``(in channels, out, kernel side, count, positions per latent pixel)`` of the UNet layers the variants add
#: (ResNet conv1 / conv2 / conv_shortcut / time_emb_proj, down- and upsampler convs)
# fmt: off
CONV_TABLES: dict[str, tuple[tuple[int, int, int, int, float], ...]] = {
    "demo": ((32, 32, 3, 5, 1.0), (32, 64, 1, 1, 0.25), (32, 64, 3, 1, 0.25), (64, 32, 1, 1, 1.0), (64, 32, 3, 1, 1.0), (64, 64, 3, 1, 1.0), (64, 64, 3, 7, 0.25), (96, 32, 1, 1, 1.0), (96, 32, 3, 1, 1.0), (96, 64, 1, 1, 0.25), (96, 64, 3, 1, 0.25), (128, 32, 1, 3, 0.0), (128, 64, 1, 1, 0.25), (128, 64, 1, 5, 0.0), (128, 64, 3, 1, 0.25)),
    "sd15": ((320, 320, 3, 8, 1.0), (320, 640, 1, 1, 0.25), (320, 640, 3, 1, 0.25), (640, 320, 1, 2, 1.0), (640, 320, 3, 2, 1.0), (640, 640, 3, 1, 1.0), (640, 640, 3, 7, 0.25), (640, 1280, 1, 1, 0.0625), (640, 1280, 3, 1, 0.0625), (960, 320, 1, 1, 1.0), (960, 320, 3, 1, 1.0), (960, 640, 1, 1, 0.25), (960, 640, 3, 1, 0.25), (1280, 320, 1, 5, 0.0), (1280, 640, 1, 1, 0.25), (1280, 640, 1, 5, 0.0), (1280, 640, 3, 1, 0.25), (1280, 1280, 1, 12, 0.0), (1280, 1280, 3, 1, 0.25), (1280, 1280, 3, 8, 0.0625), (1280, 1280, 3, 11, 0.015625), (1920, 640, 1, 1, 0.25), (1920, 640, 3, 1, 0.25), (1920, 1280, 1, 1, 0.0625), (1920, 1280, 3, 1, 0.0625), (2560, 1280, 1, 2, 0.0625), (2560, 1280, 1, 3, 0.015625), (2560, 1280, 3, 2, 0.0625), (2560, 1280, 3, 3, 0.015625)),
    "sdxl": ((320, 320, 3, 8, 1.0), (320, 640, 1, 1, 0.25), (320, 640, 3, 1, 0.25), (640, 320, 1, 2, 1.0), (640, 320, 3, 2, 1.0), (640, 640, 3, 1, 1.0), (640, 640, 3, 7, 0.25), (640, 1280, 1, 1, 0.0625), (640, 1280, 3, 1, 0.0625), (960, 320, 1, 1, 1.0), (960, 320, 3, 1, 1.0), (960, 640, 1, 1, 0.25), (960, 640, 3, 1, 0.25), (1280, 320, 1, 5, 0.0), (1280, 640, 1, 1, 0.25), (1280, 640, 1, 5, 0.0), (1280, 640, 3, 1, 0.25), (1280, 1280, 1, 7, 0.0), (1280, 1280, 3, 1, 0.25), (1280, 1280, 3, 10, 0.0625), (1920, 640, 1, 1, 0.25), (1920, 640, 3, 1, 0.25), (1920, 1280, 1, 1, 0.0625), (1920, 1280, 3, 1, 0.0625), (2560, 1280, 1, 2, 0.0625), (2560, 1280, 3, 2, 0.0625)),
}

#: per text encoder, ``(in, out, count)`` of its MLP layers (fc1 / fc2), which every variant trains
TEXT_ENCODER_MLP_TABLES: dict[str, tuple[tuple[tuple[int, int, int], ...], ...]] = {
    "demo": (((32, 64, 2), (64, 32, 2)),),
    "sd15": (((768, 3072, 12), (3072, 768, 12)),),
    "sdxl": (((768, 3072, 12), (3072, 768, 12)), ((1280, 5120, 32), (5120, 1280, 32))),
}
# fmt: on

FAMILY_LABELS = {"demo": "Demo (tiny)", "sd15": "SD 1.5", "sdxl": "SDXL"}


def resolve_family(family: str, base: str = "") -> str:
    """'auto' is what the base model's files say (:func:`detected_family`); failing that a guess from its name
    (SDXL when it says 'xl'), else SD 1.5."""
    if family in ("demo", "sd15", "sdxl"):
        return family
    return detected_family(base) or ("sdxl" if "xl" in base.lower() else "sd15")

def detected_family(base: str) -> str | None:
    """The family :func:`guitrainer.core.model.checkpoint.detect_model` reads from the base model's files (a folder's
    configs, a checkpoint's tensor names, "demo"); None when they do not say. Cached until the path changes."""
    text = str(base).strip()
    if not text:
        return None
    try:
        stamp = os.stat(os.path.expanduser(text)).st_mtime_ns
    except OSError:
        stamp = None
    return _detected(text, stamp)

@functools.lru_cache(maxsize=16)
def _detected(text: str, _stamp: int | None) -> str | None:
    from guitrainer.core.model.checkpoint import detect_model

    return detect_model(text).family


def spec_for(config: TrainingConfig) -> ModelSpec:
    """The spec of the family ``config`` trains (``model.family``, or what its base model's files say)."""
    return MODEL_SPECS[resolve_family(str(config.model.family), str(config.model.base))]
