"""LoRA: inject with peft, kohya (real alpha) and diffusers/peft state dicts, load a LoRA file back into peft params.

kohya keys (DESIGN §5): ``lora_unet_<module path, . -> _>.lora_down.weight`` [r, in],
``.lora_up.weight`` [out, r], ``.alpha`` (0-dim); the UNet path is the original layout's for SDXL
(``input_blocks_4_1_...``, :mod:`guitrainer.engine.network.kohya_names`), diffusers' otherwise, as kohya writes them.
Text encoders: ``lora_te_`` (one), ``lora_te1_`` / ``lora_te2_`` (SDXL's two).
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base import safe_open
from guitrainer.core.model.lora_format import DIFFUSERS_WEIGHT_NAME, TEXT_ENCODER_TARGETS, UNET_LORA_TARGETS
from guitrainer.engine.network.kohya_names import UnetNames

log = logging.getLogger(__name__)

ADAPTER = "default"


class LoraFormatError(ValueError):
    """A LoRA file does not match the model (unknown keys, other rank)."""


def _lora_config(rank: int, alpha: float, dropout: float, targets: Sequence[str]) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, init_lora_weights="gaussian", target_modules=list(targets)
    )


def inject_lora(denoiser: nn.Module, rank: int, alpha: float, dropout: float, targets: Sequence[str]) -> None:
    """Add a trainable LoRA adapter to the denoiser's layers whose names end with one of ``targets`` (peft's rule),
    through diffusers' ``add_adapter`` (UNets and transformers alike)."""
    denoiser.add_adapter(_lora_config(rank, alpha, dropout, targets))


def inject_unet_lora(unet: nn.Module, rank: int, alpha: float, dropout: float = 0.0, targets: str = "attention") -> None:
    """Add a trainable LoRA adapter to the UNet's layers chosen by ``targets`` (a key of
    :data:`~guitrainer.core.model.lora_format.UNET_LORA_TARGETS`)."""
    inject_lora(unet, rank, alpha, dropout, UNET_LORA_TARGETS[targets])


def inject_text_encoder_lora(
    text_encoder: nn.Module, rank: int, alpha: float, dropout: float = 0.0, targets: Sequence[str] = TEXT_ENCODER_TARGETS
) -> None:
    """Add a LoRA adapter to a text encoder's layers ``targets`` (by default a CLIP's attention projections)."""
    from peft import inject_adapter_in_model

    inject_adapter_in_model(_lora_config(rank, alpha, dropout, targets), text_encoder, adapter_name=ADAPTER)


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The adapter parameters of ``model`` (peft's ``lora_``, LoHa's ``hada_``, LoKr's ``lokr_``), in a stable order."""
    return [p for n, p in model.named_parameters() if any(k in n for k in ("lora_", "hada_", "lokr_"))]


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
    unet_names = UnetNames(unet)
    for prefix, model in groups:
        for name, layer in lora_layers(model).items():
            key = unet_names.name(name) if model is unet else kohya_module_name(prefix, name)
            down = layer.lora_A[ADAPTER].weight.detach().cpu()
            up = layer.lora_B[ADAPTER].weight.detach().cpu()
            a = alpha if alpha is not None else float(layer.lora_alpha[ADAPTER])
            out[f"{key}.lora_down.weight"] = down.contiguous()
            out[f"{key}.lora_up.weight"] = up.contiguous()
            out[f"{key}.alpha"] = torch.tensor(float(a), dtype=down.dtype)
    return out


def read_lora(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a .safetensors LoRA."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
    return load_file(str(path)), meta


# --------------------------------------------------------------------------- diffusers / peft format

#: kohya text-encoder prefix -> diffusers pipeline component
_TE_COMPONENT = {"lora_te": "text_encoder", "lora_te1": "text_encoder", "lora_te2": "text_encoder_2"}
_ADAPTER_FIELDS = ("r", "lora_alpha", "target_modules", "rank_pattern", "alpha_pattern", "lora_dropout", "init_lora_weights")


def _te_components(count: int) -> list[str]:
    return ["text_encoder", "text_encoder_2"][:count]


def _diffusers_module_path(component: str, path: str) -> str:
    """Module path as diffusers writes it: text encoders keep CLIP's ``text_model.`` level (older readers need it)."""
    if component.startswith("text_encoder") and not path.startswith("text_model."):
        path = f"text_model.{path}"
    return path


def diffusers_state_dict(unet: nn.Module, text_encoders: Sequence[nn.Module] = ()) -> dict[str, torch.Tensor]:
    """peft-format tensors as ``StableDiffusionPipeline.save_lora_weights`` writes them.

    Keys: ``unet.<module>.lora_A.weight`` / ``.lora_B.weight``, ``text_encoder.text_model.<module>.lora_A.weight``,
    ``text_encoder_2....`` (SDXL). No alpha tensors: the alpha travels in :func:`diffusers_adapter_metadata`.
    """
    out: dict[str, torch.Tensor] = {}
    groups: list[tuple[str, nn.Module]] = [("unet", unet)]
    trained = [te for te in text_encoders if lora_layers(te)]
    groups += list(zip(_te_components(len(text_encoders)), text_encoders)) if trained else []
    for component, model in groups:
        for name, layer in lora_layers(model).items():
            key = f"{component}.{_diffusers_module_path(component, name)}"
            out[f"{key}.lora_A.weight"] = layer.lora_A[ADAPTER].weight.detach().cpu().contiguous()
            out[f"{key}.lora_B.weight"] = layer.lora_B[ADAPTER].weight.detach().cpu().contiguous()
    return out


def _adapter_config(layers: dict[str, nn.Module], alpha: float | None) -> dict[str, Any]:
    """A minimal LoraConfig as a dict (fields every peft since 0.6 accepts): rank, alpha, exact module paths."""
    ranks = {n: int(m.r[ADAPTER]) for n, m in layers.items()}
    alphas = {n: float(alpha if alpha is not None else m.lora_alpha[ADAPTER]) for n, m in layers.items()}
    r = Counter(ranks.values()).most_common(1)[0][0]
    a = Counter(alphas.values()).most_common(1)[0][0]
    return {
        "r": r,
        "lora_alpha": a,
        "target_modules": sorted(n.removeprefix("text_model.") for n in layers),
        "rank_pattern": {n.removeprefix("text_model."): v for n, v in ranks.items() if v != r},
        "alpha_pattern": {n.removeprefix("text_model."): v for n, v in alphas.items() if v != a},
        "lora_dropout": 0.0,
        "init_lora_weights": True,
    }


def diffusers_adapter_metadata(
    unet: nn.Module, text_encoders: Sequence[nn.Module] = (), alpha: float | None = None
) -> dict[str, Any]:
    """diffusers' ``lora_adapter_metadata``: each component's LoraConfig, flattened as ``unet.r``, ``unet.lora_alpha``...

    diffusers 0.35+ stores this JSON under the safetensors header key ``lora_adapter_metadata`` and
    ``load_lora_weights`` builds the LoraConfig from it, so an alpha other than the rank survives (without
    it diffusers assumes alpha = rank).
    """
    meta: dict[str, Any] = {}
    groups: list[tuple[str, nn.Module]] = [("unet", unet)]
    if any(lora_layers(te) for te in text_encoders):
        groups += list(zip(_te_components(len(text_encoders)), text_encoders))
    for component, model in groups:
        layers = lora_layers(model)
        if layers:
            meta.update({f"{component}.{k}": v for k, v in _adapter_config(layers, alpha).items()})
    return meta


def kohya_from_diffusers(sd: dict[str, torch.Tensor], adapter_metadata: dict[str, Any] | None) -> dict[str, torch.Tensor]:
    """Rename a diffusers/peft-format LoRA to kohya keys, with ``.alpha`` from the adapter metadata (else alpha = rank)."""
    meta = adapter_metadata or {}
    two_tes = any(k.startswith("text_encoder_2.") for k in sd)
    prefix_of = {"unet": "lora_unet", "text_encoder": "lora_te1" if two_tes else "lora_te", "text_encoder_2": "lora_te2"}
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        component, _, rest = key.partition(".")
        if component not in prefix_of:
            raise LoraFormatError(f"{key}: not a diffusers LoRA key (expected unet., text_encoder. or text_encoder_2.)")
        if rest.endswith(".lora_A.weight"):
            module, new = rest.removesuffix(".lora_A.weight"), "lora_down.weight"
        elif rest.endswith(".lora_B.weight"):
            module, new = rest.removesuffix(".lora_B.weight"), "lora_up.weight"
        else:
            raise LoraFormatError(f"{key}: only lora_A / lora_B weights are understood")
        kohya = kohya_module_name(prefix_of[component], module)
        out[f"{kohya}.{new}"] = value
        if new == "lora_down.weight":
            rank = value.shape[0]
            short = module.removeprefix("text_model.")
            alpha = meta.get(f"{component}.alpha_pattern", {}).get(short, meta.get(f"{component}.lora_alpha", rank))
            out[f"{kohya}.alpha"] = torch.tensor(float(alpha))
    return out


def is_diffusers_format(sd: dict[str, torch.Tensor]) -> bool:
    return bool(sd) and all(k.startswith(("unet.", "text_encoder.", "text_encoder_2.")) for k in sd)


def lora_weights_file(path: str | Path) -> Path:
    """The .safetensors of a LoRA given as a file or as a diffusers folder (``pytorch_lora_weights.safetensors``)."""
    p = Path(path)
    try:  # what is there, before anything is opened: a named pipe would block safetensors, a device never end
        kind = safe_open.require(p, "any").kind
        if kind == "folder":
            cand = p / DIFFUSERS_WEIGHT_NAME
            if safe_open.look(cand).kind != "missing":
                safe_open.require(cand, "file")
                return cand
            files = sorted(p.glob("*.safetensors"))
            if len(files) == 1:
                safe_open.require(files[0], "file")
                return files[0]
            raise LoraFormatError(f"{p}: no {DIFFUSERS_WEIGHT_NAME} in this folder")
    except safe_open.PathError as e:
        raise LoraFormatError(f"the LoRA {e}") from None
    return p


def read_lora_file(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A LoRA file or folder's tensors and metadata as stored; anything unreadable is a LoraFormatError naming it."""
    try:
        return read_lora(lora_weights_file(path))
    except LoraFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise LoraFormatError(f"{path}: not a readable .safetensors LoRA ({e})") from e


def read_lora_as_kohya(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A LoRA file (kohya or diffusers format, file or folder) as kohya-keyed tensors, plus its metadata."""
    import json

    sd, meta = read_lora_file(path)
    if is_diffusers_format(sd):
        raw = meta.get("lora_adapter_metadata")
        sd = kohya_from_diffusers(sd, json.loads(raw) if raw else None)
    return sd, meta


# --------------------------------------------------------------------------- loading into peft layers


def module_of(key: str) -> tuple[str, str]:
    """``lora_unet_x.lora_down.weight`` -> (``lora_unet_x``, ``lora_down.weight``)."""
    module, _, part = key.partition(".")
    return module, part


def kohya_targets(
    unet: nn.Module, text_encoders: Sequence[nn.Module], layers: Callable[[nn.Module], dict[str, nn.Module]]
) -> dict[str, nn.Module]:
    """Every name a file may give each of ``layers(model)`` -> that layer.

    UNet layers answer to both spellings (diffusers' and the original layout's, as kohya writes SDXL), so a file
    from any trainer, or ours from before kohya's SDXL spelling, finds its layers.
    """
    names = UnetNames(unet)
    targets = {alias: m for path, m in layers(unet).items() for alias in names.aliases(path)}
    for prefix, te in zip(te_prefixes(len(text_encoders)), text_encoders):
        targets.update({kohya_module_name(prefix, n): m for n, m in layers(te).items()})
    return targets


def resolve_module(module: str, targets: dict[str, object], te_count: int) -> str | None:
    """The name in ``targets`` a file's module means, trying other trainers' text-encoder spellings; None if none.

    ``targets`` holds both UNet spellings (:func:`kohya_targets`).
    """
    if module in targets:
        return module
    cands: list[str] = []
    if te_count == 1 and module.startswith("lora_te1_"):
        cands.append("lora_te_" + module.removeprefix("lora_te1_"))
    if te_count == 2 and module.startswith("lora_te_"):
        cands.append("lora_te1_" + module.removeprefix("lora_te_"))
    for c in list(cands) + [module]:
        if c.startswith("lora_te") and "_text_model_" not in c:  # written without CLIP's text_model level
            head, _, tail = c.partition("_encoder_layers_")
            if tail:
                cands.append(f"{head}_text_model_encoder_layers_{tail}")
    return next((c for c in cands if c in targets), None)


def _fit(tensor: torch.Tensor, shape: torch.Size) -> torch.Tensor | None:
    """``tensor`` reshaped to ``shape`` when only 1x1 conv dims differ (Linear vs 1x1 Conv proj_in); else None."""
    if tensor.shape == shape:
        return tensor
    squeeze = [d for d in tensor.shape if d != 1]
    if squeeze == [d for d in shape if d != 1] and tensor.numel() == math.prod(shape):
        return tensor.reshape(shape)
    return None


def load_kohya_lora(
    path: str | Path | dict[str, torch.Tensor],
    unet: nn.Module,
    text_encoders: Sequence[nn.Module] = (),
    *,
    strict: bool = True,
    skipped: list[str] | None = None,
) -> int:
    """Copy a LoRA into the models' (already injected) peft LoRA params; returns the number of modules set.

    Reads kohya files (ours or other trainers': ``lora_te1_`` for a single text encoder, kohya-ss' SDXL
    ``input_blocks_*`` UNet names, 1x1-conv ``proj_in``) and diffusers-format files (converted with their
    ``lora_adapter_metadata``). When the file's alpha/rank scale differs from the adapter's, ``lora_up`` is
    rescaled so the effect is the same.

    Raises :class:`LoraFormatError` on a rank mismatch, on a file without LoRA tensors, and (``strict``) on
    modules that match no layer; otherwise those are left out and their names appended to ``skipped``.
    """
    sd = read_lora_as_kohya(path)[0] if not isinstance(path, dict) else path
    if is_diffusers_format(sd):
        sd = kohya_from_diffusers(sd, None)
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in sd.items():
        module, part = module_of(key)
        parts.setdefault(module, {})[part] = value
    if not any("lora_down.weight" in p for p in parts.values()):
        raise LoraFormatError(f"{_name(path)} holds no LoRA weights (no lora_down/lora_up or lora_A/lora_B tensors)")
    targets = kohya_targets(unet, text_encoders, lora_layers)

    unknown: list[str] = []
    odd: list[str] = []
    resolved: dict[str, str] = {}
    for module, p in sorted(parts.items()):
        if set(p) - {"lora_down.weight", "lora_up.weight", "alpha"} or "lora_up.weight" not in p:
            odd.append(f"{module} ({', '.join(sorted(p))})")
            continue
        name = resolve_module(module, targets, len(text_encoders))
        if name is None:
            unknown.append(module)
        else:
            resolved[module] = name
    if odd:
        raise LoraFormatError(
            f"{_name(path)}: {len(odd)} modules are not plain LoRA (lora_down / lora_up / alpha), e.g. {odd[0]}; "
            "to continue from a LyCORIS (LoHa, LoKr, DoRA) file, set network.type to its type"
        )
    if unknown and strict:
        raise LoraFormatError(
            f"{_name(path)}: {len(unknown)} of {len(parts)} LoRA modules match no layer trained here, e.g. "
            f"{', '.join(unknown[:3])}; check the base model family and network.target_modules"
        )
    if skipped is not None:
        skipped.extend(unknown)
    with torch.no_grad():
        for module, name in resolved.items():
            layer = targets[name]
            a_param = layer.lora_A[ADAPTER].weight
            b_param = layer.lora_B[ADAPTER].weight
            down, up = _fit(parts[module]["lora_down.weight"], a_param.shape), _fit(parts[module]["lora_up.weight"], b_param.shape)
            if down is None or up is None:
                file_rank = parts[module]["lora_down.weight"].shape[0]
                raise LoraFormatError(
                    f"{module}: the file has rank {file_rank}, the network has rank {a_param.shape[0]}; "
                    f"set network.rank to {file_rank} to continue from this file"
                )
            rank = down.shape[0]
            file_alpha = float(parts[module]["alpha"]) if "alpha" in parts[module] else float(rank)
            ratio = (file_alpha / rank) / float(layer.scaling[ADAPTER])
            a_param.copy_(down.to(a_param.dtype))
            b_param.copy_((up.float() * ratio).to(b_param.dtype))
    return len(resolved)


def _name(path: object) -> str:
    return "the LoRA" if isinstance(path, dict) else str(path)


def inject_for_file(unet: nn.Module, text_encoders: Sequence[nn.Module], sd: dict[str, torch.Tensor]) -> None:
    """Inject peft LoRA layers exactly where a kohya state dict has modules (rank per module; scale 1, the loader rescales).

    Used to apply any file with :func:`load_kohya_lora` to a fresh model (e.g. to verify a file without the trainer).
    """
    from peft import LoraConfig, inject_adapter_in_model

    ranks: dict[str, int] = {}
    for key, value in sd.items():
        module, part = module_of(key)
        if part == "lora_down.weight":
            ranks[module] = int(value.shape[0])
    groups: list[tuple[str, nn.Module]] = [("lora_unet", unet), *zip(te_prefixes(len(text_encoders)), text_encoders)]
    unet_names = UnetNames(unet)
    for prefix, model in groups:
        layers = [n for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d)) and "lora_" not in n]
        by_kohya = {
            alias: n
            for n in layers
            for alias in (unet_names.aliases(n) if model is unet else [kohya_module_name(prefix, n)])
        }
        chosen: dict[str, int] = {}
        for module, r in ranks.items():
            name = resolve_module(module, by_kohya, len(text_encoders))
            if name is not None:
                chosen[by_kohya[name]] = r
        if not chosen:
            continue
        r = Counter(chosen.values()).most_common(1)[0][0]
        cfg = LoraConfig(
            r=r,
            lora_alpha=r,
            target_modules=sorted(chosen),
            rank_pattern={re.escape(n): v for n, v in chosen.items() if v != r},
            alpha_pattern={re.escape(n): v for n, v in chosen.items() if v != r},
            init_lora_weights=False,
        )
        inject_adapter_in_model(cfg, model, adapter_name=ADAPTER)
