"""Qwen-Image on the family seam: a :class:`~guitrainer.engine.families.flow_family.FlowFamily` whose VAE is Wan's
3-D one (an image is a one-frame video: ``[B, C, 1, H, W]``, latents normalised per channel by the config's
``latents_mean`` / ``latents_std``, as QwenImagePipeline decodes them), whose latents go in as Flux's 2x2 tokens with
``img_shapes`` for its RoPE, and whose transformer takes σ as the timestep (the pipeline's ``t / 1000``) and the
caption's tokens with their mask. It predicts the velocity ``ε − x0``, as Flux does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.core.families.qwenimage import FACTS
from guitrainer.engine.families.base import Draw, TextConditioning
from guitrainer.engine.families.flow_family import FlowFamily
from guitrainer.engine.families.flux1 import latents as packing
from guitrainer.engine.families.qwenimage import client_keys, export, loading, sampling
from guitrainer.engine.families.qwenimage import network as lora_targets
from guitrainer.engine.families.qwenimage import text as text_encoding
from guitrainer.engine.models.types import LoadedModel


def latent_statistics(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The VAE config's per-channel ``latents_mean`` and ``latents_std`` as ``[1, C, 1, 1]`` tensors like ``like``."""
    cfg = vae.config
    shape = (1, int(cfg.z_dim), 1, 1)
    mean = torch.tensor(cfg.latents_mean, dtype=like.dtype, device=like.device).view(shape)
    std = torch.tensor(cfg.latents_std, dtype=like.dtype, device=like.device).view(shape)
    return mean, std


class QwenImage(FlowFamily):
    """Qwen-Image and Qwen-Image-2512 (one architecture)."""

    facts = FACTS
    loading = loading
    sampling = sampling
    pipeline_class = "QwenImagePipeline"
    storage_skip_patterns: tuple[str, ...] = lora_targets.STORAGE_SKIP_PATTERNS
    #: diffusers' names, which ComfyUI keeps for Qwen-Image (:mod:`.client_keys`)
    client_layout = client_keys.LAYOUT

    def meta_model(self, config: TrainingConfig, blocks: Sequence[int] | None = None) -> LoadedModel:
        """Full-size Qwen-Image on ``meta``; ``blocks``' last entry the blocks kept, if given."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from guitrainer.engine.families.qwenimage.spec import on_meta

        transformer, vae, qwen25 = on_meta(None if blocks is None else int(blocks[-1]))
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(self.default_config_dir(), subfolder="scheduler")
        return LoadedModel(transformer, vae, [qwen25], [], scheduler, family=self.name, source="meta")

    # ------------------------------------------------------------------ latents
    def latent_distribution(self, vae: nn.Module, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The 3-D VAE's (mean, std) of ``pixels`` as one-frame videos, the frame axis dropped: ``[B, 16, H/8, W/8]``."""
        dist = vae.encode(pixels.unsqueeze(2)).latent_dist
        return dist.mean.squeeze(2), dist.std.squeeze(2)

    def to_model_latents(self, vae: nn.Module, sample: torch.Tensor) -> torch.Tensor:
        """``(z − latents_mean) / latents_std`` per channel: what QwenImagePipeline's decode undoes."""
        mean, std = latent_statistics(vae, sample)
        return (sample - mean) / std

    def size_multiple(self, model: LoadedModel) -> int:
        """Sample sides are multiples of the VAE's 8x (``2 ** len(temperal_downsample)``) times the 2x2 patches."""
        return 2 ** len(model.vae.config.temperal_downsample) * 2

    # ------------------------------------------------------------------ objective
    def encode_text(
        self, model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
    ) -> TextConditioning:
        return text_encoding.encode(model.tokenizers, text_encoders, captions, device)

    def predict(
        self, config: TrainingConfig, denoiser: nn.Module, model: LoadedModel, draw: Draw, text: TextConditioning,
        batch: Mapping[str, Any],
    ) -> torch.Tensor:
        """The velocity, as QwenImagePipeline calls the transformer: 2x2 tokens with ``img_shapes`` ``(1, h/2, w/2)``
        per image, σ as the timestep, the captions cut to the batch's longest with their mask (:func:`.text.cut`);
        unpacked out."""
        noisy = draw.noisy
        b, _, h, w = noisy.shape
        hidden, mask = text_encoding.cut(text)
        out = denoiser(
            hidden_states=packing.pack(noisy),
            timestep=draw.timesteps.to(device=noisy.device, dtype=noisy.dtype),
            encoder_hidden_states=hidden.to(noisy.dtype),
            encoder_hidden_states_mask=mask,
            img_shapes=[[(1, h // 2, w // 2)]] * b,
            return_dict=False,
        )[0]
        return packing.unpack(out, h, w)

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
