"""Chroma on the family seam: a :class:`~guitrainer.engine.families.flow_family.FlowFamily` (Flux's flow matching on
2x2-packed latents, the packing :mod:`guitrainer.engine.families.flux1.latents`'s) whose transformer takes no
guidance input and no pooled text vector, and attends with Chroma's text mask."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.core.families.chroma import FACTS
from guitrainer.engine.families.base import Draw, TextConditioning
from guitrainer.engine.families.chroma import client_keys, export, loading, sampling
from guitrainer.engine.families.chroma import network as lora_targets
from guitrainer.engine.families.chroma import text as text_encoding
from guitrainer.engine.families.flow_family import FlowFamily
from guitrainer.engine.families.flux1 import latents as packing
from guitrainer.engine.models.types import LoadedModel


class Chroma(FlowFamily):
    """Chroma1-HD and Chroma1-Base (one architecture; HD is Base fine-tuned at 1024 px)."""

    facts = FACTS
    loading = loading
    sampling = sampling
    pipeline_class = "ChromaPipeline"
    storage_skip_patterns: tuple[str, ...] = lora_targets.STORAGE_SKIP_PATTERNS
    #: BFL's names, fused qkv and linear1: ComfyUI reads Chroma as a Flux (:mod:`.client_keys`)
    client_layout = client_keys.LAYOUT

    def meta_model(self, config: TrainingConfig, blocks: Sequence[int] | None = None) -> LoadedModel:
        """Full-size Chroma1-HD on ``meta`` (:func:`.spec.on_meta`), ``blocks`` = (double, single) if given."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from guitrainer.engine.families.chroma.spec import on_meta

        transformer, vae, t5 = on_meta(None if blocks is None else (int(blocks[0]), int(blocks[1])))
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(self.default_config_dir(), subfolder="scheduler")
        return LoadedModel(transformer, vae, [t5], [], scheduler, family=self.name, source="meta")

    def encode_text(
        self, model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
    ) -> TextConditioning:
        return text_encoding.encode(model.tokenizers, text_encoders, captions, device)

    def predict(
        self, config: TrainingConfig, denoiser: nn.Module, model: LoadedModel, draw: Draw, text: TextConditioning,
        batch: Mapping[str, Any],
    ) -> torch.Tensor:
        """The velocity the transformer predicts, as latents: packed 2x2 tokens in, 2-D position ids, σ itself as the
        timestep (the transformer multiplies by 1000, as ChromaPipeline passes ``t / 1000``), each caption cut to the
        tokens it attends to (:func:`.text.lengths`; captions of different lengths go through in groups of equal
        length); unpacked out."""
        noisy = draw.noisy
        _b, _, h, w = noisy.shape
        tokens = packing.pack(noisy)
        t5 = text["t5"]
        timestep = draw.timesteps.to(device=noisy.device, dtype=noisy.dtype)
        img_ids = packing.image_ids(h, w, noisy.device, noisy.dtype)
        counts = text_encoding.lengths(text["mask"])
        out = torch.empty_like(tokens) if len(set(counts)) > 1 else None
        for length in sorted(set(counts)):
            rows = [i for i, n in enumerate(counts) if n == length]
            pick = slice(None) if out is None else torch.tensor(rows, device=noisy.device)
            part = denoiser(
                hidden_states=tokens[pick],
                encoder_hidden_states=t5[pick, :length],
                timestep=timestep[pick],
                img_ids=img_ids,
                txt_ids=packing.text_ids(length, noisy.device, noisy.dtype),
                return_dict=False,
            )[0]
            if out is None:
                return packing.unpack(part, h, w)
            out[pick] = part
        assert out is not None
        return packing.unpack(out, h, w)

    # ------------------------------------------------------------------ network
    def denoiser_targets(self, network: NetworkConfig) -> tuple[str, ...]:
        return lora_targets.denoiser_targets(str(network.target_modules))

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
        return export.metadata(config, self.flow_settings(config), apply_t5_attn_mask=text_encoding.APPLY_T5_ATTN_MASK)
