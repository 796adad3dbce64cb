"""The VRAM estimator's numbers for full-size FLUX.1 dev, computed from the architecture on ``meta`` (no memory):
parameter counts per part, and the layers each LoRA target set trains with the tokens each one sees.

A layer's activations grow with the tokens it sees, and Flux's layers see three kinds: the image stream (the
double blocks' ``to_q`` … ``ff``: one token per 2x2 latent pixels, 0.25 per latent pixel), the text stream (the
double blocks' ``add_*_proj`` … ``ff_context``: the T5 tokens, 512 for dev), both at once (every single-block
layer: image and text tokens concatenated), or one vector per image (the modulation Linears, fed the
timestep/guidance/pooled embedding). So each row is ``(in, out, count, image tokens per latent pixel, text)``
with ``text`` 1 when the layer also sees every text token; ``(…, 0.0, 0)`` is one vector per image. (The UNet
tables of :class:`~guitrainer.core.memory.specs.ModelSpec` have 4 entries, their "0 = text tokens" being
``(…, 0.0, 1)`` here.) The LoRA is counted as trained — split, one LoRA per diffusers module (q, k and v each
their own) — not as the fused file stores it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from guitrainer.base.paths import resources_dir
from guitrainer.core.families.facts import LoraTable, ModelSpec, QuantisableLinears
from guitrainer.engine.families.base import Family
from guitrainer.engine.families.flux1 import network
from guitrainer.engine.offload import block_table, named_block_lists

#: ``(in, out, count, image tokens per latent pixel, sees the text tokens: 0 / 1)``
FluxLoraRow = tuple[int, int, int, float, int]
#: latent side of the meta forward that measures the tokens (64 x 64 latents = 1024 image tokens)
_SIDE = 64
_TEXT = 7  # a text length no image-token count equals


@dataclass(frozen=True)
class FluxSpec:
    """Full-size FLUX.1 dev on paper (see the module docstring for the row format)."""

    transformer: int
    text_encoders: tuple[int, int]  # CLIP-L, T5-XXL encoder
    vae_encoder: int
    vae_decoder: int
    vae_channels: int  # the VAE's first (full-resolution) block
    text_encoder_shapes: tuple[tuple[int, int, int], tuple[int, int, int]]  # (hidden, intermediate, layers)
    joint_attention_dim: int  # T5's width, the transformer's text input
    blocks: tuple[int, int]  # double, single
    outside_blocks: int  # parameters outside the blocks (embedders, final layer): kept in the compute dtype under fp8
    largest_blocks: tuple[int, int] = (0, 0)  # parameters of one double block, of one single block
    modulation: tuple[int, int] = (0, 0)  # of which the adaLN modulation Linears (one vector per image)
    fp8_stored: tuple[int, int, int] = (0, 0, 0)  # transformer, CLIP-L, T5: parameters fp8 storage keeps in fp8
    lora: dict[str, tuple[FluxLoraRow, ...]] = field(default_factory=dict)
    text_encoder_lora: dict[str, tuple[tuple[FluxLoraRow, ...], tuple[FluxLoraRow, ...]]] = field(default_factory=dict)
    #: the blocks ``precision.offload_blocks`` may keep in RAM: each double block's, then each single block's
    #: parameter count (:func:`~guitrainer.engine.offload.block_table` of the family's ``offload_blocks``)
    offload_blocks: tuple[tuple[int, ...], ...] = ()
    quantisable: QuantisableLinears | None = None  # the Linears int8 / nf4 stores (the family's skip list left out)

    def lora_params_per_rank(self, target: str, text_encoder: bool = False) -> int:
        """Trainable LoRA parameters per unit of rank: Σ count · (in + out) over the trained layers."""
        n = sum(c * (i + o) for i, o, c, _, _ in self.lora[target])
        if text_encoder:
            n += sum(c * (i + o) for table in self.text_encoder_lora[target] for i, o, c, _, _ in table)
        return n


def _config(part: str) -> dict[str, Any]:
    return json.loads((resources_dir() / "models" / "flux1" / part / "config.json").read_text(encoding="utf-8"))


def on_meta(blocks: tuple[int, int] | None = None) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """(transformer, VAE, CLIP-L, T5-XXL encoder) of full-size FLUX.1 dev, built on ``meta`` from the shipped
    configs; ``blocks`` (double, single) keeps fewer blocks at full width (the memory measurement at reduced
    depth)."""
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    def clean(cfg: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in cfg.items() if not k.startswith("_")}

    with torch.device("meta"):
        cfg = _config("transformer")
        if blocks is not None:
            cfg.update(num_layers=int(blocks[0]), num_single_layers=int(blocks[1]))
        transformer = FluxTransformer2DModel.from_config(cfg)
        vae = AutoencoderKL.from_config(_config("vae"))
        clip = CLIPTextModel(CLIPTextConfig(**clean(_config("text_encoder"))))
        t5 = T5EncoderModel(T5Config(**clean(_config("text_encoder_2"))))
    for m in (transformer, vae, clip, t5):
        m.requires_grad_(False)
    return transformer, vae, clip, t5


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _tokens_seen(transformer: nn.Module) -> dict[str, tuple[float, int]]:
    """Every Linear's (image tokens per latent pixel, sees text) from one forward on ``meta``."""
    seen: dict[str, tuple[float, int]] = {}
    image = (_SIDE // 2) ** 2
    hooks = []
    for name, m in transformer.named_modules():
        if not isinstance(m, nn.Linear):
            continue

        def hook(_m: nn.Module, inputs: tuple[torch.Tensor, ...], _name: str = name) -> None:
            x = inputs[0]
            n = x.shape[1] if x.dim() == 3 else 0
            seen[_name] = ((image / _SIDE**2) if n in (image, image + _TEXT) else 0.0, int(n in (_TEXT, image + _TEXT)))

        hooks.append(m.register_forward_pre_hook(hook))
    cfg = transformer.config
    with torch.device("meta"), torch.no_grad():
        transformer(
            hidden_states=torch.zeros(1, image, cfg.in_channels),
            encoder_hidden_states=torch.zeros(1, _TEXT, cfg.joint_attention_dim),
            pooled_projections=torch.zeros(1, cfg.pooled_projection_dim),
            timestep=torch.zeros(1),
            img_ids=torch.zeros(image, 3),
            txt_ids=torch.zeros(_TEXT, 3),
            guidance=torch.zeros(1) if cfg.guidance_embeds else None,
            return_dict=False,
        )
    for h in hooks:
        h.remove()
    return seen


def _table(model: nn.Module, targets: tuple[str, ...], seen: dict[str, tuple[float, int]] | None) -> tuple[FluxLoraRow, ...]:
    groups: dict[tuple[int, int, float, int], int] = {}
    modules = dict(model.named_modules())
    for name in network.targets_in(model, targets):
        m = modules[name]
        per_pixel, text = seen[name] if seen is not None else (0.0, 1)
        key = (m.in_features, m.out_features, per_pixel, text)
        groups[key] = groups.get(key, 0) + 1
    return tuple(sorted((i, o, c, f, t) for (i, o, f, t), c in groups.items()))


#: the blocks' adaLN modulation Linears (fed the timestep / guidance / pooled-text vector)
_MODULATION = ("norm1.linear", "norm1_context.linear", "norm.linear")


def _modulation(block: nn.Module) -> int:
    return sum(_count(m) for n, m in block.named_modules() if isinstance(m, nn.Linear) and n in _MODULATION)


def _fp8_stored(*parts: nn.Module) -> tuple[int, int, int]:
    """Per part, the parameters the trainer's fp8 storage keeps in fp8 (the family's skip list, the LoRA aside)."""
    from guitrainer.engine.network.layer_casting import stored_parameters

    a, b, c = (stored_parameters(p, network.STORAGE_SKIP_PATTERNS) for p in parts)
    return a, b, c


@functools.cache
def flux_spec(blocks: tuple[int, int] | None = None) -> FluxSpec:
    """The :class:`FluxSpec` of full-size FLUX.1 dev (a few seconds on ``meta``; cached); ``blocks`` (double,
    single) for the same width at reduced depth (the memory measurement's smaller points)."""
    from guitrainer.engine.network.quantised_storage import count_quantisable

    transformer, vae, clip, t5 = on_meta(blocks)
    seen = _tokens_seen(transformer)
    in_blocks = sum(_count(b) for b in (*transformer.transformer_blocks, *transformer.single_transformer_blocks))
    lists = (transformer.transformer_blocks, transformer.single_transformer_blocks)
    largest = tuple(max((_count(b) for b in lst), default=0) for lst in lists)
    modulation = tuple(max((_modulation(b) for b in lst), default=0) for lst in lists)
    return FluxSpec(
        transformer=_count(transformer),
        text_encoders=(_count(clip), _count(t5)),
        vae_encoder=_count(vae.encoder),
        vae_decoder=_count(vae) - _count(vae.encoder),
        vae_channels=int(vae.config.block_out_channels[0]),
        text_encoder_shapes=(
            (clip.config.hidden_size, clip.config.intermediate_size, clip.config.num_hidden_layers),
            (t5.config.d_model, t5.config.d_ff, t5.config.num_layers),
        ),
        joint_attention_dim=int(transformer.config.joint_attention_dim),
        blocks=(len(transformer.transformer_blocks), len(transformer.single_transformer_blocks)),
        largest_blocks=(largest[0], largest[1]),
        modulation=(modulation[0], modulation[1]),
        fp8_stored=_fp8_stored(transformer, clip, t5),
        outside_blocks=_count(transformer) - in_blocks,
        lora={t: _table(transformer, s, seen) for t, s in network.TARGETS.items()},
        text_encoder_lora={t: (_table(clip, network.CLIP_TARGETS, None), ()) for t in network.TARGETS},
        offload_blocks=block_table(named_block_lists(transformer, Family.block_lists)),
        quantisable=count_quantisable(transformer, network.STORAGE_SKIP_PATTERNS),
    )


def _four(rows: tuple[FluxLoraRow, ...]) -> LoraTable:
    """Rows in the UNet tables' 4-entry form: the image tokens kept, the text dropped (text-only rows and the
    per-image modulation rows become "0 = text tokens")."""
    groups: dict[tuple[int, int, float], int] = {}
    for i, o, c, per_pixel, _text in rows:
        groups[(i, o, per_pixel)] = groups.get((i, o, per_pixel), 0) + c
    return tuple(sorted((i, o, c, f) for (i, o, f), c in groups.items()))


def as_model_spec(spec: FluxSpec) -> ModelSpec:
    """The estimator's :class:`~guitrainer.core.families.facts.ModelSpec` of ``spec``, as
    ``core/families/flux1.py`` ships it (``FACTS.spec``).

    The 4-entry rows lose what the estimator's UNet formulas cannot use yet: the single blocks' text tokens (512
    beside 4096 image tokens at 1024 px) and that the text stream sees T5's 512 tokens, not CLIP's 77. The
    parameter counts, which dominate Flux's memory, are exact.
    """
    return ModelSpec(
        family="flux1",
        denoiser=spec.transformer,
        text_encoders=spec.text_encoders,
        vae_encoder=spec.vae_encoder,
        vae_decoder=spec.vae_decoder,
        vae_channels=spec.vae_channels,
        text_encoder_shapes=spec.text_encoder_shapes,
        cross_attention_dim=spec.joint_attention_dim,
        denoiser_lora={t: _four(rows) for t, rows in spec.lora.items()},
        text_encoder_lora={t: tuple(_four(rows) for rows in tables) for t, tables in spec.text_encoder_lora.items()},
        offload_blocks=spec.offload_blocks,
        quantisable=spec.quantisable,
        blocks=tuple((n, p, m) for n, p, m in zip(spec.blocks, spec.largest_blocks, spec.modulation) if n),
        fp8_stored=spec.fp8_stored,
    )
