"""Continue from LoRA (``model.init_lora``), checked before the model loads: the file is there, readable, and of a
network type this run's ``network.type`` can continue.

Pure Python: the file's type comes from its .safetensors header (tensor names and shapes), the same rules the
engine's loader applies (:mod:`guitrainer.engine.network.lycoris_keys`): LoHa continues LoHa, LoKr continues LoKr, DoRA
continues DoRA (of the same ``network.dora_layout``); a plain LoRA file (linear layers only) can also start a LoCon or DoRA network (the convolutions
start fresh), and a LoCon file a DoRA one, or a plain LoRA (its convolutions are then left out, with a warning).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guitrainer.base import safe_open
from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header
from guitrainer.core.model.lora_format import DIFFUSERS_WEIGHT_NAME

#: the types a file of each type can continue (``network.type`` values)
CONTINUES: dict[str, tuple[str, ...]] = {
    "lora": ("lora", "locon", "dora"),
    "locon": ("lora", "locon", "dora"),
    "dora": ("dora",),
    "loha": ("loha",),
    "lokr": ("lokr",),
}
#: each DoRA layout's axis in words (``network.dora_layout``)
LAYOUT_WORDS = {"column": "input channel (column)", "row": "output channel (row)"}
#: how the app names each type (``network.type``'s choice labels)
TYPE_LABELS = {"lora": "LoRA", "locon": "LoCon", "loha": "LoHa", "lokr": "LoKr", "dora": "DoRA"}


def file_network_type(tensors: dict[str, Any]) -> str:
    """The network type of a LoRA file's tensor table (name -> {"shape", ...}), kohya / LyCORIS or diffusers keys."""
    names = list(tensors)
    if any(".hada_" in k for k in names):
        return "loha"
    if any(".lokr_" in k for k in names):
        return "lokr"
    if any(k.endswith(".dora_scale") for k in names):
        return "dora"
    for name, info in tensors.items():
        shape = info.get("shape", []) if isinstance(info, dict) else []
        if name.endswith(("lora_down.weight", "lora_A.weight")) and len(shape) == 4 and shape[-1] > 1:
            return "locon"
    return "lora"


def file_dora_layout(tensors: dict[str, Any]) -> str:
    """"column" ([1, in, ...] dora_scale) or "row" ([out, 1, ...]) of a DoRA file's tensor table ("" for neither)."""
    for name, info in tensors.items():
        shape = info.get("shape", []) if isinstance(info, dict) else []
        if name.endswith(".dora_scale") and len(shape) >= 2 and (shape[0] == 1) != (shape[1] == 1):
            return "column" if shape[0] == 1 else "row"
    return ""


def _weights_file(p: Path) -> Path:
    """The .safetensors of a LoRA given as a file or as a diffusers folder."""
    if safe_open.look(p).kind == "folder":
        inside = p / DIFFUSERS_WEIGHT_NAME
        return inside if safe_open.look(inside).kind != "missing" else next(iter(sorted(p.glob("*.safetensors"))), inside)
    return p


def init_lora_problem(value: str, network_type: str, dora_layout: str = "column") -> str:
    """Why ``model.init_lora`` cannot be continued with ``network.type`` (and, for DoRA, ``network.dora_layout``):
    "" when it can, or is not set."""
    text = str(value or "").strip()
    if not text:
        return ""
    p = expand(text)
    shown = f"The LoRA to continue from (“{printable(text)}”)"
    try:
        kind = safe_open.look(p).kind
        if kind == "missing":
            return f"{shown} was not found: choose the file again, or clear Continue from LoRA to start a new LoRA"
        if kind not in ("file", "folder"):  # a named pipe would block the read, a device never end it
            return f"{shown} is {safe_open.KIND_WORDS[kind]}, not a file: choose a .safetensors LoRA, or clear Continue from LoRA"
        tensors, _meta = read_safetensors_header(_weights_file(p))
    except safe_open.PathError as e:
        return f"{shown} {e.reason}: choose another file, or clear Continue from LoRA"
    except (CheckpointError, OSError):
        return (f"{shown} cannot be read as a .safetensors LoRA (damaged, or another kind of file): choose another "
                "file, or clear Continue from LoRA")
    if not any(k.endswith((".weight", ".alpha")) or "hada_" in k or "lokr_" in k for k in tensors):
        return f"{shown} holds no LoRA weights: choose a LoRA file, or clear Continue from LoRA"
    kind = file_network_type(tensors)
    layout = file_dora_layout(tensors) if kind == "dora" else ""
    if network_type in CONTINUES[kind] and layout and layout != dora_layout:
        return (f"{shown} keeps DoRA's magnitude per {LAYOUT_WORDS[layout]}, but DoRA layout (Training page, "
                f"Network) is {dora_layout}: set DoRA layout to {layout} to continue from it, or clear Continue from "
                "LoRA to start a new one")
    if network_type in CONTINUES[kind]:
        return ""
    can = " or ".join(TYPE_LABELS[t] for t in CONTINUES[kind])
    return (f"{shown} is a {TYPE_LABELS[kind]} file, but Network type (Training page) is "
            f"{TYPE_LABELS.get(network_type, network_type)}: set Network type to {can} to continue from it, or clear "
            "Continue from LoRA to start a new one")
