"""Write diffusers-layout weights in the original single-file checkpoint layout (SD 1.5 / SDXL).

The inverse of what diffusers' ``from_single_file`` reads (``diffusers.loaders.single_file_utils``):

* UNet ``model.diffusion_model.*`` (``input_blocks`` / ``middle_block`` / ``output_blocks``),
* VAE ``first_stage_model.*`` (``encoder.down.N.block.M``, ``mid.attn_1`` as 1x1 convolutions),
* SD 1.5 text encoder ``cond_stage_model.transformer.text_model.*``,
* SDXL ``conditioner.embedders.0.transformer.text_model.*`` (CLIP-L) and ``conditioner.embedders.1.model.*``
  (OpenCLIP bigG: fused ``in_proj`` q/k/v, ``resblocks``, transposed ``text_projection``).

Used by the tests to make civitai-style files from tiny models, and by anyone exporting a merged model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

_UNET_FIXED = {
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "add_embedding.linear_1": "label_emb.0.0",
    "add_embedding.linear_2": "label_emb.0.2",
    "conv_in": "input_blocks.0.0",
    "conv_norm_out": "out.0",
    "conv_out": "out.2",
}
_RESNET = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "time_emb_proj": "emb_layers.1",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "conv_shortcut": "skip_connection",
}
_VAE_ATTN = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def _resnet(rest: list[str]) -> str:
    return ".".join([_RESNET.get(rest[0], rest[0]), *rest[1:]])


def unet_to_original(sd: Mapping[str, torch.Tensor], layers_per_block: int) -> dict[str, torch.Tensor]:
    """diffusers ``UNet2DConditionModel`` keys -> ldm ``model.diffusion_model.*`` keys."""
    n = layers_per_block + 1
    up_with_attn = {k.split(".")[1] for k in sd if k.startswith("up_blocks.") and ".attentions." in k}
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        parts = key.split(".")
        new: str | None = None
        for d, o in _UNET_FIXED.items():
            if key.startswith(d + "."):
                new = o + key[len(d) :]
        if new is None and parts[0] == "down_blocks":
            i, kind = int(parts[1]), parts[2]
            if kind == "resnets":
                new = f"input_blocks.{n * i + int(parts[3]) + 1}.0.{_resnet(parts[4:])}"
            elif kind == "attentions":
                new = f"input_blocks.{n * i + int(parts[3]) + 1}.1.{'.'.join(parts[4:])}"
            elif kind == "downsamplers":
                new = f"input_blocks.{n * (i + 1)}.0.op.{'.'.join(parts[5:])}"
        elif new is None and parts[0] == "mid_block":
            j = int(parts[2])
            if parts[1] == "resnets":
                new = f"middle_block.{2 * j}.{_resnet(parts[3:])}"
            elif parts[1] == "attentions":
                new = f"middle_block.1.{'.'.join(parts[3:])}"
        elif new is None and parts[0] == "up_blocks":
            i, kind = int(parts[1]), parts[2]
            if kind == "resnets":
                new = f"output_blocks.{n * i + int(parts[3])}.0.{_resnet(parts[4:])}"
            elif kind == "attentions":
                new = f"output_blocks.{n * i + int(parts[3])}.1.{'.'.join(parts[4:])}"
            elif kind == "upsamplers":
                slot = 2 if parts[1] in up_with_attn else 1
                new = f"output_blocks.{n * i + layers_per_block}.{slot}.conv.{'.'.join(parts[5:])}"
        if new is None:
            raise ValueError(f"unexpected UNet key {key!r}")
        out["model.diffusion_model." + new] = value
    return out


def vae_to_original(sd: Mapping[str, torch.Tensor], num_blocks: int) -> dict[str, torch.Tensor]:
    """diffusers ``AutoencoderKL`` keys -> ldm ``first_stage_model.*`` keys."""
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        parts = key.split(".")
        new = key.replace("conv_norm_out", "norm_out")
        if len(parts) > 2 and parts[1] == "down_blocks":
            i = parts[2]
            if parts[3] == "resnets":
                new = f"encoder.down.{i}.block.{parts[4]}.{'.'.join(parts[5:])}"
            else:  # downsamplers.0.conv
                new = f"encoder.down.{i}.downsample.{'.'.join(parts[5:])}"
        elif len(parts) > 2 and parts[1] == "up_blocks":
            i = num_blocks - 1 - int(parts[2])
            if parts[3] == "resnets":
                new = f"decoder.up.{i}.block.{parts[4]}.{'.'.join(parts[5:])}"
            else:
                new = f"decoder.up.{i}.upsample.{'.'.join(parts[5:])}"
        elif len(parts) > 2 and parts[1] == "mid_block":
            if parts[2] == "resnets":
                new = f"{parts[0]}.mid.block_{int(parts[3]) + 1}.{'.'.join(parts[4:])}"
            else:  # attentions.0.<name>
                rest = ".".join(parts[4:])
                for d, o in _VAE_ATTN.items():
                    if rest.startswith(d + "."):
                        rest = o + rest[len(d) :]
                new = f"{parts[0]}.mid.attn_1.{rest}"
                if value.ndim == 2:
                    value = value[:, :, None, None]
        new = new.replace("conv_shortcut", "nin_shortcut")
        out["first_stage_model." + new] = value
    return out


def clip_to_original(sd: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """transformers ``CLIPTextModel`` keys -> ``<prefix>text_model.*`` (the HF layout the originals keep)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if key.endswith("position_ids"):
            continue
        k = key if key.startswith("text_model.") else f"text_model.{key}"
        out[prefix + k] = value
    return out


def open_clip_to_original(sd: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """transformers ``CLIPTextModelWithProjection`` keys -> OpenCLIP ``<prefix>*`` keys (fused q/k/v)."""
    src = {k.removeprefix("text_model."): v for k, v in sd.items() if not k.endswith("position_ids")}
    out: dict[str, torch.Tensor] = {
        prefix + "token_embedding.weight": src.pop("embeddings.token_embedding.weight"),
        prefix + "positional_embedding": src.pop("embeddings.position_embedding.weight"),
        prefix + "ln_final.weight": src.pop("final_layer_norm.weight"),
        prefix + "ln_final.bias": src.pop("final_layer_norm.bias"),
        prefix + "text_projection": src.pop("text_projection.weight").T.contiguous(),
    }
    layers = sorted({int(k.split(".")[2]) for k in src if k.startswith("encoder.layers.")})
    names = {
        "layer_norm1": "ln_1",
        "layer_norm2": "ln_2",
        "mlp.fc1": "mlp.c_fc",
        "mlp.fc2": "mlp.c_proj",
        "self_attn.out_proj": "attn.out_proj",
    }
    for i in layers:
        p = f"encoder.layers.{i}."
        o = f"{prefix}transformer.resblocks.{i}."
        for kind in ("weight", "bias"):
            out[o + f"attn.in_proj_{kind}"] = torch.cat([src.pop(p + f"self_attn.{x}_proj.{kind}") for x in "qkv"])
            for d, n in names.items():
                out[o + f"{n}.{kind}"] = src.pop(p + f"{d}.{kind}")
    if src:
        raise ValueError(f"unexpected OpenCLIP keys: {sorted(src)[:5]}")
    return out


def to_original_layout(
    unet: Any, vae: Any, text_encoders: Sequence[Any], family: str
) -> dict[str, torch.Tensor]:
    """One state dict in the original single-file layout from diffusers / transformers modules."""
    sd = unet_to_original(unet.state_dict(), int(unet.config.layers_per_block))
    sd.update(vae_to_original(vae.state_dict(), len(vae.config.block_out_channels)))
    if family == "sdxl":
        sd.update(clip_to_original(text_encoders[0].state_dict(), "conditioner.embedders.0.transformer."))
        sd.update(open_clip_to_original(text_encoders[1].state_dict(), "conditioner.embedders.1.model."))
    else:
        sd.update(clip_to_original(text_encoders[0].state_dict(), "cond_stage_model.transformer."))
    return {k: v.detach().contiguous() for k, v in sd.items()}
