"""An independent reader of kohya / LyCORIS LoRA files, written from the published loader semantics.

It follows ComfyUI's ``comfy/lora.py`` key map and ``comfy/weight_adapter`` (lora, loha, lokr,
``weight_decompose`` for ``dora_scale``) and A1111's built-in Lora extension, NOT guitrainer's writer:

* module names: ``lora_unet_`` + the UNet path with ``.`` as ``_``, in either layout, as ComfyUI's key map
  holds both: the original (LDM/SGM) checkpoint's ``input_blocks.4.1...`` (its model's own keys, the spelling
  kohya writes for SDXL) and diffusers' ``down_blocks.1.attentions.0...`` (its ``unet_to_diffusers`` table);
  ``lora_te_`` (one text encoder) or ``lora_te1_`` / ``lora_te2_`` + the CLIP path ``text_model.encoder...``;
* LoRA: diff = up.flatten(1) @ down.flatten(1), scale alpha / down.shape[0] (1 without alpha);
* LoHa: diff = (w1_a @ w1_b) * (w2_a @ w2_b), scale alpha / w1_b.shape[0];
* LoKr: w1 = lokr_w1 or w1_a @ w1_b, w2 likewise; diff = kron(w1, w2) (w1 unsqueezed for 4-d w2);
  scale alpha / (inner size of the last split factor), 1 when no factor is split;
* DoRA (``dora_scale`` beside any of them): W' = (W + scale * diff) * dora_scale / ||W + scale * diff|| per input
  column (dora_scale [1, in, ...]).
Everything is computed in fp32 from the file's tensors, as the clients' ``intermediate_dtype`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

_RES = {"in_layers.0": "norm1", "in_layers.2": "conv1", "emb_layers.1": "time_emb_proj",
        "out_layers.0": "norm2", "out_layers.3": "conv2", "skip_connection": "conv_shortcut"}


def ldm_to_diffusers(config: object) -> dict[str, str]:
    """Original-layout module path -> diffusers path of a UNet config's blocks (written from the LDM UNet's
    construction: per level ``num_res_blocks`` blocks [ResBlock, SpatialTransformer?] then a Downsample ``op``;
    middle ResBlock, SpatialTransformer, ResBlock; per up level ``num_res_blocks + 1`` blocks, the Upsample
    ``conv`` last in the level's last block)."""
    res = config.layers_per_block
    levels = len(config.down_block_types)
    res = [res] * levels if isinstance(res, int) else list(res)
    out: dict[str, str] = {"input_blocks.0.0": "conv_in", "out.2": "conv_out",
                           "time_embed.0": "time_embedding.linear_1", "time_embed.2": "time_embedding.linear_2",
                           "label_emb.0.0": "add_embedding.linear_1", "label_emb.0.2": "add_embedding.linear_2"}
    n = 1
    for level, kind in enumerate(config.down_block_types):
        for i in range(res[level]):
            out.update({f"input_blocks.{n}.0.{k}": f"down_blocks.{level}.resnets.{i}.{v}" for k, v in _RES.items()})
            if "CrossAttn" in kind:
                out[f"input_blocks.{n}.1"] = f"down_blocks.{level}.attentions.{i}"
            n += 1
        if level != levels - 1:
            out[f"input_blocks.{n}.0.op"] = f"down_blocks.{level}.downsamplers.0.conv"
            n += 1
    for ldm, diff in (("middle_block.0", "mid_block.resnets.0"), ("middle_block.2", "mid_block.resnets.1")):
        out.update({f"{ldm}.{k}": f"{diff}.{v}" for k, v in _RES.items()})
    out["middle_block.1"] = "mid_block.attentions.0"
    up_res = list(reversed(res))
    n = 0
    for level, kind in enumerate(config.up_block_types):
        for i in range(up_res[level] + 1):
            out.update({f"output_blocks.{n}.0.{k}": f"up_blocks.{level}.resnets.{i}.{v}" for k, v in _RES.items()})
            slot = 1
            if "CrossAttn" in kind:
                out[f"output_blocks.{n}.1"] = f"up_blocks.{level}.attentions.{i}"
                slot = 2
            if i == up_res[level] and level != levels - 1:
                out[f"output_blocks.{n}.{slot}.conv"] = f"up_blocks.{level}.upsamplers.0.conv"
            n += 1
    return out


def _ldm_names(unet: nn.Module) -> dict[str, str]:
    """diffusers module path -> original-layout path, for every Linear / Conv2d the table reaches."""
    table = {diff: ldm for ldm, diff in ldm_to_diffusers(unet.config).items()}
    out: dict[str, str] = {}
    for path, module in unet.named_modules():
        if not isinstance(module, (nn.Linear, nn.Conv2d)):
            continue
        parts = path.split(".")
        for cut in range(len(parts), 0, -1):  # the longest table entry that is a prefix of the path
            head = ".".join(parts[:cut])
            if head in table:
                out[path] = ".".join([table[head], *parts[cut:]])
                break
    return out


def key_map(unet: nn.Module, text_encoders: Sequence[nn.Module]) -> dict[str, nn.Module]:
    """kohya module name -> the Linear / Conv2d it patches (every weight of the models, as ComfyUI maps them)."""
    out: dict[str, nn.Module] = {}
    modules = dict(unet.named_modules())
    for path, ldm in _ldm_names(unet).items():
        out["lora_unet_" + ldm.replace(".", "_")] = modules[path]
    groups = [("lora_unet_", unet, False)]
    prefixes = ["lora_te_"] if len(text_encoders) == 1 else ["lora_te1_", "lora_te2_"]
    groups += [(p, te, True) for p, te in zip(prefixes, text_encoders)]
    for prefix, model, clip in groups:
        for path, module in model.named_modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                full = path if not clip or path.startswith("text_model.") else "text_model." + path
                out[prefix + full.replace(".", "_")] = module
    return out


def _f(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def _diff(parts: dict[str, torch.Tensor], shape: torch.Size) -> tuple[torch.Tensor, float]:
    """The un-scaled weight difference of one module and the scale alpha implies."""
    alpha = float(parts["alpha"]) if "alpha" in parts else None
    if "lora_up.weight" in parts:
        down, up = _f(parts["lora_down.weight"]), _f(parts["lora_up.weight"])
        diff = (up.flatten(1) @ down.flatten(1)).reshape(shape)
        return diff, (alpha / down.shape[0] if alpha is not None else 1.0)
    if "hada_w1_a" in parts:
        w1 = _f(parts["hada_w1_a"]) @ _f(parts["hada_w1_b"])
        w2 = _f(parts["hada_w2_a"]) @ _f(parts["hada_w2_b"])
        return (w1 * w2).reshape(shape), (alpha / parts["hada_w1_b"].shape[0] if alpha is not None else 1.0)
    dim = None
    if "lokr_w1" in parts:
        w1 = _f(parts["lokr_w1"])
    else:
        dim = parts["lokr_w1_b"].shape[0]
        w1 = _f(parts["lokr_w1_a"]) @ _f(parts["lokr_w1_b"])
    if "lokr_w2" in parts:
        w2 = _f(parts["lokr_w2"])
    else:
        dim = parts["lokr_w2_b"].shape[0]
        w2 = _f(parts["lokr_w2_a"]) @ _f(parts["lokr_w2_b"])
    if w2.dim() == 4:
        w1 = w1[:, :, None, None]
    scale = alpha / dim if alpha is not None and dim is not None else 1.0
    return torch.kron(w1, w2).reshape(shape), scale


def merged_weights(
    state_dict: dict[str, torch.Tensor], unet: nn.Module, text_encoders: Sequence[nn.Module]
) -> tuple[dict[nn.Module, torch.Tensor], set[str]]:
    """Each patched layer's merged fp32 weight, and the file keys that were consumed."""
    targets = key_map(unet, text_encoders)
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        module, _, part = key.partition(".")
        grouped.setdefault(module, {})[part] = value
    merged: dict[nn.Module, torch.Tensor] = {}
    consumed: set[str] = set()
    for module, parts in grouped.items():
        if module not in targets:
            continue
        weight = _f(targets[module].weight.detach())
        diff, scale = _diff(parts, weight.shape)
        calc = weight + scale * diff
        if "dora_scale" in parts:
            norm = calc.transpose(0, 1).reshape(calc.shape[1], -1).norm(dim=1, keepdim=True)
            norm = norm.reshape(calc.shape[1], *[1] * (calc.dim() - 1)).transpose(0, 1)
            calc = calc * (_f(parts["dora_scale"]) / norm)
        merged[targets[module]] = calc
        known = {"lora_up.weight", "lora_down.weight", "alpha", "dora_scale", "hada_w1_a", "hada_w1_b", "hada_w2_a",
                 "hada_w2_b", "lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b"}
        consumed |= {f"{module}.{p}" for p in parts if p in known}
    return merged, consumed
