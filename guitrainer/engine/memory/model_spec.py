"""Model architectures on ``meta`` (no memory) and the estimator's :class:`~guitrainer.core.memory.specs.ModelSpec` from them.

Components are built from the bundled configs (``resources/models/<family>``; the demo model from the app's own
builder). :func:`compute_model_spec` recomputes the tables ``core/memory/estimate.py`` ships (``tests/test_vram.py`` checks them).
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from guitrainer.core.memory import specs
from guitrainer.core.model.lora_format import TEXT_ENCODER_LORA_TARGETS, UNET_LORA_TARGETS
from guitrainer.engine.families import registry
from guitrainer.engine.network.quantised_storage import count_quantisable
from guitrainer.engine.offload import block_table

MODELS_DIR = Path(__file__).resolve().parents[3] / "resources" / "models"


@functools.cache
def _demo_configs() -> dict[str, dict[str, Any]]:
    """The demo model's configs, from the same builder the app uses (tiny; written to a temp folder)."""
    from guitrainer.engine.models.demo import build_demo_model

    with tempfile.TemporaryDirectory() as tmp:
        build_demo_model(Path(tmp))
        return {
            part: json.loads((Path(tmp) / part / "config.json").read_text(encoding="utf-8"))
            for part in ("unet", "vae", "text_encoder")
        }


def component_configs(family: str) -> dict[str, dict[str, Any]]:
    """``{"unet": ..., "vae": ..., "text_encoder": ..., ["text_encoder_2": ...]}`` config dicts of a family."""
    if family == "demo":
        return _demo_configs()
    folder = MODELS_DIR / family
    if not folder.is_dir():
        raise ValueError(f"no bundled configs for model family {family!r} (looked in {folder})")
    return {
        part: json.loads((folder / part / "config.json").read_text(encoding="utf-8"))
        for part in ("unet", "vae", "text_encoder", "text_encoder_2")
        if (folder / part / "config.json").is_file()
    }


def build_on_meta(family: str, part: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """One component (``unet``, ``vae``, ``text_encoder``, ``text_encoder_2``) built on ``meta``: no memory."""
    cfg = component_configs(family)[part]
    with torch.device("meta"):
        if part == "unet":
            from diffusers import UNet2DConditionModel

            model = UNet2DConditionModel.from_config(cfg)
        elif part == "vae":
            from diffusers import AutoencoderKL

            model = AutoencoderKL.from_config(cfg)
        else:
            from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

            te_cfg = CLIPTextConfig(**{k: v for k, v in cfg.items() if not k.startswith("_")})
            arch = (cfg.get("architectures") or ["CLIPTextModel"])[0]
            cls = CLIPTextModelWithProjection if arch == "CLIPTextModelWithProjection" else CLIPTextModel
            model = cls(te_cfg)
    model.requires_grad_(False)
    return torch.nn.Module.to(model, dtype)  # torch's: diffusers' override warns on every cast (as in the trainer)


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _targeted(module: torch.nn.Module, suffixes: tuple[str, ...]) -> Iterator[tuple[str, torch.nn.Module]]:
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.Linear | torch.nn.Conv2d) and any(
            name == s or name.endswith("." + s) for s in suffixes
        ):
            yield name, m


def _layer_dims(m: torch.nn.Module) -> tuple[int, int]:
    if isinstance(m, torch.nn.Conv2d):
        k = m.kernel_size[0] * m.kernel_size[1]
        return m.in_channels * k, m.out_channels
    return m.in_features, m.out_features


def compute_model_spec(family: str) -> specs.ModelSpec:
    """Recompute a :class:`~guitrainer.core.memory.specs.ModelSpec` from the configs (meta build, ~1 s for SDXL).

    The LoRA layer table groups identical targeted layers as ``(in, out, count, tokens_per_latent_px)``, where
    the last is how many tokens the layer sees per latent pixel (from a meta-device forward; 0 for layers that
    only see the 77 text tokens, i.e. cross-attention keys / values).
    """
    cfgs = component_configs(family)
    unet = build_on_meta(family, "unet")
    vae = build_on_meta(family, "vae")
    tes = [build_on_meta(family, p) for p in ("text_encoder", "text_encoder_2") if p in cfgs]

    side = 32 if family == "demo" else 64
    seen: dict[str, int] = {}
    all_suffixes = tuple(dict.fromkeys(s for v in UNET_LORA_TARGETS.values() for s in v))
    hooks = []
    for name, m in _targeted(unet, all_suffixes):
        def hook(_m: Any, inputs: Any, _name: str = name) -> None:
            x = inputs[0]
            seen[_name] = x.shape[2] * x.shape[3] if x.dim() == 4 else x.shape[1]

        hooks.append(m.register_forward_pre_hook(hook))
    ucfg = cfgs["unet"]
    with torch.device("meta"), torch.no_grad():
        sample = torch.zeros(1, ucfg.get("in_channels", 4), side, side)
        text = torch.zeros(1, 77, ucfg["cross_attention_dim"])
        kw: dict[str, Any] = {}
        if ucfg.get("addition_embed_type") == "text_time":
            pooled = ucfg["projection_class_embeddings_input_dim"] - 6 * ucfg["addition_time_embed_dim"]
            kw["added_cond_kwargs"] = {"text_embeds": torch.zeros(1, pooled), "time_ids": torch.zeros(1, 6)}
        unet(sample, torch.zeros(1), text, **kw)
    for h in hooks:
        h.remove()

    def table(module: torch.nn.Module, suffixes: tuple[str, ...], tokens: dict[str, int] | None) -> tuple:
        groups: dict[tuple[int, int, float], int] = {}
        for name, m in _targeted(module, suffixes):
            i, o = _layer_dims(m)
            frac = 0.0
            if tokens is not None:
                n = tokens[name]
                frac = 0.0 if n == 77 else n / (side * side)
            groups[(i, o, frac)] = groups.get((i, o, frac), 0) + 1
        return tuple(sorted((i, o, c, f) for (i, o, f), c in groups.items()))

    denoiser_lora = {t: table(unet, s, seen) for t, s in UNET_LORA_TARGETS.items()}
    te_lora = {t: tuple(table(te, s, None) for te in tes) for t, s in TEXT_ENCODER_LORA_TARGETS.items()}
    return specs.ModelSpec(
        family=family,
        denoiser=_count(unet),
        text_encoders=tuple(_count(te) for te in tes),
        vae_encoder=_count(vae.encoder) + _count(vae.quant_conv) if vae.quant_conv is not None else _count(vae.encoder),
        vae_decoder=_count(vae) - _count(vae.encoder) - (_count(vae.quant_conv) if vae.quant_conv is not None else 0),
        vae_channels=int(cfgs["vae"]["block_out_channels"][0]),
        text_encoder_shapes=tuple(
            (te.config.hidden_size, te.config.intermediate_size, te.config.num_hidden_layers) for te in tes
        ),
        cross_attention_dim=int(ucfg["cross_attention_dim"]),
        denoiser_lora=denoiser_lora,
        text_encoder_lora=te_lora,
        offload_blocks=block_table(registry.family(family).offload_blocks(unet)),
        quantisable=count_quantisable(unet, registry.family(family).storage_skip_patterns),
    )
