"""The model-family seam (DESIGN.md §2): everything the engine asks of a model family, in one class.

The trainer, the caches, sampling, validation, export, Verify, the numerics monitor and the memory
measurement call a :class:`Family`; none of them names a family. A family package
(``engine/families/<name>/``) subclasses it, and its torch-free facts (what its files look like, its
parameter table for the estimator, its precision facts) are :class:`~guitrainer.core.families.facts.FamilyFacts` in
``core/families/<name>.py`` — core must answer before torch loads (the window, the estimate, ``--check``).

What flows through the seam:

* a :class:`~guitrainer.engine.models.types.LoadedModel`: the denoiser (a UNet or a transformer), the VAE, the
  text encoders and tokenizers, the noise scheduler;
* text conditioning: a dict of tensors per batch of captions (``{"hidden": …, "pooled": …}`` for SDXL,
  ``{"t5": …, "pooled": …}`` for Flux), batch first, so the text cache keeps one entry per caption;
* a :class:`Draw`: one micro-batch's noise, timesteps and noisy latents, drawn by the family's objective.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.core.families.facts import FamilyFacts
from guitrainer.engine.models.types import LoadedModel, ModelLoadError
from guitrainer.engine.network.client_layout import ClientLayout

#: a batch of captions as the denoiser takes it: name -> tensor, batch first
TextConditioning = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Draw:
    """One micro-batch's random part: the noise, the timesteps and the noisy latents the denoiser sees.

    ``timesteps`` are the family's own: integer steps of a DDPM schedule (0–999) for the UNet families, noise
    levels σ in [0, 1] for the flow-matching ones. ``target`` is what the loss compares the prediction with
    (the noise, v, or ε − x0); ``weights`` a per-sample loss weight, or None for 1.
    """

    noise: torch.Tensor
    timesteps: torch.Tensor
    noisy: torch.Tensor
    target: torch.Tensor
    weights: torch.Tensor | None = None


@dataclass(frozen=True)
class ModelParts:
    """The files of a split install, as ComfyUI users keep them: the denoiser's file, its text encoders' files
    (in any order: each is recognised from its tensors) and the VAE's (empty: none given)."""

    denoiser: Path
    text_encoders: tuple[Path, ...] = ()
    vae: Path | None = None


class Family(ABC):
    """One model family. Subclasses set :attr:`facts` and implement the abstract methods."""

    facts: FamilyFacts

    @property
    def name(self) -> str:
        return self.facts.name

    # ------------------------------------------------------------------ files
    # Every loader builds each part in the dtype it is given (its floating-point weights cast as they are read, never
    # all in fp32 first): ``dtype`` the denoiser and the text encoders, ``vae_dtype`` the VAE (None: ``dtype``). The
    # run passes the dtypes it will place the parts in (:func:`~guitrainer.engine.models.loading.load_dtypes`); fp32
    # is the default. A library may keep a few modules wider than asked (transformers' T5 keeps ``wo`` in fp32 under
    # fp16): the run's cast afterwards settles them, as before.

    @abstractmethod
    def load_folder(
        self, path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        """A diffusers folder (or a hub id already in the cache), frozen, on the CPU, in ``dtype`` / ``vae_dtype``."""

    @abstractmethod
    def load_single_file(
        self, path: Path, state: dict[str, torch.Tensor], *, config_dir: Path, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        """One file in the original layout (``state`` its tensors), the missing parts' configs from ``config_dir``;
        frozen, on the CPU, in ``dtype`` / ``vae_dtype``."""

    def use_prediction_type(self, model: LoadedModel, prediction_type: str) -> None:
        """A single file marked with another prediction type than its configs (SD's ``v_pred`` key): follow the file.
        Families with one prediction type ignore it."""
        return None

    def load_parts(
        self, parts: ModelParts, *, config_dir: Path, dtype: torch.dtype = torch.float32, vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        """A split install (denoiser, text-encoder and VAE files), in ``dtype`` / ``vae_dtype``. Families whose users
        keep one file refuse."""
        raise ModelLoadError(
            f"{self.facts.label} models are loaded from a diffusers folder or one checkpoint file; "
            "choose the checkpoint instead of separate files"
        )

    def default_config_dir(self) -> Path:
        """``resources/models/<family>``: the shipped configs and tokenizers (no weights) for single files."""
        from guitrainer.base.paths import resources_dir

        return resources_dir() / "models" / self.name

    # ------------------------------------------------------------------ text
    @abstractmethod
    def encode_text(
        self, model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
    ) -> TextConditioning:
        """The denoiser's conditioning for ``captions``; ``text_encoders`` are the (maybe DDP-wrapped) encoders."""

    def trainable_text_encoders(self, model: LoadedModel) -> list[int]:
        """Which text encoders a LoRA may train (``network.train_text_encoder``): all by default."""
        return list(range(len(model.text_encoders)))

    # ------------------------------------------------------------------ latents
    def latent_distribution(self, vae: nn.Module, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The VAE's (mean, std) for ``pixels`` in [-1, 1] (batch, 3, H, W), in the VAE's dtype."""
        dist = vae.encode(pixels).latent_dist
        return dist.mean, dist.std

    def to_model_latents(self, vae: nn.Module, sample: torch.Tensor) -> torch.Tensor:
        """A VAE sample as the denoiser sees it: ``(z − shift) · scale`` from the VAE's config."""
        cfg = vae.config
        shift = getattr(cfg, "shift_factor", None) or 0.0
        return (sample - shift) * cfg.scaling_factor

    # ------------------------------------------------------------------ objective
    def prepare(self, config: TrainingConfig, model: LoadedModel, warn: Callable[[str], None]) -> None:
        """Once before training: anything the objective changes in the loaded model (SD's zero terminal SNR)."""
        return None

    @abstractmethod
    def draw(self, config: TrainingConfig, model: LoadedModel, latents: torch.Tensor, timesteps: torch.Tensor | None) -> Draw:
        """Noise, timesteps (drawn from torch's RNG unless given) and noisy latents of one micro-batch."""

    @abstractmethod
    def predict(
        self, config: TrainingConfig, denoiser: nn.Module, model: LoadedModel, draw: Draw, text: TextConditioning,
        batch: Mapping[str, Any],
    ) -> torch.Tensor:
        """The denoiser's prediction for ``draw`` (shaped like the latents); runs under the caller's autocast."""

    @abstractmethod
    def loss(self, config: TrainingConfig, model: LoadedModel, prediction: torch.Tensor, draw: Draw, latents: torch.Tensor) -> torch.Tensor:
        """The micro-batch's loss (fp32 scalar) from the prediction and the draw."""

    @abstractmethod
    def validation_timesteps(self, config: TrainingConfig, model: LoadedModel, count: int) -> list[float]:
        """``count`` fixed timesteps (the family's own units) a validation loss is scored at."""

    @abstractmethod
    def timestep_tensor(self, values: Sequence[float], device: torch.device) -> torch.Tensor:
        """Timesteps as :meth:`draw` takes them (integer DDPM steps, or noise levels σ)."""

    # ------------------------------------------------------------------ network
    @abstractmethod
    def denoiser_targets(self, network: NetworkConfig) -> tuple[str, ...]:
        """The denoiser's module names (peft ``target_modules`` suffixes) a LoRA of ``network`` trains."""

    @abstractmethod
    def text_encoder_targets(self, model: LoadedModel, index: int, network: NetworkConfig) -> tuple[str, ...]:
        """The same for text encoder ``index``."""

    @abstractmethod
    def kohya_state_dict(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> dict[str, torch.Tensor]:
        """The trained LoRA in the layout the readers share (kohya's names, the original model's layers)."""

    def diffusers_lora(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """The trained LoRA in diffusers' layout — what the family's pipeline's ``load_lora_weights`` reads — and the
        metadata that goes with it; for families whose facts list "diffusers" in ``lora_formats``."""
        raise ValueError(f"{self.facts.label} LoRAs are not written in diffusers' layout (`output.format`)")

    @abstractmethod
    def load_lora_file(
        self, path: Path, network: NetworkConfig, denoiser: nn.Module, text_encoders: Sequence[nn.Module],
        skipped: list[str],
    ) -> int:
        """Continue from a LoRA file: copy it into the injected network (its modules matching none go to
        ``skipped``); returns the modules set. Raises :class:`~guitrainer.engine.network.lora.LoraFormatError`
        for a file of another type or rank, naming the setting to change."""

    @abstractmethod
    def metadata(self, config: TrainingConfig, model: LoadedModel | None) -> dict[str, str]:
        """The family's part of the file's metadata (``ss_base_model_version``, ``modelspec.architecture`` …)."""

    #: frozen layers that keep their dtype when the others are stored in fp8 / int8 / nf4
    storage_skip_patterns: tuple[str, ...] = ("norm", "emb", "proj_in", "proj_out", "conv_in", "conv_out")

    #: a transformer denoiser's top-level lists of repeated blocks, in the order its forward runs them (diffusers'
    #: names: Flux's double then single blocks, SD 3's joint blocks); each block one checkpointed unit
    block_lists: tuple[str, ...] = ("transformer_blocks", "single_transformer_blocks")

    def meta_model(self, config: TrainingConfig, blocks: Sequence[int] | None = None) -> LoadedModel:
        """The model ``config`` trains as an architecture on ``meta`` (no weights, no memory), built from the shipped
        configs: what the memory measurement (:mod:`guitrainer.engine.memory.family_step`) runs a step of.

        ``blocks`` gives how many blocks each list of :attr:`block_lists` keeps (None: the released model's), so a
        measurement can run at reduced depth and full width. ``tokenizers`` are left empty: the measurement feeds
        the text encoders token ids of the lengths :meth:`encode_text` asks for. Families measured by the UNet path
        (:mod:`guitrainer.engine.memory.measure`) do not implement it.
        """
        raise NotImplementedError(f"{self.facts.label}: no architecture on meta for the memory measurement")

    def offload_blocks(self, denoiser: nn.Module) -> list[list[nn.Module]]:
        """The denoiser's repeated blocks ``precision.offload_blocks`` may keep in system RAM: per list, in the order
        the forward runs them (each list gets its share, :func:`guitrainer.core.memory.offload.offloaded_indices`).

        Each block must be a unit gradient checkpointing recomputes whole: its weights are then needed only while it
        computes, and a block that is not checkpointed keeps its weights referenced by autograd (offloading it frees
        nothing). By default the lists named by :attr:`block_lists` that the denoiser has; [] where none.
        """
        from guitrainer.engine.offload import named_block_lists

        return named_block_lists(denoiser, self.block_lists)

    #: how the clients read this family's files, for a family whose files name the original model's layers
    #: (fused where diffusers splits): Verify merges a file by ComfyUI's rules with it
    #: (:mod:`guitrainer.engine.verify.client_rules`). None: diffusers' ``load_lora_weights`` reads the files as the
    #: clients do, and Verify goes through it (the UNet families).
    client_layout: ClientLayout | None = None

    # ------------------------------------------------------------------ sampling
    @abstractmethod
    def pipeline(self, model: LoadedModel, scheduler: str = "default", device: Any = None, dtype: torch.dtype | None = None) -> Any:
        """A diffusers pipeline sharing ``model``'s modules (nothing copied), its progress bar off. ``scheduler``:
        "default" (samples during training) or "dpm++" (class images), where the family has a choice."""

    @abstractmethod
    def size_multiple(self, model: LoadedModel) -> int:
        """Sample sides are rounded down to a multiple of this (the VAE's and the denoiser's downscaling)."""

    @abstractmethod
    def sample(self, pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
        """One PIL image for ``prompt`` at ``width`` × ``height`` from ``pipe`` (made by :meth:`pipeline`)."""
