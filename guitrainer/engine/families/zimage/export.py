"""Z-Image LoRA files, in the two layouts the readers take, written from our peft LoRA and read back into it, and the
file's metadata.

* ``"diffusers"`` — ``diffusion_model.<diffusers module>.lora_A.weight`` / ``.lora_B.weight`` / ``.alpha``
  (``layers.0.attention.to_q``…): what ai-toolkit writes, what diffusers' ``ZImageLoraLoaderMixin`` reads
  (``_convert_non_diffusers_z_image_lora_to_diffusers`` strips ``diffusion_model.`` and folds the alpha in) and what
  ComfyUI reads (``model_lora_keys_unet``'s Lumina2 branch maps ``diffusion_model.<diffusers name>`` through
  ``z_image_to_diffusers``: ``to_q/k/v`` onto row slices of its fused ``attention.qkv``). The one file every reader
  takes; the Z-Image preset writes it.
* ``"kohya"`` — ``lora_unet_<original module>`` (``lora_unet_layers_0_attention_qkv``, ``…_attention_out``,
  ``…_feed_forward_w1``) with ``lora_down`` / ``lora_up`` / ``alpha``: ComfyUI's own names for its original-layout
  model (the generic loop of ``model_lora_keys_unet``), what musubi-tuner's ``convert_z_image_lora_to_comfy.py``
  makes. q, k and v are written as one block-diagonal LoRA of ``attention.qkv`` whose alpha makes every reader's
  merge the trained delta (:mod:`guitrainer.engine.families.flux1.export` explains it). diffusers does not split a
  fused qkv LoRA: it reads the ``"diffusers"`` layout only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.engine import flow_matching
from guitrainer.engine.families.flux1 import export as flux_export
from guitrainer.engine.families.flux1.convert import Piece
from guitrainer.engine.families.zimage.convert import BLOCK_LISTS
from guitrainer.engine.network.lora import ADAPTER, LoraFormatError, lora_layers, lora_weights_file, read_lora

IMPLEMENTATION = "https://github.com/Tongyi-MAI/Z-Image"  # musubi-tuner's and OneTrainer's modelspec
DIFFUSERS_PREFIXES = ("diffusion_model.", "transformer.")
_PEFT_PREFIXES = ("base_model.model.", "module.")


def _unwrapped(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _own(name: str) -> str:
    for prefix in _PEFT_PREFIXES:
        name = name.removeprefix(prefix)
    return name


def pieces_of(denoiser: nn.Module) -> tuple[Piece, ...]:
    """The original layout's Linears of every block (the LoRA's modules, in kohya's file), from the built model."""
    pieces: list[Piece] = []
    modules = dict(_unwrapped(denoiser).named_modules())
    for blocks in BLOCK_LISTS:
        for i in range(len(modules.get(blocks, ()))):
            b = f"{blocks}.{i}"
            q, k, v = (modules[f"{b}.attention.to_{x}"].out_features for x in "qkv")
            pieces.append(Piece(f"{b}.attention.qkv", tuple(f"{b}.attention.to_{x}" for x in "qkv"), (q, k, v)))
            pieces.append(Piece(f"{b}.attention.out", (f"{b}.attention.to_out.0",)))
            for name in ("feed_forward.w1", "feed_forward.w2", "feed_forward.w3", "adaLN_modulation.0"):
                if f"{b}.{name}" in modules:
                    pieces.append(Piece(f"{b}.{name}", (f"{b}.{name}",)))
    return tuple(pieces)


def kohya_state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA under ComfyUI's original names (``"kohya"``; see the module docstring)."""
    return flux_export.kohya_state_dict(denoiser, (), alpha, to_cpu=to_cpu, pieces=pieces_of(denoiser))


def diffusers_state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA as ``diffusion_model.<diffusers module>.lora_A/B.weight`` + ``.alpha`` (``"diffusers"``)."""
    out: dict[str, torch.Tensor] = {}
    for name, layer in lora_layers(_unwrapped(denoiser)).items():
        down = layer.lora_A[ADAPTER].weight.detach()
        up = layer.lora_B[ADAPTER].weight.detach()
        a = float(alpha) if alpha is not None else float(layer.lora_alpha[ADAPTER])
        key = f"diffusion_model.{_own(name)}"
        out[f"{key}.lora_A.weight"] = down.contiguous()
        out[f"{key}.lora_B.weight"] = up.contiguous()
        out[f"{key}.alpha"] = torch.tensor(a, dtype=down.dtype, device=down.device)
    return {k: v.cpu() for k, v in out.items()} if to_cpu else out


def _load_diffusers_layout(sd: Mapping[str, torch.Tensor], denoiser: nn.Module, skipped: list[str]) -> int:
    """A ``diffusion_model.`` / ``transformer.``-named Z-Image file (ours, ai-toolkit's) into the injected LoRA."""
    layers = {_own(n): m for n, m in lora_layers(_unwrapped(denoiser)).items()}
    done = 0
    with torch.no_grad():
        for key in sorted(k for k in sd if k.endswith(".lora_A.weight")):
            module = key[: -len(".lora_A.weight")]
            name = next((module[len(p):] for p in DIFFUSERS_PREFIXES if module.startswith(p)), module)
            layer = layers.get(name)
            if layer is None:
                skipped.append(module)
                continue
            down, up = sd[key], sd[f"{module}.lora_B.weight"]
            a_param, b_param = layer.lora_A[ADAPTER].weight, layer.lora_B[ADAPTER].weight
            if tuple(down.shape) != tuple(a_param.shape) or tuple(up.shape) != tuple(b_param.shape):
                raise LoraFormatError(f"{module}: the file has rank {down.shape[0]}, the network rank {a_param.shape[0]}; "
                                      "set network.rank to the file's rank to continue from it")
            scale = float(sd[f"{module}.alpha"]) / down.shape[0] if f"{module}.alpha" in sd else 1.0
            a_param.copy_(down.to(a_param.dtype))
            b_param.copy_((up.float() * (scale / float(layer.scaling[ADAPTER]))).to(b_param.dtype))
            done += 1
    return done


def load_lora_file(path: Path, network: NetworkConfig, denoiser: nn.Module, skipped: list[str]) -> int:
    """Continue from LoRA: a Z-Image file of either layout into the injected LoRA (modules matching none go to
    ``skipped``). Plain LoRA only."""
    if network.type != "lora":
        raise LoraFormatError(f"Z-Image LoRAs are plain LoRA here: set network.type to lora (not {network.type}) to "
                              "continue from a file")
    try:
        sd, _meta = read_lora(lora_weights_file(path))
    except LoraFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise LoraFormatError(f"{path}: not a readable .safetensors LoRA ({e})") from e
    if any(k.endswith(".lora_A.weight") for k in sd):
        return _load_diffusers_layout(sd, denoiser, skipped)
    return flux_export.load_kohya_lora(sd, denoiser, (), strict=False, skipped=skipped, pieces=pieces_of(denoiser))


def metadata(config: TrainingConfig, settings: flow_matching.FlowSettings) -> dict[str, str]:
    """Z-Image's part of the file's metadata, under the names musubi-tuner (kohya's Z-Image trainer) writes."""
    values: dict[str, Any] = {
        "ss_base_model_version": "z_image",  # musubi-tuner dataset/architectures.py ARCHITECTURE_Z_IMAGE_FULL
        "ss_network_module": "networks.lora_zimage",
        "modelspec.architecture": "Z-Image/lora",
        "modelspec.implementation": IMPLEMENTATION,
        "ss_timestep_sampling": settings.timestep_sampling,
        "ss_discrete_flow_shift": settings.shift,
        "ss_sigmoid_scale": settings.sigmoid_scale,
        "ss_logit_mean": settings.logit_mean,
        "ss_logit_std": settings.logit_std,
        "ss_model_prediction_type": settings.model_prediction_type,
        "ss_weighting_scheme": settings.weighting_scheme,
    }
    return {k: str(v) for k, v in values.items()}
