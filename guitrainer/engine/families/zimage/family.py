"""Z-Image on the family seam: a :class:`~guitrainer.engine.families.flow_family.FlowFamily` whose transformer is
called as ZImagePipeline calls it: each image's latents a ``[C, 1, H, W]`` entry of a list (one frame; it patchifies
2x2 itself), each caption's own tokens, and the time ``1 − σ`` (the pipeline's ``(1000 − t) / 1000``); it returns
``x0 − ε``, which the pipeline negates into the velocity its Euler step takes. :meth:`Zimage.predict` negates it the
same way, so the loss is the velocity loss every flow family here uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.core.families.zimage import FACTS
from guitrainer.engine.families.base import Draw, TextConditioning
from guitrainer.engine.families.flow_family import FlowFamily
from guitrainer.engine.families.zimage import client_keys, export, loading, sampling
from guitrainer.engine.families.zimage import network as lora_targets
from guitrainer.engine.families.zimage import text as text_encoding
from guitrainer.engine.families.zimage.spec import BLOCK_LISTS
from guitrainer.engine.models.types import LoadedModel

#: Turbo and Base are one architecture: only the name says which (``Z-Image-Turbo``, ``z_image_turbo_bf16``)
TURBO_NOTE = (
    "this looks like Z-Image-Turbo, which is distilled to sample in 8 steps without guidance: a LoRA trained on it "
    "directly wears that off (DiffSynth-Studio's Z-Image docs), so musubi-tuner and ai-toolkit train on Z-Image Base, "
    "or on Turbo with a de-distilling training adapter. The Z-Image preset uses Base. Samples of Turbo need about 8 "
    "steps and guidance 0"
)


def is_turbo(base: str) -> bool:
    """Whether a base model's path or hub id names Z-Image-Turbo."""
    return "turbo" in Path(str(base)).name.lower() or "turbo" in str(base).lower().rsplit("/", 1)[-1]


class Zimage(FlowFamily):
    """Z-Image Turbo and Z-Image Base (one architecture)."""

    facts = FACTS
    loading = loading
    sampling = sampling
    pipeline_class = "ZImagePipeline"
    storage_skip_patterns: tuple[str, ...] = lora_targets.STORAGE_SKIP_PATTERNS
    block_lists: tuple[str, ...] = BLOCK_LISTS
    #: the original layout, fused qkv: ComfyUI reads Z-Image as a Lumina 2 (:mod:`.client_keys`)
    client_layout = client_keys.LAYOUT

    def prepare(self, config: TrainingConfig, model: LoadedModel, warn: Callable[[str], None]) -> None:
        """A base model named Turbo: say what training it does to its 8-step sampling (the file cannot tell)."""
        if is_turbo(model.path or str(config.model.base)):
            warn(TURBO_NOTE)

    def meta_model(self, config: TrainingConfig, blocks: Sequence[int] | None = None) -> LoadedModel:
        """Full-size Z-Image on ``meta``; ``blocks``' last entry the main layers kept, if given."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from guitrainer.engine.families.zimage.spec import on_meta

        transformer, vae, qwen3 = on_meta(None if blocks is None else int(blocks[-1]))
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(self.default_config_dir(), subfolder="scheduler")
        return LoadedModel(transformer, vae, [qwen3], [], scheduler, family=self.name, source="meta")

    def encode_text(
        self, model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
    ) -> TextConditioning:
        return text_encoding.encode(model.tokenizers, text_encoders, captions, device)

    def predict(
        self, config: TrainingConfig, denoiser: nn.Module, model: LoadedModel, draw: Draw, text: TextConditioning,
        batch: Mapping[str, Any],
    ) -> torch.Tensor:
        """The velocity, as ZImagePipeline computes it: ``−transformer([x_i as C x 1 x H x W], 1 − σ, captions)``."""
        noisy = draw.noisy
        images = list(noisy.unsqueeze(2).unbind(dim=0))
        # in fp32, as the pipeline passes it (the scheduler's): bf16 would move 1000·t by up to 4 steps
        time = (1.0 - draw.timesteps).to(device=noisy.device, dtype=torch.float32)
        out = denoiser(images, time, text_encoding.captions_of(text), return_dict=False)[0]
        return -torch.stack(list(out), dim=0).squeeze(2)

    # ------------------------------------------------------------------ network
    def denoiser_targets(self, network: NetworkConfig) -> tuple[str, ...]:
        return lora_targets.denoiser_targets(str(network.target_modules))

    def kohya_state_dict(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> dict[str, torch.Tensor]:
        return export.kohya_state_dict(denoiser, alpha)

    def diffusers_lora(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        return export.diffusers_state_dict(denoiser, alpha), {}

    def load_lora_file(
        self, path: Path, network: NetworkConfig, denoiser: nn.Module, text_encoders: Sequence[nn.Module],
        skipped: list[str],
    ) -> int:
        return export.load_lora_file(path, network, denoiser, skipped)

    def metadata(self, config: TrainingConfig, model: LoadedModel | None) -> dict[str, str]:
        return export.metadata(config, self.flow_settings(config))
