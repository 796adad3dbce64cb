"""LoRA: inject with peft, export to kohya's format (real alpha), load a kohya file back into peft params.

kohya keys (DESIGN §5): ``lora_unet_<module path, . -> _>.lora_down.weight`` [r, in],
``.lora_up.weight`` [out, r], ``.alpha`` (0-dim). Text encoders: ``lora_te_`` (one), ``lora_te1_`` /
``lora_te2_`` (SDXL's two).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.core.fileio import atomic_write_with

log = logging.getLogger(__name__)

ADAPTER = "default"
UNET_TARGETS: dict[str, list[str]] = {
    "attention": ["to_q", "to_k", "to_v", "to_out.0"],
    "attention_ff": ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"],
    "attention_ff_proj": ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2", "proj_in", "proj_out"],
}
TEXT_ENCODER_TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj"]
FP16_MAX = 65504.0
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class LoraFormatError(ValueError):
    """A LoRA file does not match the model (unknown keys, other rank)."""


def _lora_config(rank: int, alpha: float, dropout: float, targets: list[str]) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, init_lora_weights="gaussian", target_modules=targets)


def inject_unet_lora(unet: nn.Module, rank: int, alpha: float, dropout: float = 0.0, targets: str = "attention") -> None:
    """Add a trainable LoRA adapter to the UNet's layers chosen by ``targets`` (a key of :data:`UNET_TARGETS`)."""
    unet.add_adapter(_lora_config(rank, alpha, dropout, UNET_TARGETS[targets]))


def inject_text_encoder_lora(text_encoder: nn.Module, rank: int, alpha: float, dropout: float = 0.0) -> None:
    """Add a LoRA adapter to a CLIP text encoder's attention projections."""
    from peft import inject_adapter_in_model

    inject_adapter_in_model(_lora_config(rank, alpha, dropout, TEXT_ENCODER_TARGETS), text_encoder, adapter_name=ADAPTER)


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The LoRA parameters of ``model`` (everything peft named ``lora_``), in a stable order."""
    return [p for n, p in model.named_parameters() if "lora_" in n]


def lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Module path -> peft LoRA layer (the path the original Linear/Conv had)."""
    return {name: m for name, m in model.named_modules() if hasattr(m, "lora_A") and ADAPTER in getattr(m, "lora_A", {})}


def kohya_module_name(prefix: str, path: str) -> str:
    """kohya's name of a LoRA module: ``<prefix>_<path with . as _>``.

    Text encoders are named as in the original CLIP layout (``text_model.encoder.layers...``);
    transformers 5 models drop the ``text_model.`` level, so it is put back here.
    """
    if prefix.startswith("lora_te") and not path.startswith("text_model."):
        path = f"text_model.{path}"
    return f"{prefix}_{path.replace('.', '_')}"


def te_prefixes(count: int) -> list[str]:
    return ["lora_te"] if count == 1 else [f"lora_te{i + 1}" for i in range(count)]


def kohya_state_dict(unet: nn.Module, text_encoders: Sequence[nn.Module] = (), alpha: float | None = None) -> dict[str, torch.Tensor]:
    """kohya-format tensors (detached, on CPU, in the params' dtype) of the UNet's and text encoders' LoRA layers.

    ``alpha`` is written as each module's ``.alpha``; None takes it from the peft layer's config.
    """
    out: dict[str, torch.Tensor] = {}
    groups: list[tuple[str, nn.Module]] = [("lora_unet", unet)]
    trained = [te for te in text_encoders if lora_layers(te)]
    groups += list(zip(te_prefixes(len(text_encoders)), text_encoders)) if trained else []
    for prefix, model in groups:
        for name, layer in lora_layers(model).items():
            key = kohya_module_name(prefix, name)
            down = layer.lora_A[ADAPTER].weight.detach().cpu()
            up = layer.lora_B[ADAPTER].weight.detach().cpu()
            a = alpha if alpha is not None else float(layer.lora_alpha[ADAPTER])
            out[f"{key}.lora_down.weight"] = down.contiguous()
            out[f"{key}.lora_up.weight"] = up.contiguous()
            out[f"{key}.alpha"] = torch.tensor(float(a), dtype=down.dtype)
    return out


def cast_for_save(state_dict: dict[str, torch.Tensor], save_precision: str) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Cast to the save dtype; returns the tensors and warnings (fp16: values beyond ±65504 saturate to inf)."""
    dtype = DTYPES[save_precision]
    warnings: list[str] = []
    out: dict[str, torch.Tensor] = {}
    for k, v in state_dict.items():
        if dtype == torch.float16 and v.numel() and float(v.detach().abs().max()) > FP16_MAX:
            warnings.append(f"{k} holds values beyond fp16's ±65504; save as bf16 or fp32 instead")
        out[k] = v.detach().to("cpu", dtype).contiguous()
    return out, warnings


def save_lora(path: str | Path, state_dict: dict[str, torch.Tensor], metadata: dict[str, str], save_precision: str) -> list[str]:
    """Write a .safetensors LoRA atomically, cast to ``save_precision`` ("fp32"/"fp16"/"bf16"). Returns warnings."""
    from safetensors.torch import save_file

    tensors, warnings = cast_for_save(state_dict, save_precision)
    meta = {str(k): str(v) for k, v in metadata.items()}
    meta.setdefault("ss_save_precision", save_precision)
    atomic_write_with(path, lambda tmp: save_file(tensors, str(tmp), metadata=meta))
    for w in warnings:
        log.warning(w)
    return warnings


def base_metadata(config: Any, family: str) -> dict[str, str]:
    """Minimal kohya ``ss_*`` metadata for a config (a :class:`guitrainer.config.TrainingConfig`)."""
    n = config.network
    return {
        "ss_network_module": "networks.lora",
        "ss_network_dim": str(n.rank),
        "ss_network_alpha": f"{float(n.alpha):g}",
        "ss_mixed_precision": config.precision.training,
        "ss_save_precision": config.precision.save,
        "ss_base_model_version": "sdxl_base_v1-0" if family == "sdxl" else "sd_v1",
        "ss_v2": "False",
        "ss_resolution": f"({config.dataset.resolution}, {config.dataset.resolution})",
        "ss_seed": str(config.schedule.seed),
        "ss_learning_rate": f"{config.optimizer.lr:g}",
        "ss_text_encoder_lr": f"{config.optimizer.text_encoder_lr:g}" if n.train_text_encoder else "0",
        "ss_optimizer": config.optimizer.name,
    }


def read_lora(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a .safetensors LoRA."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
    return load_file(str(path)), meta


def load_kohya_lora(
    path: str | Path | dict[str, torch.Tensor],
    unet: nn.Module,
    text_encoders: Sequence[nn.Module] = (),
    *,
    strict: bool = True,
    skipped: list[str] | None = None,
) -> int:
    """Copy a kohya LoRA into the models' (already injected) peft LoRA params; returns the number of modules set.

    When the file's alpha/rank scale differs from the adapter's, ``lora_up`` is rescaled so the effect is the same.
    Raises :class:`LoraFormatError` on a rank mismatch, and (``strict``) on modules that match no layer;
    otherwise those are left out and their names appended to ``skipped``.
    """
    sd = read_lora(path)[0] if not isinstance(path, dict) else path
    targets: dict[str, nn.Module] = {}
    for name, layer in lora_layers(unet).items():
        targets[kohya_module_name("lora_unet", name)] = layer
    for prefix, te in zip(te_prefixes(len(text_encoders)), text_encoders):
        for name, layer in lora_layers(te).items():
            targets[kohya_module_name(prefix, name)] = layer
    modules = sorted({k.rsplit(".", 2)[0] if k.endswith(".weight") else k.rsplit(".", 1)[0] for k in sd})
    unknown = [m for m in modules if m not in targets]
    if unknown and strict:
        raise LoraFormatError(f"{len(unknown)} LoRA modules match no trained layer, e.g. {unknown[0]}")
    if skipped is not None:
        skipped.extend(unknown)
    modules = [m for m in modules if m in targets]
    with torch.no_grad():
        for key in modules:
            layer = targets[key]
            a_param = layer.lora_A[ADAPTER].weight
            b_param = layer.lora_B[ADAPTER].weight
            down, up = sd[f"{key}.lora_down.weight"], sd[f"{key}.lora_up.weight"]
            if down.shape != a_param.shape or up.shape != b_param.shape:
                raise LoraFormatError(
                    f"{key}: file has rank {down.shape[0]}, the network has rank {a_param.shape[0]}; set network.rank to match"
                )
            rank = down.shape[0]
            file_alpha = float(sd[f"{key}.alpha"]) if f"{key}.alpha" in sd else float(rank)
            ratio = (file_alpha / rank) / float(layer.scaling[ADAPTER])
            a_param.copy_(down.to(a_param.dtype))
            b_param.copy_((up.float() * ratio).to(b_param.dtype))
    return len(modules)
