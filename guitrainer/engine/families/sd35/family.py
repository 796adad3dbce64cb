"""SD 3.5 on the family seam: :class:`SD35` answers every :class:`~guitrainer.engine.families.base.Family`
question by delegating to this package's modules, one concern each."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.core.families.sd35 import FACTS
from guitrainer.engine.families.base import Draw, Family, ModelParts, TextConditioning
from guitrainer.engine.families.sd35 import client_keys, export, loading, metadata, objective, sampling
from guitrainer.engine.families.sd35 import network as targets
from guitrainer.engine.families.sd35 import text as prompts
from guitrainer.engine.models.types import LoadedModel

_BLOCK = re.compile(r"(?:^|\.)transformer_blocks\.(\d+)\.")


class SD35(Family):
    """Stable Diffusion 3.5 Large and Medium (and SD 3 Medium, the same code): MMDiT, three text encoders,
    flow matching."""

    facts = FACTS
    #: frozen Linear / Conv layers that keep the compute dtype when the blocks' weights are stored in fp8 / int8 /
    #: nf4 (regexes on the module path): the embedders and the final layer, as the peers' consensus does
    #: (research note fit.md §2). The norms are no Linears and never cast; the blocks' adaLN Linears
    #: (``norm1.linear``) are a third of the weights and are stored like the rest, so no bare "norm" here.
    #: The same list applies to the text encoders: T5's feed-forward output ``wo`` stays too, because
    #: ``T5DenseGatedActDense.forward`` casts its input to ``wo.weight.dtype`` before the layer's own cast-up
    #: runs (fp8 input, compute-dtype weight: a dtype error) — sd-scripts patches that forward for ``--fp8_base``;
    #: transformers keeps ``wo`` in fp32 for fp16 (``_keep_in_fp32_modules``) for its overflow.
    storage_skip_patterns: tuple[str, ...] = targets.STORAGE_SKIP_PATTERNS
    #: the MMDiT's names, fused qkv: ComfyUI's mmdit_to_diffusers table (:mod:`.client_keys`)
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
        return loading.load_single_file(Path(path), state, config_dir=Path(config_dir), dtype=dtype, vae_dtype=vae_dtype)

    def load_parts(
        self, parts: ModelParts, *, config_dir: Path, dtype: torch.dtype = torch.float32, vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        return loading.load_parts(parts, config_dir=Path(config_dir), dtype=dtype, vae_dtype=vae_dtype)

    def meta_model(self, config: TrainingConfig, blocks: Sequence[int] | None = None) -> LoadedModel:
        """SD 3.5 Large or Medium (the size the base model's files name; Large where they do not say) on ``meta``,
        from the shipped configs (:mod:`.spec`); ``blocks`` = (joint blocks,) if given."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from guitrainer.core.families.sd35 import VARIANTS, version_of_base
        from guitrainer.engine.families.sd35.spec import build_on_meta, transformer_on_meta

        variant = VARIANTS.get(version_of_base(str(config.model.base)) or "5-large", VARIANTS["5-large"])
        transformer = transformer_on_meta(variant.config or VARIANTS["5-large"].config, None if blocks is None else int(blocks[0]))
        vae = build_on_meta("vae")
        encoders = [build_on_meta(p) for p in ("text_encoder", "text_encoder_2", "text_encoder_3")]
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(self.default_config_dir(), subfolder="scheduler")
        return LoadedModel(transformer, vae, encoders, [], scheduler, family=self.name, source="meta")

    # ------------------------------------------------------------------ text
    def encode_text(
        self, model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
    ) -> TextConditioning:
        return prompts.encode(model, text_encoders, captions, device)

    def trainable_text_encoders(self, model: LoadedModel) -> list[int]:
        return [i for i in targets.TRAINABLE_TEXT_ENCODERS if i < len(model.text_encoders)]

    # ------------------------------------------------------------------ objective
    def draw(self, config: TrainingConfig, model: LoadedModel, latents: torch.Tensor, timesteps: torch.Tensor | None) -> Draw:
        return objective.draw(config, latents, timesteps)

    def predict(
        self, config: TrainingConfig, denoiser: nn.Module, model: LoadedModel, draw: Draw, text: TextConditioning,
        batch: Mapping[str, Any],
    ) -> torch.Tensor:
        return objective.predict(denoiser, draw, text, batch)

    def loss(self, config: TrainingConfig, model: LoadedModel, prediction: torch.Tensor, draw: Draw, latents: torch.Tensor) -> torch.Tensor:
        return objective.loss(config, prediction, draw, latents)

    def validation_timesteps(self, config: TrainingConfig, model: LoadedModel, count: int) -> list[float]:
        return objective.validation_timesteps(config, count)

    def timestep_tensor(self, values: Sequence[float], device: torch.device) -> torch.Tensor:
        """Noise levels σ, as :meth:`draw` takes them."""
        return torch.tensor(list(values), dtype=torch.float32, device=device)

    # ------------------------------------------------------------------ network
    def denoiser_targets(self, network: NetworkConfig) -> tuple[str, ...]:
        return targets.denoiser_targets(network)

    def text_encoder_targets(self, model: LoadedModel, index: int, network: NetworkConfig) -> tuple[str, ...]:
        return targets.text_encoder_targets(index, network)

    def kohya_state_dict(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> dict[str, torch.Tensor]:
        return export.kohya_state_dict(denoiser, text_encoders, alpha)

    def diffusers_lora(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """:meth:`diffusers_state_dict` (α/r baked in, no alpha keys: diffusers' SD 3 loader reads it at scale 1)."""
        return export.diffusers_state_dict(denoiser, text_encoders, alpha), {"format": "pt"}

    def load_lora_file(
        self, path: Path, network: NetworkConfig, denoiser: nn.Module, text_encoders: Sequence[nn.Module],
        skipped: list[str],
    ) -> int:
        """Continue from a kohya- or diffusers-layout SD 3.5 LoRA (ours, kohya's own fused files, diffusers')."""
        return export.load_file(path, network, denoiser, text_encoders, skipped)

    def metadata(self, config: TrainingConfig, model: LoadedModel | None) -> dict[str, str]:
        return metadata.metadata(config, model)

    # ------------------------------------------------------------------ beyond the seam (see the package docstring)
    def diffusers_state_dict(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> dict[str, torch.Tensor]:
        """The LoRA in diffusers' PEFT layout (what ``StableDiffusion3Pipeline.load_lora_weights`` reads)."""
        return export.diffusers_state_dict(denoiser, text_encoders, alpha)

    # ------------------------------------------------------------------ sampling
    def pipeline(self, model: LoadedModel, scheduler: str = "default", device: Any = None, dtype: torch.dtype | None = None) -> Any:
        return sampling.pipeline(model, scheduler, device, dtype)

    def size_multiple(self, model: LoadedModel) -> int:
        return sampling.size_multiple(model)

    def sample(self, pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
        return sampling.sample(pipe, model, prompt, width, height, generator)

    # ------------------------------------------------------------------ numerics
    def block_of(self, module_name: str) -> str | None:
        """"joint N" for the modules of joint block N; None for the embedders and the final layer."""
        found = _BLOCK.search(module_name)
        return f"joint {found.group(1)}" if found else None
