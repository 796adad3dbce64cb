"""Chroma on the family seam: the :class:`~guitrainer.engine.families.base.Family` the trainer, caches, sampling,
export and Verify call. Its objective is Flux's flow matching on packed latents (the packing is Flux's,
:mod:`guitrainer.engine.families.flux1.latents`), without a guidance input or a pooled text vector, and with the
text mask Chroma attends with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.core.families.chroma import FACTS
from guitrainer.engine import flow_matching
from guitrainer.engine.families.base import Draw, Family, ModelParts, TextConditioning
from guitrainer.engine.families.chroma import client_keys, export, loading, sampling
from guitrainer.engine.families.chroma import network as lora_targets
from guitrainer.engine.families.chroma import text as text_encoding
from guitrainer.engine.families.flux1 import latents as packing
from guitrainer.engine.models.types import LoadedModel


def flow_settings(config: TrainingConfig) -> flow_matching.FlowSettings:
    """The run's flow-matching settings, "auto" resolved to Chroma's defaults (sd-scripts' recommended)."""
    return flow_matching.settings_for(config, FACTS.flow_defaults)


class Chroma(Family):
    """Chroma1-HD and Chroma1-Base (one architecture; HD is Base fine-tuned at 1024 px)."""

    facts = FACTS
    storage_skip_patterns: tuple[str, ...] = lora_targets.STORAGE_SKIP_PATTERNS
    #: BFL's names, fused qkv and linear1: ComfyUI reads Chroma as a Flux (:mod:`.client_keys`)
    client_layout = client_keys.LAYOUT

    # ------------------------------------------------------------------ files
    def load_folder(
        self, path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        return loading.load_folder(path, local_files_only=local_files_only, dtype=dtype, vae_dtype=vae_dtype)

    def load_single_file(
        self, path: Path, state: dict[str, torch.Tensor], *, config_dir: Path, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        return loading.load_single_file(path, state, config_dir=config_dir, dtype=dtype, vae_dtype=vae_dtype)

    def load_parts(
        self, parts: ModelParts, *, config_dir: Path, dtype: torch.dtype = torch.float32, vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        return loading.load_parts(parts, config_dir=config_dir, dtype=dtype, vae_dtype=vae_dtype)

    def meta_model(self, config: TrainingConfig, blocks: Sequence[int] | None = None) -> LoadedModel:
        """Full-size Chroma1-HD on ``meta`` (:func:`.spec.on_meta`), ``blocks`` = (double, single) if given."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from guitrainer.engine.families.chroma.spec import on_meta

        transformer, vae, t5 = on_meta(None if blocks is None else (int(blocks[0]), int(blocks[1])))
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(self.default_config_dir(), subfolder="scheduler")
        return LoadedModel(transformer, vae, [t5], [], scheduler, family=self.name, source="meta")

    # ------------------------------------------------------------------ text
    def encode_text(
        self, model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
    ) -> TextConditioning:
        return text_encoding.encode(model.tokenizers, text_encoders, captions, device)

    def trainable_text_encoders(self, model: LoadedModel) -> list[int]:
        return list(FACTS.trainable_text_encoders)

    # ------------------------------------------------------------------ objective
    def draw(self, config: TrainingConfig, model: LoadedModel, latents: torch.Tensor, timesteps: torch.Tensor | None) -> Draw:
        """Noise, σ (sampled as ``[flow]`` says unless given) and the noisy latents ``(1 − σ)·x0 + σ·ε``; the target
        is the velocity ``ε − x0`` (``raw``) or ``x0``."""
        settings = flow_settings(config)
        noise = torch.randn_like(latents)
        if timesteps is None:
            tokens = packing.image_tokens(latents.shape[-2], latents.shape[-1])
            sigma = flow_matching.sample_sigmas(settings, latents.shape[0], image_tokens=tokens, device=latents.device)
        else:
            sigma = timesteps.to(device=latents.device, dtype=torch.float32)
        raw = settings.model_prediction_type == "raw"
        return Draw(
            noise=noise,
            timesteps=sigma,
            noisy=flow_matching.noisy_input(latents, noise, sigma),
            target=flow_matching.velocity_target(latents, noise) if raw else latents,
            weights=None if settings.weighting_scheme == "none" else flow_matching.loss_weighting(settings.weighting_scheme, sigma),
        )

    def predict(
        self, config: TrainingConfig, denoiser: nn.Module, model: LoadedModel, draw: Draw, text: TextConditioning,
        batch: Mapping[str, Any],
    ) -> torch.Tensor:
        """The velocity the transformer predicts, as latents: packed 2x2 tokens in, 2-D position ids, σ itself as the
        timestep (the transformer multiplies by 1000, as ChromaPipeline passes ``t / 1000``), the joint attention
        mask of :mod:`.text`; unpacked out."""
        noisy = draw.noisy
        _b, _, h, w = noisy.shape
        tokens = packing.pack(noisy)
        t5 = text["t5"]
        mask = text_encoding.joint_mask(text["mask"].to(device=noisy.device, dtype=t5.dtype), tokens.shape[1])
        out = denoiser(
            hidden_states=tokens,
            encoder_hidden_states=t5,
            timestep=draw.timesteps.to(device=noisy.device, dtype=noisy.dtype),
            img_ids=packing.image_ids(h, w, noisy.device, noisy.dtype),
            txt_ids=packing.text_ids(t5.shape[1], noisy.device, noisy.dtype),
            attention_mask=mask,
            return_dict=False,
        )[0]
        return packing.unpack(out, h, w)

    def loss(self, config: TrainingConfig, model: LoadedModel, prediction: torch.Tensor, draw: Draw, latents: torch.Tensor) -> torch.Tensor:
        return flow_matching.flow_loss(flow_settings(config), prediction, draw.noisy, latents, draw.noise, draw.timesteps)

    def validation_timesteps(self, config: TrainingConfig, model: LoadedModel, count: int) -> list[float]:
        return flow_matching.fixed_sigmas(count, flow_settings(config))

    def timestep_tensor(self, values: Sequence[float], device: torch.device) -> torch.Tensor:
        """Noise levels σ, as :meth:`draw` takes them."""
        return torch.tensor([float(v) for v in values], dtype=torch.float32, device=device)

    # ------------------------------------------------------------------ network
    def denoiser_targets(self, network: NetworkConfig) -> tuple[str, ...]:
        return lora_targets.denoiser_targets(str(network.target_modules))

    def text_encoder_targets(self, model: LoadedModel, index: int, network: NetworkConfig) -> tuple[str, ...]:
        return ()  # T5-XXL stays frozen

    def kohya_state_dict(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> dict[str, torch.Tensor]:
        return export.kohya_state_dict(denoiser, alpha)

    def load_kohya_lora(
        self, sd: Mapping[str, torch.Tensor], denoiser: nn.Module, text_encoders: Sequence[nn.Module] = (),
        *, strict: bool = True, skipped: list[str] | None = None,
    ) -> int:
        """A kohya Chroma state dict into the injected split LoRA (:func:`.export.load_kohya_lora`)."""
        return export.load_kohya_lora(sd, denoiser, strict=strict, skipped=skipped)

    def load_lora_file(
        self, path: Path, network: NetworkConfig, denoiser: nn.Module, text_encoders: Sequence[nn.Module],
        skipped: list[str],
    ) -> int:
        return export.load_lora_file(path, network, denoiser, skipped)

    def metadata(self, config: TrainingConfig, model: LoadedModel | None) -> dict[str, str]:
        return export.metadata(config, flow_settings(config), apply_t5_attn_mask=text_encoding.APPLY_T5_ATTN_MASK)

    # ------------------------------------------------------------------ sampling
    def pipeline(self, model: LoadedModel, scheduler: str = "default", device: Any = None, dtype: torch.dtype | None = None) -> Any:
        """ChromaPipeline over ``model`` (one sampler: every ``scheduler`` name gets its flow-matching Euler)."""
        return sampling.build_pipeline(model, device=device, dtype=dtype)

    def size_multiple(self, model: LoadedModel) -> int:
        return sampling.size_multiple(model)

    def sample(self, pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
        return sampling.sample(pipe, model, prompt, width, height, generator)
