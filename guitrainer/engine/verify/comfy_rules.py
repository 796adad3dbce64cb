"""A reader of LoRA files written from ComfyUI's rules, for the families whose files name the original model's
layers (Flux, SD 3.5): which key patches which weight, and by how much. Verify's proof (DESIGN §7) that a file
loads there; :mod:`~guitrainer.engine.verify.client_rules` runs it.

The rules, from ComfyUI's sources (``comfy/lora.py``, ``comfy/weight_adapter/lora.py``, ``comfy/utils.py``):

* ``model_lora_keys_unet``: for every weight ``diffusion_model.<k>.weight`` of the (original-layout) model, the
  names ``lora_unet_<k with . as _>`` (kohya) and ``diffusion_model.<k>`` patch all of it; through the family's
  diffusers table (:class:`~guitrainer.engine.network.client_layout.ClientLayout`), ``transformer.<diffusers
  name>`` and the family's other spellings patch a row slice, or all of it through ``swap_scale_shift``;
* ``model_lora_keys_clip``: ``text_encoders.<k>`` for every text-encoder weight; for CLIP layer b and module c of
  ``LORA_CLIP_MAP``: CLIP-L answers to ``lora_te_``, ``lora_te1_`` and ``text_encoder.``, CLIP-G to ``lora_te2_``
  and ``text_encoder_2.`` when CLIP-L is there (else to ``lora_te_``, ``text_encoder.``); T5 to
  ``lora_te<n>_<path>`` with n = 1 + (CLIP-G there) + (CLIP-L there), and also ``lora_te2_`` where n would be 2
  (OneTrainer's Flux files); ``lora_te1_text_projection`` / ``lora_te2_text_projection`` the projections;
* ``load_lora``: for each name x: ``x.alpha`` (``.item()``), then the first (up, down) pair of
  ``LoRAAdapter.load``'s spellings (``.lora_up.weight`` / ``.lora_down.weight``, ``_lora.up.weight``,
  ``.lora_B.weight`` / ``.lora_A.weight``, ``.lora.up.weight``, ``.lora_B`` / ``.lora_A``,
  ``.lora_linear_layer.up.weight``, ``.lora_B.default.weight``); one patch per target (a later name for the same
  target replaces an earlier one); every key of the file no name took is "lora key not loaded";
* ``LoRAAdapter.calculate_weight``: in fp32, ``diff = up.flatten(1) @ down.flatten(1)`` reshaped to the (sliced)
  weight's shape — where it cannot be, ComfyUI logs an error and leaves the weight —, scaled by
  ``alpha / down.shape[0]`` (1 without alpha) and the strength (1 here), through the target's function, added
  to the weight.

Only plain LoRA is read: the transformer families train nothing else, and a file's LoHa / LoKr / DoRA / Tucker
parts stay unread (and are reported). The model's weights are the diffusers model's; ComfyUI's original-layout
weights are assembled from them with the family's table (as ComfyUI's ``convert_diffusers_mmdit`` does), each
original weight's change computed there, and handed back, sliced, to the diffusers parameters it is made of.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from guitrainer.engine.network.client_layout import ClientLayout, Original

#: the denoiser's part number in a :class:`Target` (text encoders are 0, 1, …)
DENOISER = -1
#: ComfyUI's LORA_CLIP_MAP: a CLIP layer's module -> its kohya spelling
LORA_CLIP_MAP = {
    "mlp.fc1": "mlp_fc1",
    "mlp.fc2": "mlp_fc2",
    "self_attn.k_proj": "self_attn_k_proj",
    "self_attn.q_proj": "self_attn_q_proj",
    "self_attn.v_proj": "self_attn_v_proj",
    "self_attn.out_proj": "self_attn_out_proj",
}
#: ComfyUI looks for this many CLIP layers
CLIP_LAYERS = 32
#: LoRAAdapter.load's (up, down) spellings, in the order it tries them
PAIRS = (
    (".lora_up.weight", ".lora_down.weight"),
    ("_lora.up.weight", "_lora.down.weight"),
    (".lora_B.weight", ".lora_A.weight"),
    (".lora.up.weight", ".lora.down.weight"),
    (".lora_B", ".lora_A"),
    (".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight"),
    (".lora_B.default.weight", ".lora_A.default.weight"),
)


@dataclass(frozen=True)
class Target:
    """What a LoRA name patches: ``part`` :data:`DENOISER` or a text encoder's index; ``key`` the weight (the
    original layout's key for the denoiser, the encoder's own parameter name for a text encoder); ``rows`` /
    ``swapped`` as in :class:`~guitrainer.engine.network.client_layout.Original` (ComfyUI's offset and function)."""

    part: int
    key: str
    rows: tuple[int, int] | None = None
    swapped: bool = False


@dataclass(frozen=True)
class Patch:
    """One loaded LoRA module: the name it was read under, its factors and its alpha (None: none in the file)."""

    name: str
    up: torch.Tensor
    down: torch.Tensor
    alpha: float | None


@dataclass
class Loaded:
    """What :func:`load_lora` read: one patch per target, and the file's keys no name took."""

    patches: dict[Target, Patch] = field(default_factory=dict)
    not_loaded: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- key maps


def denoiser_key_map(layout: ClientLayout, table: Mapping[str, Original], params: Mapping[str, object]) -> dict[str, Target]:
    """``model_lora_keys_unet`` for a denoiser whose parameters are ``params`` (diffusers names) and whose original
    layout ``table`` gives; only weights the model has are named."""
    key_map: dict[str, Target] = {}
    present = {d: o for d, o in table.items() if d in params}
    for original in sorted({o.key for o in present.values()}):
        if original.endswith(".weight"):
            stem = original[: -len(".weight")]
            key_map[f"lora_unet_{stem.replace('.', '_')}"] = Target(DENOISER, original)
            key_map[f"diffusion_model.{stem}"] = Target(DENOISER, original)
    for diffusers, o in present.items():
        if diffusers.endswith(".weight"):
            module = diffusers[: -len(".weight")]
            for spelling in layout.diffusers_spellings:
                key_map[spelling.name(module)] = Target(DENOISER, o.key, o.rows, o.swapped)
    return key_map


def comfy_text_keys(name: str, encoder: nn.Module) -> dict[str, str]:
    """ComfyUI's keys of a text encoder's weights (``clip_l.transformer.text_model.…``, ``t5xxl.transformer.…``)
    -> the encoder's own parameter names (a CLIPTextModel of transformers 5 has no ``text_model.`` level)."""
    level = "" if name.startswith("t5") or hasattr(encoder, "text_model") else "text_model."
    return {f"{name}.transformer.{level}{p}": p for p, _ in encoder.named_parameters()}


def text_encoder_key_map(names: Sequence[str], encoders: Sequence[nn.Module]) -> dict[str, Target]:
    """``model_lora_keys_clip`` for text encoders that ComfyUI calls ``names`` ("clip_l", "clip_g", "t5xxl")."""
    keys: dict[str, tuple[int, str]] = {}
    for index, (name, encoder) in enumerate(zip(names, encoders)):
        keys.update({comfy: (index, own) for comfy, own in comfy_text_keys(name, encoder).items()})
    key_map: dict[str, Target] = {}

    def add(lora_name: str, comfy: str) -> None:
        key_map[lora_name] = Target(*keys[comfy])

    for comfy in keys:
        if comfy.endswith(".weight"):
            add(f"text_encoders.{comfy[: -len('.weight')]}", comfy)
    clip_l = clip_g = False
    for b in range(CLIP_LAYERS):
        for c, kohya in LORA_CLIP_MAP.items():
            k = f"clip_l.transformer.text_model.encoder.layers.{b}.{c}.weight"
            if k in keys:
                add(f"lora_te_text_model_encoder_layers_{b}_{kohya}", k)
                add(f"lora_te1_text_model_encoder_layers_{b}_{kohya}", k)
                add(f"text_encoder.text_model.encoder.layers.{b}.{c}", k)
                clip_l = True
            k = f"clip_g.transformer.text_model.encoder.layers.{b}.{c}.weight"
            if k in keys:
                clip_g = True
                if clip_l:
                    add(f"lora_te2_text_model_encoder_layers_{b}_{kohya}", k)
                    add(f"text_encoder_2.text_model.encoder.layers.{b}.{c}", k)
                else:
                    add(f"lora_te_text_model_encoder_layers_{b}_{kohya}", k)
                    add(f"text_encoder.text_model.encoder.layers.{b}.{c}", k)
    for comfy in keys:
        if comfy.startswith("t5xxl.transformer.") and comfy.endswith(".weight"):
            path = comfy[len("t5xxl.transformer."): -len(".weight")].replace(".", "_")
            index = 1 + clip_g + clip_l
            if clip_l and index == 2:  # OneTrainer's Flux files
                add(f"lora_te2_{path}", comfy)
                index += 1
            add(f"lora_te{index}_{path}", comfy)
    for name, lora_name in (("clip_g", "lora_te2_text_projection"), ("clip_l", "lora_te1_text_projection")):
        if f"{name}.transformer.text_projection.weight" in keys:
            add(lora_name, f"{name}.transformer.text_projection.weight")
    return key_map


# --------------------------------------------------------------------------- reading and merging


def load_lora(lora: Mapping[str, torch.Tensor], key_map: Mapping[str, Target]) -> Loaded:
    """``load_lora`` for plain LoRA modules (module docstring)."""
    out = Loaded()
    used: set[str] = set()
    for name, target in key_map.items():
        alpha = None
        if f"{name}.alpha" in lora:
            alpha = float(lora[f"{name}.alpha"].item())
            used.add(f"{name}.alpha")
        for up_end, down_end in PAIRS:
            up, down = name + up_end, name + down_end
            if up in lora and down in lora:
                out.patches[target] = Patch(name, lora[up], lora[down], alpha)
                used.update((up, down))
                break
    out.not_loaded = sorted(k for k in lora if k not in used)
    return out


def swap_scale_shift(t: torch.Tensor) -> torch.Tensor:
    """ComfyUI's ``swap_scale_shift``: the two halves of dim 0 exchanged (its own inverse)."""
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def patch_diff(patch: Patch, shape: torch.Size) -> torch.Tensor | None:
    """``calculate_weight``'s change of a weight of ``shape`` (fp32); None where up @ down cannot take that shape
    (ComfyUI logs an error and leaves the weight)."""
    scale = patch.alpha / patch.down.shape[0] if patch.alpha is not None else 1.0
    try:
        diff = (patch.up.flatten(1).float() @ patch.down.flatten(1).float()).reshape(shape)
    except RuntimeError:
        return None
    return scale * diff


@dataclass(frozen=True)
class Change:
    """What the file changes in one of our model's parameters: ``part`` / ``param`` (our name), the change, and the
    LoRA names whose patches made it (with the original weight they patched, for messages)."""

    part: int
    param: str
    delta: torch.Tensor
    sources: tuple[str, ...]
    original: str


def pieces_of(table: Mapping[str, Original], shapes: Mapping[str, torch.Size]) -> dict[str, list[tuple[str, Original]]]:
    """Each original weight -> the diffusers parameters (of those in ``shapes``) it is made of, with their place."""
    out: dict[str, list[tuple[str, Original]]] = {}
    for d, o in table.items():
        if d in shapes:
            out.setdefault(o.key, []).append((d, o))
    return out


def original_shape(pieces: Sequence[tuple[str, Original]], shapes: Mapping[str, torch.Size]) -> torch.Size:
    """An original weight's shape, from the diffusers parameters it is made of (their rows stacked where they are
    slices; as ComfyUI's ``convert_diffusers_mmdit`` assembles it)."""
    first = shapes[pieces[0][0]]
    rows = max((o.rows[0] + o.rows[1]) if o.rows else shapes[d][0] for d, o in pieces)
    return torch.Size((rows, *first[1:]))


def changes(
    loaded: Loaded, table: Mapping[str, Original], shapes: Mapping[int, Mapping[str, torch.Size]],
    not_merged: dict[str, str],
) -> Iterator[Change]:
    """Each parameter's change, one original weight at a time (a full-size model's changes never all exist at once).

    ``shapes``: per part (:data:`DENOISER`, the text encoders' indices), our parameters' shapes. Patches whose
    up @ down fits no weight go to ``not_merged`` (name -> why), as ComfyUI leaves them out.
    """
    by_weight: dict[tuple[int, str], list[tuple[Target, Patch]]] = {}
    for target, patch in loaded.patches.items():
        by_weight.setdefault((target.part, target.key), []).append((target, patch))
    assembled = pieces_of(table, shapes.get(DENOISER, {}))
    for (part, key), patches in by_weight.items():
        if part == DENOISER:
            pieces = assembled[key]
            shape = original_shape(pieces, shapes[DENOISER])
        else:
            pieces, shape = [], shapes[part][key]
        total = torch.zeros(shape)
        sources = []
        for target, patch in patches:
            view = total.narrow(0, *target.rows) if target.rows else total
            diff = patch_diff(patch, view.shape)
            if diff is None:
                not_merged[patch.name] = (f"its up @ down ({patch.up.shape[0]} x {patch.down.flatten(1).shape[1]}) "
                                          f"does not fit {key} {tuple(view.shape)}")
                continue
            view += swap_scale_shift(diff) if target.swapped else diff
            sources.append(patch.name)
        if not sources:
            continue
        if part != DENOISER:
            yield Change(part, key, total, tuple(sources), key)
            continue
        for d, o in pieces:
            if o.rows:
                delta = total.narrow(0, *o.rows)
            else:
                delta = swap_scale_shift(total) if o.swapped else total
            yield Change(DENOISER, d, delta, tuple(sources), key)
