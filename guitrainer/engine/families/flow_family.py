"""What the flow-matching transformer families share on the seam, written once: loading through the family's
``loading`` module, the flow-matching draw on latents packed in 2x2 patches, the loss and validation's fixed σ, and
sampling through the family's ``sampling`` module. A family (Chroma, Z-Image) subclasses :class:`FlowFamily`, names
its two modules, and writes what is its own: the text conditioning, the transformer call, the LoRA's layers and
files."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from guitrainer.config import TrainingConfig
from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine import flow_matching
from guitrainer.engine.families.base import Draw, Family, ModelParts
from guitrainer.engine.models import split_install
from guitrainer.engine.models.types import LoadedModel


class FlowFamily(Family):
    """A flow-matching transformer family; subclasses set :attr:`loading` and :attr:`sampling` (modules with the
    functions :class:`~guitrainer.engine.families.base.Family` delegates to) besides ``facts``."""

    #: ``load_folder(path, *, local_files_only, dtype, vae_dtype)``; ``part_state(part, tensors, prefix)`` (one part's
    #: tensors from the file the family's split check names) and ``build_all(states, near, *, config_dir, dtype,
    #: vae_dtype, path, identity, source)`` (the LoadedModel from them), which one file and split files go through
    loading: ModuleType
    #: ``sample(pipe, model, prompt, width, height, generator)``: one PIL image from :meth:`pipeline`'s pipeline
    sampling: ModuleType
    #: the diffusers pipeline class samples are made with; it takes (scheduler, vae, text_encoder, tokenizer,
    #: transformer), as ChromaPipeline and ZImagePipeline do
    pipeline_class: str

    def flow_settings(self, config: TrainingConfig) -> flow_matching.FlowSettings:
        """The run's flow-matching settings, "auto" resolved to the family's defaults (``facts.flow_defaults``)."""
        return flow_matching.settings_for(config, self.facts.flow_defaults)

    # ------------------------------------------------------------------ files
    def load_folder(
        self, path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        return self.loading.load_folder(path, local_files_only=local_files_only, dtype=dtype, vae_dtype=vae_dtype)

    def load_single_file(
        self, path: Path, state: dict[str, torch.Tensor], *, config_dir: Path, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        """One file holding the whole model (ComfyUI's checkpoint layout); a transformer-only file (the usual
        release) is refused with the files to choose with it."""
        facts = self.facts
        assert facts.detect_file is not None and facts.check_parts is not None
        check_parts = facts.check_parts
        return split_install.load_checkpoint(
            path, state, facts.label, facts.detect_file, lambda denoiser: check_parts(denoiser, (), None),
            self.loading.part_state,
            functools.partial(self.loading.build_all, config_dir=config_dir, dtype=dtype, vae_dtype=vae_dtype),
        )

    def load_parts(
        self, parts: ModelParts, *, config_dir: Path, dtype: torch.dtype = torch.float32, vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        """A split install, checked by the family's rules (:attr:`FamilyFacts.check_parts`): ModelLoadError naming each
        part that is missing, chosen twice or of the wrong kind."""
        check_parts = self.facts.check_parts
        assert check_parts is not None
        files = [Path(parts.denoiser), *map(Path, parts.text_encoders), *([Path(parts.vae)] if parts.vae else [])]
        return split_install.load_split(
            files, self.facts.label, lambda denoiser, others: check_parts(denoiser, others, None),
            self.loading.part_state,
            functools.partial(self.loading.build_all, config_dir=config_dir, dtype=dtype, vae_dtype=vae_dtype),
        )

    def trainable_text_encoders(self, model: LoadedModel) -> list[int]:
        return list(self.facts.trainable_text_encoders)

    def text_encoder_targets(self, model: LoadedModel, index: int, network: Any) -> tuple[str, ...]:
        """No text-encoder LoRA unless the family says otherwise (its facts' ``trainable_text_encoders``)."""
        return ()

    # ------------------------------------------------------------------ objective
    def draw(self, config: TrainingConfig, model: LoadedModel, latents: torch.Tensor, timesteps: torch.Tensor | None) -> Draw:
        """Noise, σ (sampled as ``[flow]`` says — with the image's 2x2-patch token count for the resolution-dependent
        shifts — unless given) and the noisy latents ``(1 − σ)·x0 + σ·ε``; the target is the velocity ``ε − x0``
        (``raw``) or ``x0``."""
        settings = self.flow_settings(config)
        noise = torch.randn_like(latents)
        if timesteps is None:
            tokens = (latents.shape[-2] // 2) * (latents.shape[-1] // 2)
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

    def loss(self, config: TrainingConfig, model: LoadedModel, prediction: torch.Tensor, draw: Draw, latents: torch.Tensor) -> torch.Tensor:
        return flow_matching.flow_loss(self.flow_settings(config), prediction, draw.noisy, latents, draw.noise, draw.timesteps)

    def validation_timesteps(self, config: TrainingConfig, model: LoadedModel, count: int) -> list[float]:
        return flow_matching.fixed_sigmas(count, self.flow_settings(config))

    def timestep_tensor(self, values: Sequence[float], device: torch.device) -> torch.Tensor:
        """Noise levels σ, as :meth:`draw` takes them."""
        return torch.tensor([float(v) for v in values], dtype=torch.float32, device=device)

    # ------------------------------------------------------------------ sampling
    def pipeline(self, model: LoadedModel, scheduler: str = "default", device: Any = None, dtype: torch.dtype | None = None) -> Any:
        """:attr:`pipeline_class` sharing ``model``'s modules (nothing copied) with a scheduler of its own made from the
        model's config, so sampling never touches the training scheduler's state; one sampler: every ``scheduler``
        name gets its flow-matching Euler. Moved to ``device`` / cast to ``dtype`` when given."""
        import diffusers
        from diffusers import FlowMatchEulerDiscreteScheduler

        pipe = getattr(diffusers, self.pipeline_class)(
            scheduler=FlowMatchEulerDiscreteScheduler.from_config(model.noise_scheduler.config),
            vae=model.vae, text_encoder=model.text_encoders[0], tokenizer=model.tokenizers[0],
            transformer=model.denoiser,
        )
        if device is not None or dtype is not None:
            pipe.to(*(x for x in (device, dtype) if x is not None))
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def size_multiple(self, model: LoadedModel) -> int:
        """Sample sides are multiples of the VAE's downscaling times the 2x2 patches (16 for Flux's VAE)."""
        return 2 ** (len(model.vae.config.block_out_channels) - 1) * 2

    def sample(self, pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
        return self.sampling.sample(pipe, model, prompt, width, height, generator)


def unwrapped(module: nn.Module) -> nn.Module:
    """The model inside a DistributedDataParallel wrapper (its config and module names are the model's)."""
    return module.module if isinstance(module, nn.parallel.DistributedDataParallel) else module
