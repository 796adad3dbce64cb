"""Qwen-Image (Qwen/Qwen-Image, Qwen-Image-2512) on paper: its facts, how its files are recognised, and the parts of a
split install.

Qwen-Image is a 20.4 B-parameter dual-stream flow-matching DiT (60 ``QwenImageTransformerBlock`` of width 3072, an
image and a text stream with joint attention) over a 16-channel 3-D causal VAE of its own (Wan 2.1's, with its own
latent mean and spread per channel), conditioned on the last hidden state of Qwen2.5-VL-7B's language model reading
the prompt through a system template. Users keep it as ComfyUI's split files (``qwen_image_bf16.safetensors`` /
``qwen_image_fp8_e4m3fn.safetensors`` in diffusers' names, ``qwen_2.5_vl_7b.safetensors`` in transformers' older
Qwen2.5-VL names, ``qwen_image_vae.safetensors`` in Wan's original names) or as a diffusers folder
(``QwenImagePipeline``); this module tells those files apart from their tensor tables alone (no torch).

The transformer's fingerprint is the pair of modulation Linears of a block (``img_mod.1`` / ``txt_mod.1``) beside
``txt_norm`` (SD 3's joint blocks have neither); its VAE's, 5-D convolution kernels (Flux's VAE is 2-D).
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

PartKind = Literal["transformer", "qwen25vl", "vae"]

TRANSFORMER_PREFIX = "model.diffusion_model."
#: where Qwen2.5-VL's language model's keys start: ComfyUI's checkpoint layout, transformers 5's names
#: (``model.language_model.``), the older names of the released files (``model.``), or a bare text model's
QWEN25_PREFIXES = (
    "text_encoders.qwen25_7b.transformer.model.", "model.language_model.", "language_model.", "model.", "",
)
_QWEN25_BIAS = "layers.0.self_attn.q_proj.bias"  # Qwen2 / Qwen2.5 have q/k/v biases; Qwen3 has none
_QWEN3_NORM = "layers.0.self_attn.q_norm.weight"  # … and a q norm, which Qwen2.5 has not
_QWEN25_EMBED = "embed_tokens.weight"
PART_LABELS: dict[str, str] = {
    "transformer": "the Qwen-Image transformer",
    "qwen25vl": "the Qwen2.5-VL-7B text encoder",
    "vae": "the Qwen-Image VAE",
}
PART_FILES: dict[str, str] = {
    "transformer": "qwen_image_bf16.safetensors",
    "qwen25vl": "qwen_2.5_vl_7b.safetensors",
    "vae": "qwen_image_vae.safetensors",
}
QWENIMAGE_PARTS: tuple[PartKind, ...] = ("transformer", "qwen25vl", "vae")
#: Qwen2.5-VL-7B's width: the transformer's ``joint_attention_dim``
QWEN25_7B_WIDTH = 3584

_TRANSFORMER_KEYS = ("txt_norm.weight", "img_in.weight", "transformer_blocks.0.img_mod.1.weight",
                     "transformer_blocks.0.txt_mod.1.weight")
#: the VAE in diffusers' names (``AutoencoderKLQwenImage``) and in Wan's original names (ComfyUI's file)
_VAE_DIFFUSERS = ("encoder.conv_in.weight", "post_quant_conv.weight", "decoder.norm_out.gamma")
_VAE_ORIGINAL = ("encoder.conv1.weight", "conv2.weight", "decoder.head.0.gamma")
_SUPPORTED = "This app trains Qwen-Image and Qwen-Image-2512 (text to image)."

FLOW_DEFAULTS: dict[str, Any] = {
    "timestep_sampling": "shift",
    "discrete_flow_shift": 2.2,
    "model_prediction_type": "raw",
    "weighting_scheme": "none",
    "source": (
        "musubi-tuner's Qwen-Image guide (--timestep_sampling shift --discrete_flow_shift 2.2: \"typically around 2.2 "
        "for 1328x1328\"), the shift Qwen-Image's own scheduler reaches at 1024-1328 px (exponential dynamic "
        "shifting from 0.5 at 256 tokens to 0.9 at 8192: 2.0-2.3)"
    ),
}

PRECISION = PrecisionFacts(
    released="bf16",
    fp16_overflows=(
        "Qwen-Image was released and is run in bf16 (its model card loads it with torch_dtype=torch.bfloat16, "
        "ComfyUI ships qwen_image_bf16 and an fp8 copy, no fp16); its Qwen2.5-VL-7B text encoder is a bf16 LLM whose "
        "largest activations exceed fp16's range. Train Qwen-Image in bf16."
    ),
    recommended="bf16",
    sources=(
        "Qwen released Qwen-Image in bf16: qwen_image_bf16.safetensors is 40.9 GB for 20.4 B parameters (2 bytes each)",
        "https://huggingface.co/Qwen/Qwen-Image",
        "https://huggingface.co/Comfy-Org/Qwen-Image_ComfyUI",
    ),
)


# --------------------------------------------------------------------------- reading a tensor table


def transformer_prefix(tensors: Mapping[str, Any]) -> str | None:
    """``""`` or ``"model.diffusion_model."``: where a Qwen-Image transformer's keys start; None when the file holds
    none."""
    for prefix in ("", TRANSFORMER_PREFIX):
        if all(prefix + k in tensors for k in _TRANSFORMER_KEYS):
            return prefix
    return None


def qwen25_prefix(tensors: Mapping[str, Any]) -> str | None:
    """Where Qwen2.5-VL's language model's keys start in this file (see :data:`QWEN25_PREFIXES`), None when it has
    none (a Qwen3, which Z-Image reads, is not one)."""
    for prefix in QWEN25_PREFIXES:
        if (prefix + _QWEN25_BIAS in tensors and prefix + _QWEN25_EMBED in tensors
                and prefix + _QWEN3_NORM not in tensors):
            return prefix
    return None


def qwen25_width(tensors: Mapping[str, Any]) -> int | None:
    """The hidden width of the Qwen2.5 language model in this file, None when unknown."""
    prefix = qwen25_prefix(tensors)
    shape = shape_of(tensors, f"{prefix}{_QWEN25_EMBED}") if prefix is not None else None
    return shape[-1] if shape else None


def caption_width(tensors: Mapping[str, Any]) -> int | None:
    """The caption width the transformer in this file reads (its ``txt_in``'s input), None when unknown."""
    for key in ("txt_in.weight", TRANSFORMER_PREFIX + "txt_in.weight"):
        shape = shape_of(tensors, key)
        if shape and len(shape) == 2:
            return shape[1]
    return None


def vae_prefix(tensors: Mapping[str, Any]) -> str | None:
    """Where a Qwen-Image (3-D, Wan-style) VAE's keys start ("" or ComfyUI's ``vae.``), None when there is none."""
    for prefix in ("", "vae."):
        for keys in (_VAE_DIFFUSERS, _VAE_ORIGINAL):
            if all(prefix + k in tensors for k in keys):
                shape = shape_of(tensors, prefix + keys[0])
                if shape is None or len(shape) == 5:  # a pickle's names have no shapes: the names decide
                    return prefix
    return None


def vae_is_original(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """The VAE is in Wan's original names (ComfyUI's ``qwen_image_vae.safetensors``), not diffusers'."""
    return all(prefix + k in tensors for k in _VAE_ORIGINAL)


def file_parts(tensors: Mapping[str, Any]) -> tuple[str, ...]:
    """Every part of a Qwen-Image model one file holds ("transformer", "qwen25vl", "vae"), and the flow families'
    other parts ("clip_l", "t5", Flux's 2-D VAE as "flux_vae"), which Qwen-Image does not use."""
    found: list[str] = []
    if transformer_prefix(tensors) is not None:
        found.append("transformer")
    if qwen25_prefix(tensors) is not None:
        found.append("qwen25vl")
    if vae_prefix(tensors) is not None:
        found.append("vae")
    for component in components(tensors):
        name = "flux_vae" if component == "vae" else component
        if name == "flux_vae" and "vae" in found:
            continue
        if name not in found:
            found.append(name)
    return tuple(found)


# --------------------------------------------------------------------------- detection (the seam's detectors)


SPLIT = SplitParts("Qwen-Image", QWENIMAGE_PARTS, PART_LABELS, PART_FILES)


def missing_parts_sentence(have: Sequence[str]) -> str:
    """Which files to choose with a Qwen-Image file that lacks parts ("" when it holds every part)."""
    return SPLIT.missing_sentence(have)


def detect_file(tensors: Mapping[str, Any], metadata: Mapping[str, str], name: str) -> FileVerdict | None:
    """What a single file says of itself, if it is a Qwen-Image transformer; None for anything else.

    diffusers' names (the released files and ComfyUI's keep them), with or without ComfyUI's checkpoint prefix; a
    file without its text encoder and VAE (the usual release) is accepted with a warning naming the files to choose
    with it. A transformer whose patches are not Qwen-Image's 64 values is refused.
    """
    prefix = transformer_prefix(tensors)
    if prefix is None:
        return None
    shape = shape_of(tensors, f"{prefix}img_in.weight")
    if shape and len(shape) == 2 and shape[1] != 64:
        return False, "error", (
            f"{name} is a Qwen-Image-like transformer whose patches have {shape[1]} values, not Qwen-Image's 64 (16 "
            f"latent channels in 2x2 patches). {_SUPPORTED}"
        ), None
    parts = file_parts(tensors)
    missing = missing_parts_sentence(parts)
    message = f"Qwen-Image ({len(tensors)} tensors): {SPLIT.holds(parts)}. {missing}".strip()
    return True, "warning" if missing else "info", message, None


def detect_folder(model_index: Mapping[str, Any]) -> bool:
    """A diffusers Qwen-Image folder: its ``model_index.json`` names ``QwenImagePipeline``."""
    return str(model_index.get("_class_name", "")) == "QwenImagePipeline"


# --------------------------------------------------------------------------- a split install, checked


def _prefix_of(part: str, table: Mapping[str, Any]) -> str:
    if part == "transformer":
        return transformer_prefix(table) or ""
    if part == "qwen25vl":
        return qwen25_prefix(table) or ""
    if part == "vae":
        return vae_prefix(table) or ""
    return components(table).get(part, "")  # type: ignore[call-overload]


def check_parts(
    denoiser: NamedTensors, text_encoders: Sequence[NamedTensors] = (), vae: NamedTensors | None = None
) -> PartsReport:
    """The seam's split-install check: the transformer's file, Qwen2.5-VL-7B's and Qwen-Image's own 3-D VAE, each
    named in the message that finds it missing, twice or of the wrong kind (Flux's 2-D VAE is named as such)."""
    others = [*text_encoders, *([vae] if vae is not None else [])]
    sources, problems, notes = SPLIT.check(denoiser, others, verdict=detect_file(denoiser[1], {}, denoiser[0]),
                                           file_parts=file_parts, prefix_of=_prefix_of)
    wanted = caption_width(denoiser[1])
    for file_name, table in others:
        width = qwen25_width(table)
        if width and wanted and width != wanted:
            problems.append(f"{file_name} is a Qwen2.5 of width {width}; the transformer reads captions {wanted} wide "
                            f"(Qwen2.5-VL-7B: {QWEN25_7B_WIDTH}): choose {PART_FILES['qwen25vl']}.")
        if "flux_vae" in file_parts(table):
            notes[:] = [n for n in notes if not n.startswith(f"{file_name} is ")]
            problems.append(f"{file_name} is a 2-D image VAE (Flux's or SD 3's); Qwen-Image decodes with its own 3-D "
                            f"VAE: choose {PART_FILES['vae']}.")
    return PartsReport(sources=sources, problems=tuple(problems), notes=tuple(notes))


LATENT_CHANNELS = FLOW_VAE_CHANNELS

# The estimator's table of full-size Qwen-Image, computed on ``meta`` by
# :func:`guitrainer.engine.families.qwenimage.spec.as_model_spec` (a test recomputes it and compares).
# fmt: off
SPEC = ModelSpec(
    family='qwenimage',
    denoiser=20430401088,
    text_encoders=(7070619136,),
    vae_encoder=53596928,
    vae_decoder=73295603,
    vae_channels=96,
    text_encoder_shapes=((3584, 18944, 28),),
    cross_attention_dim=3584,
    denoiser_lora={
        'attention': ((3072, 3072, 240, 0.0), (3072, 3072, 240, 0.25)),
        'attention_ff': ((3072, 3072, 240, 0.0), (3072, 3072, 240, 0.25), (3072, 12288, 60, 0.0), (3072, 12288, 60, 0.25), (12288, 3072, 60, 0.0), (12288, 3072, 60, 0.25)),
        'attention_ff_proj': ((3072, 3072, 240, 0.0), (3072, 3072, 240, 0.25), (3072, 12288, 60, 0.0), (3072, 12288, 60, 0.25), (3072, 18432, 120, 0.0), (12288, 3072, 60, 0.0), (12288, 3072, 60, 0.25)),
    },
    text_encoder_lora={'attention': ((),), 'attention_ff': ((),), 'attention_ff_proj': ((),)},
    # the 60 transformer blocks (precision.offload_blocks keeps a share of them)
    offload_blocks=((339831296,) * 60,),
    quantisable=QuantisableLinears(weights=20384317440, rows=5529600, layers=840, largest=56623104),
    blocks=((60, 339831296, 113283072),),
    fp8_stored=(20389847040, 6525417472),
)
# fmt: on

FACTS = FamilyFacts(
    name="qwenimage",
    label="Qwen-Image",
    architecture="transformer",
    objective="flow",
    native_resolution=1328,  # Qwen-Image's model card's 1:1 size (musubi-tuner's metadata default)
    latent_channels=LATENT_CHANNELS,
    latent_downscale=8,
    patch=2,
    text_encoders=("Qwen2.5-VL-7B",),
    # the caption's tokens after the system template is dropped (QwenImagePipeline keeps only the real ones): a short
    # caption 10-30, a long one 100-250
    text_tokens=256,
    trainable_text_encoders=(),  # Qwen2.5-VL stays frozen (musubi-tuner, ai-toolkit, diffusion-pipe, OneTrainer)
    precision=PRECISION,
    base_model_version="qwen_image",  # musubi-tuner (kohya's Qwen-Image trainer), ai-toolkit
    modelspec_architecture="Qwen-Image",  # musubi-tuner, OneTrainer: "Qwen-Image/lora"
    flow_defaults=FLOW_DEFAULTS,
    split_files=True,
    detect_file=detect_file,
    detect_folder=detect_folder,
    hub_patterns=("qwen-image", "qwen_image", "qwenimage"),
    spec=SPEC,
    check_parts=check_parts,
    vae_file=lambda tensors: file_parts(tensors) == ("vae",),
)
