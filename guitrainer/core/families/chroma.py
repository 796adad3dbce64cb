"""Chroma (lodestones' Chroma1-HD / Chroma1-Base) on paper: its facts, how its files are recognised, and the parts
of a split install.

Chroma is an 8.9 B-parameter rectified-flow transformer made from FLUX.1 schnell: the same 19 double-stream and
38 single-stream blocks (hidden 3072) over Flux's 16-channel VAE, but conditioned on T5-XXL alone (no CLIP), and
with every block's adaLN modulation Linears (Flux's ``img_mod`` / ``txt_mod`` / ``modulation``, 3.3 B parameters)
replaced by one small network, the ``distilled_guidance_layer`` (an "approximator" of 0.28 B), that makes all of
the blocks' modulation vectors from the timestep. Users keep it as the transformer's file
(``Chroma1-HD.safetensors``, in BFL's layout) beside ``t5xxl_fp16.safetensors`` and Flux's ``ae.safetensors``,
or as a diffusers folder (``ChromaPipeline``); this module tells those files apart from their tensor tables
alone (safetensors headers, no torch).

The key names are BFL's Flux layout without the modulation, plus ``distilled_guidance_layer.*`` — what diffusers'
``convert_chroma_transformer_checkpoint_to_diffusers`` reads and what ComfyUI's ``comfy/ldm/chroma`` model is
built of; Chroma Radiance (a pixel-space model without a VAE, ``nerf_*`` layers) is another architecture and
refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from guitrainer.core.families.facts import (
    FamilyFacts,
    FileVerdict,
    ModelSpec,
    NamedTensors,
    PartsReport,
    PrecisionFacts,
    QuantisableLinears,
)
from guitrainer.core.families.parts import FLOW_VAE_CHANNELS, SplitParts, components, shape_of

PartKind = Literal["transformer", "t5", "vae"]

#: the prefix ComfyUI / SAI "checkpoint" files put before the transformer's keys
TRANSFORMER_PREFIX = "model.diffusion_model."
#: what the user reads for each part, and the file name the Chroma model card and ComfyUI ship it as
PART_LABELS: dict[str, str] = {
    "transformer": "the Chroma transformer",
    "t5": "the T5-XXL text encoder",
    "vae": "the VAE",
}
PART_FILES: dict[str, str] = {
    "transformer": "Chroma1-HD.safetensors",
    "t5": "t5xxl_fp16.safetensors",
    "vae": "ae.safetensors (Flux's VAE)",
}
CHROMA_PARTS: tuple[PartKind, ...] = ("transformer", "t5", "vae")

_CHROMA_KEY = "distilled_guidance_layer.in_proj.bias"  # ComfyUI's and diffusers' Chroma fingerprint
_BFL_BLOCK_KEY = "double_blocks.0.img_attn.norm.key_norm.scale"
_DIFFUSERS_KEYS = ("distilled_guidance_layer.layers.0.linear_1.weight", "transformer_blocks.0.attn.add_k_proj.weight")
_RADIANCE_PREFIX = "nerf_"  # Chroma Radiance's pixel-space decoder layers (ComfyUI comfy/ldm/chroma_radiance)
_SUPPORTED = "This app trains Chroma1-HD and Chroma1-Base (text to image, with Flux's VAE)."

FLOW_DEFAULTS: dict[str, Any] = {
    "timestep_sampling": "sigmoid",
    "sigmoid_scale": 1.0,
    "model_prediction_type": "raw",
    "weighting_scheme": "none",
    "source": (
        "kohya-ss/sd-scripts docs/flux_train_network.md, Chroma: --model_type chroma --timestep_sampling sigmoid "
        "--model_prediction_type raw --apply_t5_attn_mask --guidance_scale 0.0 (sigmoid of a standard normal: "
        "sd-scripts' --sigmoid_scale default 1.0)"
    ),
}

PRECISION = PrecisionFacts(
    released="bf16",
    fp16_overflows=(
        "Chroma keeps Flux's transformer blocks, whose activations overflow fp16 (diffusers' Chroma blocks clip "
        "their fp16 hidden states to ±65504, as diffusers PR #9097 did for Flux), and T5-XXL overflows fp16 in its "
        "feed-forward output (transformers #9295). Train Chroma in bf16."
    ),
    recommended="bf16",
    sources=(
        "lodestones released Chroma1-HD in bf16: Chroma1-HD.safetensors is 17.8 GB for 8.9 B parameters (2 bytes each)",
        "https://github.com/huggingface/diffusers/pull/9097",
        "https://github.com/huggingface/transformers/issues/9295",
    ),
)


# --------------------------------------------------------------------------- reading a tensor table


def transformer_prefix(tensors: Mapping[str, Any]) -> str | None:
    """``""`` or ``"model.diffusion_model."``: where a Chroma transformer's BFL-layout keys start in this file;
    None when it holds none."""
    for prefix in ("", TRANSFORMER_PREFIX):
        if prefix + _CHROMA_KEY in tensors and prefix + _BFL_BLOCK_KEY in tensors:
            return prefix
    return None


def is_diffusers_transformer(tensors: Mapping[str, Any]) -> bool:
    """A Chroma transformer saved in diffusers' names (``diffusion_pytorch_model.safetensors``)."""
    return all(k in tensors for k in _DIFFUSERS_KEYS) and "x_embedder.weight" in tensors


def _is_radiance(tensors: Mapping[str, Any]) -> bool:
    return any(k.startswith((_RADIANCE_PREFIX, TRANSFORMER_PREFIX + _RADIANCE_PREFIX)) for k in tensors)


def file_parts(tensors: Mapping[str, Any]) -> tuple[str, ...]:
    """Every part of a Chroma model one file holds: "transformer", "t5", "vae" (a split file one, a checkpoint
    several), and "clip_l" / "clip_g" for CLIP text encoders, which Chroma does not use."""
    found: list[str] = []
    if transformer_prefix(tensors) is not None or is_diffusers_transformer(tensors) or _is_radiance(tensors):
        found.append("transformer")
    found.extend(c for c in components(tensors) if c not in found)
    return tuple(found)


# --------------------------------------------------------------------------- detection (the seam's detectors)


SPLIT = SplitParts("Chroma", CHROMA_PARTS, PART_LABELS, PART_FILES)


def missing_parts_sentence(have: Sequence[str]) -> str:
    """Which files to choose with a Chroma file that lacks parts ("" when it holds every part)."""
    return SPLIT.missing_sentence(have)


def detect_file(tensors: Mapping[str, Any], metadata: Mapping[str, str], name: str) -> FileVerdict | None:
    """What a single file says of itself, if it is a Chroma transformer; None for anything else.

    BFL's layout (with or without ComfyUI's checkpoint prefix) or diffusers' names; a file without T5 and the VAE
    (the usual release) is accepted with a warning naming the files to choose with it. Chroma Radiance and a
    Chroma with other input channels are refused by name.
    """
    if _is_radiance(tensors):
        return False, "error", (
            f"{name} is Chroma Radiance, a pixel-space model without a VAE: its layers differ from Chroma's. "
            f"{_SUPPORTED}"
        ), None
    prefix = transformer_prefix(tensors)
    if prefix is None and not is_diffusers_transformer(tensors):
        return None
    img_in = shape_of(tensors, f"{prefix}img_in.weight") if prefix is not None else shape_of(tensors, "x_embedder.weight")
    if img_in and len(img_in) == 2 and img_in[1] != 64:
        return False, "error", (
            f"{name} is a Chroma-like transformer with {img_in[1]} input channels, not Chroma's 64 (16 latent "
            f"channels in 2x2 patches). {_SUPPORTED}"
        ), None
    parts = file_parts(tensors)
    layout = "diffusers' names" if prefix is None else "BFL's layout"
    missing = missing_parts_sentence(parts)
    message = f"Chroma ({layout}, {len(tensors)} tensors): {SPLIT.holds(parts)}. {missing}".strip()
    return True, "warning" if missing else "info", message, None


def detect_folder(model_index: Mapping[str, Any]) -> bool:
    """A diffusers Chroma folder: its ``model_index.json`` names ``ChromaPipeline`` (the img2img and inpainting
    pipelines share its components but have their own class names)."""
    return str(model_index.get("_class_name", "")) == "ChromaPipeline"


# --------------------------------------------------------------------------- a split install, checked


def _prefix_of(part: str, table: Mapping[str, Any]) -> str:
    return (transformer_prefix(table) or "") if part == "transformer" else components(table).get(part, "")  # type: ignore[call-overload]


def check_parts(
    denoiser: NamedTensors, text_encoders: Sequence[NamedTensors] = (), vae: NamedTensors | None = None
) -> PartsReport:
    """The seam's split-install check: the transformer's file, T5-XXL's and Flux's 16-channel VAE, each named in
    the message that finds it missing, twice or of the wrong kind. A CLIP-L or CLIP-G file (kept for Flux or
    SD 3.5 beside Chroma's) is not used, and the notes say so."""
    others = [*text_encoders, *([vae] if vae is not None else [])]
    sources, problems, notes = SPLIT.check(denoiser, others, verdict=detect_file(denoiser[1], {}, denoiser[0]),
                                           file_parts=file_parts, prefix_of=_prefix_of)
    return PartsReport(sources=sources, problems=tuple(problems), notes=tuple(notes))


#: the VAE's latent channels (Flux's VAE); a 4-channel SD VAE is refused by :func:`check_parts` via ``components``
LATENT_CHANNELS = FLOW_VAE_CHANNELS

# The estimator's table of full-size Chroma1-HD, computed on ``meta`` by
# :func:`guitrainer.engine.families.chroma.spec.as_model_spec` (a test recomputes it and compares).
# fmt: off
SPEC = ModelSpec(
    family='chroma',
    denoiser=8899983424,
    text_encoders=(4762310656,),
    vae_encoder=34274208,
    vae_decoder=49545475,
    vae_channels=128,
    text_encoder_shapes=((4096, 10240, 24),),
    cross_attention_dim=4096,
    denoiser_lora={
        'attention': ((3072, 3072, 76, 0.0), (3072, 3072, 190, 0.25)),
        'attention_ff': ((3072, 3072, 76, 0.0), (3072, 3072, 190, 0.25), (3072, 12288, 19, 0.0), (3072, 12288, 57, 0.25), (12288, 3072, 19, 0.0), (12288, 3072, 19, 0.25), (15360, 3072, 38, 0.25)),
        'attention_ff_proj': ((3072, 3072, 76, 0.0), (3072, 3072, 190, 0.25), (3072, 12288, 19, 0.0), (3072, 12288, 57, 0.25), (12288, 3072, 19, 0.0), (12288, 3072, 19, 0.25), (15360, 3072, 38, 0.25)),
    },
    text_encoder_lora={'attention': ((),), 'attention_ff': ((),), 'attention_ff_proj': ((),)},
    # the 19 double-stream blocks, then the 38 single-stream ones (precision.offload_blocks keeps a share of each)
    offload_blocks=((226548224,) * 19, (113271040,) * 38),
    quantisable=QuantisableLinears(weights=8606711808, rows=1984512, layers=418, largest=47185920),
    blocks=((19, 226548224, 0), (38, 113271040, 0)),
    fp8_stored=(8608696320, 3623878656),
)
# fmt: on


FACTS = FamilyFacts(
    name="chroma",
    label="Chroma",
    architecture="transformer",
    objective="flow",
    native_resolution=1024,  # Chroma1-HD: trained at 1024 px (Chroma1-Base at 512 px)
    latent_channels=LATENT_CHANNELS,
    latent_downscale=8,
    patch=2,
    text_encoders=("T5-XXL",),
    text_tokens=512,  # ChromaPipeline's max_sequence_length
    trainable_text_encoders=(),  # T5 stays frozen, as for Flux (sd-scripts, ai-toolkit, OneTrainer's Chroma presets)
    precision=PRECISION,
    base_model_version="chroma",
    modelspec_architecture="chroma",
    flow_defaults=FLOW_DEFAULTS,
    split_files=True,
    detect_file=detect_file,
    detect_folder=detect_folder,
    hub_patterns=("chroma",),
    spec=SPEC,
    check_parts=check_parts,
)
