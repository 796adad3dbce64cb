"""The ``diffusion_model.<diffusers module>.lora_A.weight`` / ``.lora_B.weight`` / ``.alpha`` LoRA file, for the
families whose readers take diffusers' module names (Z-Image, Qwen-Image): what ai-toolkit and diffusion-pipe write,
what ComfyUI reads through its ``diffusion_model.<path>`` spelling and diffusers through its converters (which strip
``diffusion_model.`` and fold the alpha in). Written from our peft LoRA and read back into it; Continue from LoRA
takes this layout or the family's kohya layout (:func:`load_lora_file`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from guitrainer.config import NetworkConfig
from guitrainer.engine.families.flow_family import unwrapped
from guitrainer.engine.families.flux1 import export as flux_export
from guitrainer.engine.families.flux1.convert import Piece
from guitrainer.engine.network.lora import (
    ADAPTER,
    LoraFormatError,
    lora_layers,
    read_lora_file,
)

#: the prefixes a diffusers-layout file's module names may start with (ours and ai-toolkit's; diffusers' own)
PREFIXES = ("diffusion_model.", "transformer.")
_PEFT_PREFIXES = ("base_model.model.", "module.")


def own_name(name: str) -> str:
    """A peft / DDP module name as the model itself names it."""
    for prefix in _PEFT_PREFIXES:
        name = name.removeprefix(prefix)
    return name


def state_dict(denoiser: nn.Module, alpha: float | None = None, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The trained LoRA as ``diffusion_model.<module>.lora_A/B.weight`` + ``.alpha`` (``alpha`` None: each layer's)."""
    out: dict[str, torch.Tensor] = {}
    for name, layer in lora_layers(unwrapped(denoiser)).items():
        down = layer.lora_A[ADAPTER].weight.detach()
        up = layer.lora_B[ADAPTER].weight.detach()
        a = float(alpha) if alpha is not None else float(layer.lora_alpha[ADAPTER])
        key = f"diffusion_model.{own_name(name)}"
        out[f"{key}.lora_A.weight"] = down.contiguous()
        out[f"{key}.lora_B.weight"] = up.contiguous()
        out[f"{key}.alpha"] = torch.tensor(a, dtype=down.dtype, device=down.device)
    return {k: v.cpu() for k, v in out.items()} if to_cpu else out


def is_diffusers_layout(sd: Mapping[str, torch.Tensor]) -> bool:
    return any(k.endswith(".lora_A.weight") for k in sd)


def load_state_dict(sd: Mapping[str, torch.Tensor], denoiser: nn.Module, skipped: list[str]) -> int:
    """A diffusers-layout state dict into the injected LoRA, each module's alpha honoured (modules the LoRA has
    not go to ``skipped``); the modules loaded."""
    layers = {own_name(n): m for n, m in lora_layers(unwrapped(denoiser)).items()}
    done = 0
    with torch.no_grad():
        for key in sorted(k for k in sd if k.endswith(".lora_A.weight")):
            module = key[: -len(".lora_A.weight")]
            name = next((module[len(p):] for p in PREFIXES if module.startswith(p)), module)
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


def load_lora_file(
    path: Path, network: NetworkConfig, denoiser: nn.Module, skipped: list[str], *, label: str,
    kohya_pieces: Sequence[Piece],
) -> int:
    """Continue from LoRA: a ``label`` file of the diffusers layout or of the family's kohya layout (its table
    ``kohya_pieces``) into the injected LoRA (modules matching none go to ``skipped``). Plain LoRA only."""
    if network.type != "lora":
        raise LoraFormatError(f"{label} LoRAs are plain LoRA here: set network.type to lora (not {network.type}) to "
                              "continue from a file")
    sd, _meta = read_lora_file(path)
    if is_diffusers_layout(sd):
        return load_state_dict(sd, denoiser, skipped)
    return flux_export.load_kohya_lora(sd, denoiser, (), strict=False, skipped=skipped, pieces=kohya_pieces)
