"""Z-Image (Tongyi-MAI's Z-Image-Turbo and Z-Image Base) on paper: its facts, how its files are recognised, and the
parts of a split install.

Z-Image is a 6.15 B-parameter single-stream flow-matching DiT (30 layers of width 3840, two "noise refiner" layers on
the image tokens and two "context refiner" layers on the caption) over FLUX.1's 16-channel VAE, conditioned on the
second-to-last hidden state of Qwen3-4B (a 4.0 B decoder LLM) reading the prompt through its chat template. Users
keep it as the transformer's file (``z_image_turbo_bf16.safetensors``, the original layout ComfyUI reads), the text
encoder (``qwen_3_4b.safetensors``, Hugging Face names) and Flux's ``ae.safetensors``, or as a diffusers folder
(``ZImagePipeline``); this module tells those files apart from their tensor tables alone (no torch).

The original layout is diffusers' but for a fused ``attention.qkv``, ``attention.out`` for ``to_out.0``,
``q_norm`` / ``k_norm`` for ``norm_q`` / ``norm_k`` and ``x_embedder`` / ``final_layer`` for the patch-size keyed
``all_x_embedder.2-1`` / ``all_final_layer.2-1`` (diffusers' ``convert_z_image_transformer_checkpoint_to_diffusers``).
Its fingerprint is the pair of padding tokens ``x_pad_token`` / ``cap_pad_token`` beside ``cap_embedder`` (Lumina
Image 2.0, the NextDiT it descends from, has neither); Z-Image Omni (``siglip_embedder``) is refused by name.
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

PartKind = Literal["transformer", "qwen3", "vae"]

TRANSFORMER_PREFIX = "model.diffusion_model."
#: where a Qwen3 text encoder's keys start: a ComfyUI all-in-one checkpoint's, the Hugging Face file's (a
#: ``Qwen3ForCausalLM``'s ``model.``), or none (a ``Qwen3Model``'s own)
QWEN3_PREFIXES = ("text_encoders.qwen3_4b.transformer.model.", "text_encoders.qwen3_4b.transformer.", "model.", "")
_QWEN3_KEY = "layers.0.self_attn.q_norm.weight"  # Qwen3's per-head q norm: Qwen2 / Qwen2.5 have none
_QWEN3_EMBED = "embed_tokens.weight"
PART_LABELS: dict[str, str] = {
    "transformer": "the Z-Image transformer",
    "qwen3": "the Qwen3-4B text encoder",
    "vae": "the VAE",
}
PART_FILES: dict[str, str] = {
    "transformer": "z_image_turbo_bf16.safetensors",
    "qwen3": "qwen_3_4b.safetensors",
    "vae": "ae.safetensors (Flux's VAE)",
}
ZIMAGE_PARTS: tuple[PartKind, ...] = ("transformer", "qwen3", "vae")
#: Qwen3-4B's width: the transformer's ``cap_feat_dim``
QWEN3_4B_WIDTH = 2560

_ORIGINAL_KEYS = ("x_pad_token", "cap_pad_token", "layers.0.attention.qkv.weight")
_DIFFUSERS_KEYS = ("x_pad_token", "cap_pad_token", "layers.0.attention.to_q.weight")
_OMNI_KEY = "siglip_embedder.1.weight"
_SUPPORTED = "This app trains Z-Image Turbo and Z-Image Base (text to image, with Flux's VAE)."

FLOW_DEFAULTS: dict[str, Any] = {
    "timestep_sampling": "shift",
    "discrete_flow_shift": 3.0,
    "model_prediction_type": "raw",
    "weighting_scheme": "none",
    "source": (
        "Z-Image-Turbo's scheduler_config.json (shift 3.0, no dynamic shifting), the shift ai-toolkit's Z-Image "
        "trainer and DiffSynth-Studio's use (musubi-tuner's code default 3.0; its guide suggests 2.0)"
    ),
}

PRECISION = PrecisionFacts(
    released="bf16",
    fp16_overflows=(
        "Z-Image was released and is run in bf16 (its model card loads it with torch_dtype=torch.bfloat16); its "
        "Qwen3 text encoder is a bf16 LLM whose hidden states exceed fp16's range in its largest activations. "
        "Train Z-Image in bf16."
    ),
    recommended="bf16",
    sources=(
        "Tongyi-MAI released Z-Image-Turbo in bf16: z_image_turbo_bf16.safetensors is 12.3 GB for 6.15 B parameters",
        "https://huggingface.co/Tongyi-MAI/Z-Image-Turbo",
    ),
)


# --------------------------------------------------------------------------- reading a tensor table


def transformer_prefix(tensors: Mapping[str, Any]) -> str | None:
    """``""`` or ``"model.diffusion_model."``: where an original-layout Z-Image transformer's keys start; None when
    the file holds none."""
    for prefix in ("", TRANSFORMER_PREFIX):
        if all(prefix + k in tensors for k in _ORIGINAL_KEYS):
            return prefix
    return None


def is_diffusers_transformer(tensors: Mapping[str, Any]) -> bool:
    """A Z-Image transformer saved in diffusers' names (``diffusion_pytorch_model.safetensors``)."""
    return all(k in tensors for k in _DIFFUSERS_KEYS)


def _is_omni(tensors: Mapping[str, Any]) -> bool:
    return _OMNI_KEY in tensors or TRANSFORMER_PREFIX + _OMNI_KEY in tensors


def qwen3_prefix(tensors: Mapping[str, Any]) -> str | None:
    """Where a Qwen3 text encoder's keys start in this file (see :data:`QWEN3_PREFIXES`), None when it has none."""
    return next((p for p in QWEN3_PREFIXES if p + _QWEN3_KEY in tensors and p + _QWEN3_EMBED in tensors), None)


def qwen3_width(tensors: Mapping[str, Any]) -> int | None:
    """The hidden width of the Qwen3 text encoder in this file (its token embedding's), None when unknown."""
    prefix = qwen3_prefix(tensors)
    shape = shape_of(tensors, f"{prefix}{_QWEN3_EMBED}") if prefix is not None else None
    return shape[-1] if shape else None


def caption_width(tensors: Mapping[str, Any]) -> int | None:
    """The caption width the transformer in this file reads (its ``cap_embedder``'s input), None when unknown."""
    for key in ("cap_embedder.1.weight", TRANSFORMER_PREFIX + "cap_embedder.1.weight"):
        shape = shape_of(tensors, key)
        if shape and len(shape) == 2:
            return shape[1]
    return None


def file_parts(tensors: Mapping[str, Any]) -> tuple[str, ...]:
    """Every part of a Z-Image model one file holds ("transformer", "qwen3", "vae"), and the flow families' other
    text encoders ("clip_l", "t5", …), which Z-Image does not use."""
    found: list[str] = []
    if transformer_prefix(tensors) is not None or is_diffusers_transformer(tensors) or _is_omni(tensors):
        found.append("transformer")
    if qwen3_prefix(tensors) is not None:
        found.append("qwen3")
    found.extend(c for c in components(tensors) if c not in found)
    return tuple(found)


# --------------------------------------------------------------------------- detection (the seam's detectors)


SPLIT = SplitParts("Z-Image", ZIMAGE_PARTS, PART_LABELS, PART_FILES)


def missing_parts_sentence(have: Sequence[str]) -> str:
    """Which files to choose with a Z-Image file that lacks parts ("" when it holds every part)."""
    return SPLIT.missing_sentence(have)


def detect_file(tensors: Mapping[str, Any], metadata: Mapping[str, str], name: str) -> FileVerdict | None:
    """What a single file says of itself, if it is a Z-Image transformer; None for anything else.

    The original layout (with or without ComfyUI's checkpoint prefix) or diffusers' names; a file without its text
    encoder and VAE (the usual release) is accepted with a warning naming the files to choose with it. Z-Image Omni
    (image-conditioned, with a SigLIP embedder) is refused by name.
    """
    if _is_omni(tensors):
        return False, "error", (
            f"{name} is Z-Image Omni (image editing and generation with a SigLIP image encoder). {_SUPPORTED}"
        ), None
    prefix = transformer_prefix(tensors)
    if prefix is None and not is_diffusers_transformer(tensors):
        return None
    embedder = f"{prefix}x_embedder.weight" if prefix is not None else "all_x_embedder.2-1.weight"
    shape = shape_of(tensors, embedder)
    if shape and len(shape) == 2 and shape[1] != 64:
        return False, "error", (
            f"{name} is a Z-Image-like transformer whose patches have {shape[1]} values, not Z-Image's 64 (16 latent "
            f"channels in 2x2 patches). {_SUPPORTED}"
        ), None
    parts = file_parts(tensors)
    layout = "diffusers' names" if prefix is None else "the original layout"
    missing = missing_parts_sentence(parts)
    message = f"Z-Image ({layout}, {len(tensors)} tensors): {SPLIT.holds(parts)}. {missing}".strip()
    return True, "warning" if missing else "info", message, None


def detect_folder(model_index: Mapping[str, Any]) -> bool:
    """A diffusers Z-Image folder: its ``model_index.json`` names ``ZImagePipeline``."""
    return str(model_index.get("_class_name", "")) == "ZImagePipeline"


# --------------------------------------------------------------------------- a split install, checked


def _prefix_of(part: str, table: Mapping[str, Any]) -> str:
    if part == "transformer":
        return transformer_prefix(table) or ""
    if part == "qwen3":
        return qwen3_prefix(table) or ""
    return components(table).get(part, "")  # type: ignore[call-overload]


def check_parts(
    denoiser: NamedTensors, text_encoders: Sequence[NamedTensors] = (), vae: NamedTensors | None = None
) -> PartsReport:
    """The seam's split-install check: the transformer's file, Qwen3-4B's and Flux's 16-channel VAE, each named in
    the message that finds it missing, twice or of the wrong kind. Another family's text encoder (CLIP, T5) is not
    used, and the notes say so."""
    others = [*text_encoders, *([vae] if vae is not None else [])]
    sources, problems, notes = SPLIT.check(denoiser, others, verdict=detect_file(denoiser[1], {}, denoiser[0]),
                                           file_parts=file_parts, prefix_of=_prefix_of)
    wanted = caption_width(denoiser[1])
    for file_name, table in others:
        width = qwen3_width(table)
        if width and wanted and width != wanted:
            problems.append(f"{file_name} is a Qwen3 of width {width}; the transformer reads captions {wanted} wide "
                            f"(Qwen3-4B: {QWEN3_4B_WIDTH}): choose {PART_FILES['qwen3']}.")
    return PartsReport(sources=sources, problems=tuple(problems), notes=tuple(notes))


LATENT_CHANNELS = FLOW_VAE_CHANNELS

# The estimator's table of full-size Z-Image, computed on ``meta`` by
# :func:`guitrainer.engine.families.zimage.spec.as_model_spec` (a test recomputes it and compares).
# fmt: off
SPEC = ModelSpec(
    family='zimage',
    denoiser=6154908736,
    text_encoders=(4022468096,),
    vae_encoder=34274208,
    vae_decoder=49545475,
    vae_channels=128,
    text_encoder_shapes=((2560, 9728, 36),),
    cross_attention_dim=2560,
    denoiser_lora={
        'attention': ((3840, 3840, 8, 0.0), (3840, 3840, 128, 0.25)),
        'attention_ff': ((3840, 3840, 8, 0.0), (3840, 3840, 128, 0.25), (3840, 10240, 4, 0.0), (3840, 10240, 64, 0.25), (10240, 3840, 2, 0.0), (10240, 3840, 32, 0.25)),
        'attention_ff_proj': ((256, 15360, 32, 0.0), (3840, 3840, 8, 0.0), (3840, 3840, 128, 0.25), (3840, 10240, 4, 0.0), (3840, 10240, 64, 0.25), (10240, 3840, 2, 0.0), (10240, 3840, 32, 0.25)),
    },
    text_encoder_lora={'attention': ((),), 'attention_ff': ((),), 'attention_ff_proj': ((),)},
    # the 2 noise refiners, the 2 context refiners, the 30 layers (precision.offload_blocks keeps a share of each)
    offload_blocks=((180910336,) * 2, (176962816,) * 2, (180910336,) * 30),
    quantisable=QuantisableLinears(weights=6142033920, rows=1840640, layers=270, largest=39321600),
    blocks=((2, 180910336, 3947520), (2, 176962816, 0), (30, 180910336, 3947520)),
    fp8_stored=(6142525440, 3633315840),
)
# fmt: on

FACTS = FamilyFacts(
    name="zimage",
    label="Z-Image",
    architecture="transformer",
    objective="flow",
    native_resolution=1024,
    latent_channels=LATENT_CHANNELS,
    latent_downscale=8,
    patch=2,
    text_encoders=("Qwen3-4B",),
    # the caption's tokens the transformer sees: ZImagePipeline drops the padding, so it is the prompt through the
    # chat template (~20 tokens of template; a long caption 100-250), padded to a multiple of 32 by the transformer
    text_tokens=256,
    trainable_text_encoders=(),  # Qwen3-4B stays frozen (ai-toolkit, musubi-tuner, DiffSynth-Studio)
    precision=PRECISION,
    base_model_version="z_image",  # musubi-tuner (kohya's Z-Image trainer)
    modelspec_architecture="Z-Image",  # musubi-tuner, OneTrainer: "Z-Image/lora"
    flow_defaults=FLOW_DEFAULTS,
    split_files=True,
    detect_file=detect_file,
    detect_folder=detect_folder,
    hub_patterns=("z-image", "z_image", "zimage"),
    spec=SPEC,
    check_parts=check_parts,
)
