"""Recognising the text-encoder and VAE files of a split install from their tensor names and shapes (no torch).

ComfyUI users keep Flux.1 and SD 3.5 as separate files: the transformer, ``clip_l.safetensors``,
``clip_g.safetensors`` (SD 3.5), ``t5xxl_fp16.safetensors`` and a 16-channel VAE; Stability's and ComfyUI's
all-in-one checkpoints hold the same parts under prefixes (``text_encoders.clip_l.transformer.``,
``first_stage_model.``). These parts are the same files for every family that uses them, so they are recognised
here; each family recognises only its own transformer (``core/families/<name>.py``).

The rules (what the readers of these files check):

* CLIP text encoders in the transformers layout (``text_model.embeddings.position_embedding.weight`` [77, width]):
  CLIP-L has width 768, CLIP-G (OpenCLIP bigG) 1280 — how ComfyUI's ``sd3_clip`` and SwarmUI tell them apart;
* T5-XXL v1.1 encoders (``encoder.block.0.layer.0.SelfAttention.q.weight``), the gated-GELU feed-forward
  (``DenseReluDense.wi_0``) marking v1.1, the one Flux and SD 3 use;
* VAEs, in the original (``encoder.down.0…``) or the diffusers layout (``encoder.down_blocks.0…``), whose latent
  channel count is half of ``encoder.conv_out``'s outputs: 16 for Flux and SD 3, 4 for SD 1.x / SDXL. Flux's and
  SD 3's VAEs are the same architecture: only the family the user chose tells them apart.

Every function takes a safetensors header's tensor table (name -> ``{"shape": [...]}``; values without a shape,
as a pickle's key list gives, are allowed and only the names are then checked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Component = Literal["clip_l", "clip_g", "t5", "vae"]

#: where an all-in-one checkpoint keeps each component ("" = a file holding only that component)
CHECKPOINT_PREFIXES: dict[Component, tuple[str, ...]] = {
    "clip_l": ("text_encoders.clip_l.transformer.", ""),
    "clip_g": ("text_encoders.clip_g.transformer.", ""),
    "t5": ("text_encoders.t5xxl.transformer.", ""),
    "vae": ("first_stage_model.", "vae.", ""),
}
#: a component's name in messages
COMPONENT_LABELS: dict[str, str] = {"clip_l": "CLIP-L", "clip_g": "CLIP-G", "t5": "T5-XXL", "vae": "VAE"}
#: what the usual file of each component is called (ComfyUI's names), for "add …" advice
COMPONENT_FILES: dict[str, str] = {
    "clip_l": "clip_l.safetensors",
    "clip_g": "clip_g.safetensors",
    "t5": "t5xxl_fp16.safetensors",
    "vae": "the VAE (.safetensors)",
}
CLIP_L_WIDTH = 768
CLIP_G_WIDTH = 1280
#: the latent channels of the Flux / SD 3 VAE
FLOW_VAE_CHANNELS = 16

_CLIP_POSITION = "embeddings.position_embedding.weight"
_T5_QUERY = "encoder.block.0.layer.0.SelfAttention.q.weight"
_T5_GATED = "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"
_T5_PLAIN = "encoder.block.0.layer.1.DenseReluDense.wi.weight"
_VAE_OUT = "encoder.conv_out.weight"


def shape_of(tensors: Mapping[str, Any], key: str) -> tuple[int, ...] | None:
    """The shape of ``key`` in a header table (or of a tensor), None when it is absent or has no shape."""
    info = tensors.get(key)
    if isinstance(info, Mapping):
        shape = info.get("shape")
        return tuple(int(d) for d in shape) if shape is not None else None
    shape = getattr(info, "shape", None)
    return tuple(int(d) for d in shape) if shape is not None else None


def has_prefix(tensors: Mapping[str, Any], prefix: str) -> bool:
    return any(k.startswith(prefix) for k in tensors)


def _clip_position_key(tensors: Mapping[str, Any], prefix: str) -> str | None:
    for key in (f"{prefix}text_model.{_CLIP_POSITION}", f"{prefix}{_CLIP_POSITION}"):
        if key in tensors:
            return key
    return None


def clip_width(tensors: Mapping[str, Any], prefix: str = "") -> int | None:
    """The hidden width of the CLIP text encoder under ``prefix`` (its position embedding's), None if none is there."""
    key = _clip_position_key(tensors, prefix)
    if key is None:
        return None
    shape = shape_of(tensors, key)
    return shape[-1] if shape else 0


def vae_channels(tensors: Mapping[str, Any], prefix: str = "") -> int | None:
    """The latent channels of the VAE under ``prefix`` (half of ``encoder.conv_out``'s outputs), None if none is there."""
    key = f"{prefix}{_VAE_OUT}"
    if key not in tensors or not (has_prefix(tensors, f"{prefix}decoder.")):
        return None
    shape = shape_of(tensors, key)
    return shape[0] // 2 if shape else 0


def is_t5_v11(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """A T5 v1.1 encoder (gated-GELU feed-forward) under ``prefix``: the T5-XXL Flux and SD 3 use."""
    return f"{prefix}{_T5_QUERY}" in tensors and f"{prefix}{_T5_GATED}" in tensors


def _is(tensors: Mapping[str, Any], component: Component, prefix: str) -> bool:
    if component == "t5":
        return is_t5_v11(tensors, prefix)
    if component == "vae":
        return vae_channels(tensors, prefix) in (FLOW_VAE_CHANNELS, 0)
    width = clip_width(tensors, prefix)
    if width is None:
        return False
    if width == 0:  # no shapes (a pickle's names): the prefix has to say which CLIP it is
        return prefix.endswith(f"{component}.transformer.")
    return width == (CLIP_L_WIDTH if component == "clip_l" else CLIP_G_WIDTH)


def components(tensors: Mapping[str, Any]) -> dict[Component, str]:
    """Which flow-family components a file holds, each with the prefix its keys carry ("" for a file of its own).

    A standalone ``clip_l.safetensors`` gives ``{"clip_l": ""}``; Stability's SD 3 Medium checkpoint with its text
    encoders gives ``clip_l``, ``clip_g``, ``t5`` under ``text_encoders.*.transformer.`` and ``vae`` under
    ``first_stage_model.``. Parts of the wrong kind (a 4-channel VAE, a T5 v1.0, a CLIP of another width) are not
    listed; :func:`describe` says what they are.
    """
    found: dict[Component, str] = {}
    # an all-in-one checkpoint's bare keys are its transformer's, never a component's
    bundled = any(has_prefix(tensors, p) for prefixes in CHECKPOINT_PREFIXES.values() for p in prefixes if p)
    for component, prefixes in CHECKPOINT_PREFIXES.items():
        for prefix in prefixes:
            if prefix == "" and bundled:
                continue
            if _is(tensors, component, prefix):
                found[component] = prefix
                break
    return found


def _t5_width(tensors: Mapping[str, Any], prefix: str) -> str:
    shape = shape_of(tensors, f"{prefix}{_T5_QUERY}")
    return f" of width {shape[-1]}" if shape else ""


def describe(tensors: Mapping[str, Any]) -> str:
    """What a file is, in words a user understands ("a CLIP-L text encoder", "a 4-channel VAE (SD 1.x / SDXL)"),
    for messages that name a part of the wrong kind. Transformers are the families' to describe; here they are
    "not a text encoder or VAE"."""
    n = len(tensors)
    if n == 0:
        return "an empty file (no tensors)"
    if any(k.endswith(("lora_down.weight", "lora_A.weight", "hada_w1_a", "lokr_w1")) for k in tensors):
        return "a LoRA, not a model part"
    found = components(tensors)
    if len(found) > 1:
        return "a checkpoint holding " + ", ".join(COMPONENT_LABELS[c] for c in found)
    if found:
        (component,) = found
        return {
            "clip_l": "a CLIP-L text encoder",
            "clip_g": "a CLIP-G (OpenCLIP bigG) text encoder",
            "t5": f"a T5 v1.1 text encoder{_t5_width(tensors, found[component])}",
            "vae": "a 16-channel VAE (Flux / SD 3)",
        }[component]
    width = clip_width(tensors)
    if width:
        known = {1024: " (OpenCLIP ViT-H, SD 2.x's)"}.get(width, "")
        return f"a CLIP text encoder of width {width}{known}: neither CLIP-L (768) nor CLIP-G (1280)"
    if _T5_QUERY in tensors and _T5_PLAIN in tensors:
        return "a T5 v1.0 encoder (not the T5 v1.1 XXL that Flux and SD 3 use)"
    channels = vae_channels(tensors) or next(
        (vae_channels(tensors, p) for p in CHECKPOINT_PREFIXES["vae"] if p and vae_channels(tensors, p)), None
    )
    if channels:
        what = " (SD 1.x / SDXL)" if channels == 4 else ""
        return f"a {channels}-channel VAE{what}"
    if has_prefix(tensors, "model.diffusion_model.") or has_prefix(tensors, "double_blocks.") or has_prefix(
        tensors, "joint_blocks."
    ):
        return "a diffusion model (transformer or UNet), not a text encoder or VAE"
    sample = ", ".join(repr(k) for k in list(tensors)[:2])
    return f"not a text encoder or VAE ({n} tensors, e.g. {sample})"


# --------------------------------------------------------------------------- a family's split install, in words


def listed(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclass(frozen=True)
class SplitParts:
    """The parts of one family's split install and how the messages name them: ``parts`` in the order they are named
    (the transformer first), ``labels`` what the user reads ("the T5-XXL text encoder"), ``files`` the file each is
    usually called (ComfyUI's names). The families that share this way of checking a set of files (Chroma, Z-Image)
    give their own detector, their :func:`file_parts` and where each part's keys start."""

    family: str
    parts: tuple[str, ...]
    labels: Mapping[str, str]
    files: Mapping[str, str]

    def missing_sentence(self, have: Sequence[str]) -> str:
        """Which files to choose with a file that lacks parts ("" when it holds every part)."""
        missing = [p for p in self.parts if p not in have]
        if not missing:
            return ""
        named = listed([f"{self.labels[p].removeprefix('the ')} ({self.files[p]})" for p in missing])
        return f"Choose its {named} {'file' if len(missing) == 1 else 'files'} with it."

    def holds(self, have: Sequence[str]) -> str:
        """"the transformer only", "the transformer with the VAE", … for the detector's message."""
        others = [self.labels[p] for p in self.parts[1:] if p in have]
        return "the transformer with " + listed(others) if others else "the transformer only"

    def check(
        self, denoiser: tuple[str, Mapping[str, Any]], others: Sequence[tuple[str, Mapping[str, Any]]], *,
        verdict: tuple[bool, str, str, str | None] | None, file_parts: Any, prefix_of: Any,
    ) -> tuple[dict[str, tuple[str, str]], list[str], list[str]]:
        """(sources, problems, notes) of a set of files: ``verdict`` is the family's detector's of the transformer's
        file, ``file_parts(table)`` the parts a file holds (this family's and other families' text encoders),
        ``prefix_of(part, table)`` where a part's keys start. A part twice, a part missing, a file that is no part,
        are problems; another family's text encoder is a note (it is left out)."""
        sources: dict[str, tuple[str, str]] = {}
        problems: list[str] = []
        notes: list[str] = []
        name, tensors = denoiser
        if verdict is None:
            problems.append(f"{name} is not {self.labels[self.parts[0]]} ({describe(tensors)}): choose the "
                            f"transformer file first (e.g. {self.files[self.parts[0]]}).")
        elif not verdict[0]:
            problems.append(verdict[2])
        for index, (file_name, table) in enumerate([denoiser, *others]):
            parts = tuple(file_parts(table))
            if index and not parts and clip_width(table) is not None:
                parts = ("clip_l",)  # a CLIP of another width: not used either
            if index and not parts:
                problems.append(f"{file_name} is no part of a {self.family} model: it is {describe(table)}.")
            for part in parts:
                if part not in self.parts:
                    notes.append(f"{file_name} is {describe(table)}, a text encoder {self.family} does not read: it is "
                                 "not used.")
                elif part in sources:
                    problems.append(f"{file_name} is {self.labels[part]} again ({sources[part][0]} is one): choose "
                                    "each part once.")
                else:
                    sources[part] = (file_name, prefix_of(part, table))
        for part in self.parts:
            if part not in sources:
                label = self.labels[part]
                problems.append(f"{label[0].upper()}{label[1:]} is missing: add {self.files[part]}.")
        return sources, problems, notes
