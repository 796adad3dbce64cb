"""Flux.1 (dev and schnell) on paper: its facts, how its files are recognised, and the parts of a split install.

Black Forest Labs' FLUX.1 is a 12 B-parameter rectified-flow transformer (19 double-stream + 38 single-stream
blocks, hidden 3072) over a 16-channel VAE, conditioned on T5-XXL's hidden states and CLIP-L's pooled output.
Users keep it either as one file (BFL's ``flux1-dev.safetensors`` holds the transformer only; ComfyUI's
"checkpoint" files hold everything) or as a split install — the transformer, ``t5xxl_fp16.safetensors``,
``clip_l.safetensors`` and ``ae.safetensors`` — so this module recognises each of those files from its tensor
table alone (a safetensors header: names and shapes, no torch) and says in plain words which part is missing
or of the wrong kind.

The key names and shapes are BFL's original layout (``double_blocks.N.img_attn.qkv``…), the one the released
files, ComfyUI, Forge and kohya's sd-scripts share; diffusers' ``infer_diffusers_model_type`` and ComfyUI's
``detect_unet_config`` tell the variants apart by the same keys.
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

PartKind = Literal["transformer", "t5", "clip_l", "clip_g", "vae"]

#: the prefix ComfyUI / SAI "checkpoint" files put before the transformer's keys
TRANSFORMER_PREFIX = "model.diffusion_model."
#: where a ComfyUI checkpoint keeps each text encoder's keys (HF transformers layout below it)
CLIP_L_PREFIX = "text_encoders.clip_l.transformer."
T5_PREFIX = "text_encoders.t5xxl.transformer."
#: where single-file checkpoints keep the VAE (LDM layout below it); ``ae.safetensors`` has no prefix
VAE_PREFIXES = ("vae.", "first_stage_model.")

#: what the user reads for each part, and the file name BFL / ComfyUI ship it as
PART_LABELS: dict[str, str] = {
    "transformer": "the Flux transformer",
    "t5": "the T5-XXL text encoder",
    "clip_l": "the CLIP-L text encoder",
    "clip_g": "a CLIP-G text encoder",
    "vae": "the VAE",
}
PART_FILES: dict[str, str] = {
    "transformer": "flux1-dev.safetensors",
    "t5": "t5xxl_fp16.safetensors",
    "clip_l": "clip_l.safetensors",
    "vae": "ae.safetensors",
}
#: the parts a Flux.1 model is made of, in the order the messages name them
FLUX_PARTS: tuple[PartKind, ...] = ("transformer", "t5", "clip_l", "vae")

# Fingerprints (diffusers' CHECKPOINT_KEY_NAMES and infer_diffusers_model_type, ComfyUI's detect_unet_config),
# each checked with and without the checkpoint prefix. The later families reuse Flux.1's block names, so they
# are ruled out first, as diffusers does.
_FLUX_KEY = "double_blocks.0.img_attn.norm.key_norm.scale"
_FLUX_DIFFUSERS_KEYS = ("single_transformer_blocks.0.proj_mlp.weight", "transformer_blocks.0.attn.add_k_proj.weight")
_OTHER_FLUX_FAMILIES: tuple[tuple[str, str], ...] = (
    ("single_stream_modulation.lin.weight", "a FLUX.2 model"),
    ("early_stream_modulations.image.lin.weight", "a FLUX.3 model"),
)
#: a family of its own that keeps Flux.1's block names (``core/families/chroma.py`` takes its files): Flux.1's
#: detector steps aside for it (None), so the family that trains it answers
_CHROMA_KEY = "distilled_guidance_layer.in_proj.bias"
#: ``img_in``'s input channels other than 64 (16 latent channels x 2x2) name the image-conditioned variants
_CONDITIONED_VARIANTS = {384: "FLUX.1 Fill (inpainting)", 128: "FLUX.1 Depth or Canny (structure-conditioned)"}
_GUIDANCE_KEY = "guidance_in.in_layer.bias"

_T5_KEY = "encoder.block.0.layer.0.SelfAttention.q.weight"
_CLIP_KEY = "encoder.layers.0.self_attn.q_proj.weight"  # below ``text_model.`` in the HF layout (transformers 4)
_CLIP_POSITIONS = "embeddings.position_embedding.weight"
#: CLIP-G (OpenCLIP bigG's text tower, SDXL / SD 3.5) is 1280 wide; CLIP-L 768
CLIP_G_WIDTH = 1280
_VAE_KEYS = ("encoder.conv_in.weight", "decoder.conv_in.weight")
_VAE_OUT = "encoder.conv_out.weight"  # [2 x latent channels, …]: the mean and log-variance
_SUPPORTED = "This app trains Flux.1 dev and schnell (text to image)."

FLOW_DEFAULTS: dict[str, Any] = {
    "timestep_sampling": "shift",
    "discrete_flow_shift": 3.1582,
    "model_prediction_type": "raw",
    "weighting_scheme": "none",
    "source": (
        "kohya-ss/sd-scripts docs/flux_train_network.md, 'Recommended Settings': --timestep_sampling shift "
        "--discrete_flow_shift 3.1582 --model_prediction_type raw --guidance_scale 1.0 (weighting: sd-scripts' "
        "default 'uniform', i.e. none)"
    ),
}

PRECISION = PrecisionFacts(
    released="bf16",
    fp16_overflows=(
        "Flux's activations overflow fp16 in its transformer blocks (diffusers PR #9097 'Flux fp16 inference fix' "
        "clips the single blocks' hidden states and the double blocks' text states to ±65504; ComfyUI PR #8495 'Fix "
        "black images on some flux models in fp16'), and T5-XXL overflows fp16 in its feed-forward output "
        "(transformers #9295; transformers keeps T5's 'wo' in fp32). The clamps keep inference from making inf, "
        "not training exact: train Flux in bf16."
    ),
    recommended="bf16",
    sources=(
        "BFL released FLUX.1 in bf16: flux1-dev.safetensors is 23.8 GB for 11.9 B parameters (2 bytes each)",
        "https://github.com/huggingface/diffusers/pull/9097",
        "https://github.com/comfyanonymous/ComfyUI/pull/8495",
        "https://github.com/huggingface/transformers/issues/9295",
    ),
)


# --------------------------------------------------------------------------- reading a tensor table


def _shape(tensors: Mapping[str, Any], key: str) -> list[int] | None:
    """The shape of ``key`` from a safetensors header entry; None when absent or unknown (a pickle's key list)."""
    info = tensors.get(key)
    if isinstance(info, Mapping):
        shape = info.get("shape")
        return list(shape) if shape is not None else None
    return None


def transformer_prefix(tensors: Mapping[str, Any]) -> str | None:
    """``""`` or ``"model.diffusion_model."``: where a Flux.1 transformer's BFL-layout keys start in this file;
    None when it holds no BFL-layout Flux transformer."""
    for prefix in ("", TRANSFORMER_PREFIX):
        if prefix + _FLUX_KEY in tensors:
            return prefix
    return None


def is_diffusers_transformer(tensors: Mapping[str, Any]) -> bool:
    """A Flux transformer saved in diffusers' own names (``diffusion_pytorch_model.safetensors``)."""
    return all(k in tensors for k in _FLUX_DIFFUSERS_KEYS) and "x_embedder.weight" in tensors


def _other_family(tensors: Mapping[str, Any]) -> str | None:
    for key, what in _OTHER_FLUX_FAMILIES:
        if key in tensors or TRANSFORMER_PREFIX + key in tensors:
            return what
    return None


def _t5_prefix(tensors: Mapping[str, Any]) -> str | None:
    return next((p for p in ("", T5_PREFIX) if p + _T5_KEY in tensors), None)


CLIP_G_PREFIX = "text_encoders.clip_g.transformer."


def _clip_parts(tensors: Mapping[str, Any]) -> list[PartKind]:
    """The CLIP text encoders in this file: alone (HF layout, with or without transformers 4's ``text_model.``
    level) or under a ComfyUI checkpoint's ``text_encoders.clip_l/clip_g.transformer.``; L and G told apart
    by the prefix or the width (G is 1280 wide)."""
    kinds: list[PartKind] = []
    for container in ("", CLIP_L_PREFIX, CLIP_G_PREFIX):
        for level in ("text_model.", ""):
            prefix = container + level
            if prefix + _CLIP_KEY not in tensors:
                continue
            shape = _shape(tensors, prefix + _CLIP_POSITIONS) or _shape(tensors, prefix + _CLIP_KEY)
            wide = bool(shape) and shape[-1] == CLIP_G_WIDTH
            kind: PartKind = "clip_g" if container == CLIP_G_PREFIX or wide else "clip_l"
            if kind not in kinds:
                kinds.append(kind)
            break
    return kinds


def _vae_prefix(tensors: Mapping[str, Any]) -> str | None:
    return next((p for p in ("", *VAE_PREFIXES) if all(p + k in tensors for k in _VAE_KEYS)), None)


def file_parts(tensors: Mapping[str, Any]) -> tuple[PartKind, ...]:
    """Every part of a Flux.1 model one file holds: a split file one, a ComfyUI checkpoint several.

    ``tensors`` maps names to safetensors header entries (``{"shape": …}``) or to None when only the names are
    known. The text encoders and the VAE are recognised in the layouts their files use (HF transformers for
    T5 and CLIP, with or without CLIP's ``text_model.`` level; LDM / BFL for the VAE), and under the prefixes
    ComfyUI's checkpoints give them.
    """
    found: list[PartKind] = []
    if transformer_prefix(tensors) is not None or is_diffusers_transformer(tensors) or _other_family(tensors):
        found.append("transformer")
    if _t5_prefix(tensors) is not None:
        found.append("t5")
    found.extend(_clip_parts(tensors))
    if _vae_prefix(tensors) is not None:
        found.append("vae")
    return tuple(found)


def part_kind(tensors: Mapping[str, Any]) -> PartKind | None:
    """The part a file of a split install is: "transformer" (also for a file that holds more), "t5",
    "clip_l", "clip_g" or "vae"; None when it is none of them."""
    parts = file_parts(tensors)
    return parts[0] if parts else None


def vae_latent_channels(tensors: Mapping[str, Any]) -> int | None:
    """The latent channels of the VAE in this file (its encoder's last conv makes mean and log-variance: 2 x
    channels); None when unknown."""
    prefix = _vae_prefix(tensors)
    shape = _shape(tensors, f"{prefix}{_VAE_OUT}") if prefix is not None else None
    return shape[0] // 2 if shape else None


# --------------------------------------------------------------------------- detection (the seam's detectors)


def variant_of(tensors: Mapping[str, Any]) -> Literal["dev", "schnell"]:
    """dev has the guidance embedder (``guidance_in``), schnell does not: the test sd-scripts
    (``flux_utils.analyze_checkpoint_state``) and diffusers (``infer_diffusers_model_type``) make."""
    prefix = transformer_prefix(tensors)
    if prefix is None:  # diffusers names
        return "dev" if "time_text_embed.guidance_embedder.linear_1.bias" in tensors else "schnell"
    return "dev" if prefix + _GUIDANCE_KEY in tensors else "schnell"


def variant_of_base(base: str) -> Literal["dev", "schnell"] | None:
    """dev or schnell from the base model on disk, without loading it: a ``.safetensors`` file's header (its
    guidance embedder) or a diffusers folder's ``transformer/config.json`` (``guidance_embeds``); None when the
    path says neither (a hub id, an unreadable file)."""
    import json
    from pathlib import Path

    from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header

    path = Path(str(base)).expanduser()
    try:
        if path.is_dir():
            cfg = json.loads((path / "transformer" / "config.json").read_text(encoding="utf-8"))
            return "dev" if cfg.get("guidance_embeds") else "schnell"
        if path.is_file() and path.suffix.lower() == ".safetensors":
            tensors, _meta = read_safetensors_header(path)
            if transformer_prefix(tensors) is not None or is_diffusers_transformer(tensors):
                return variant_of(tensors)
    except (OSError, ValueError, CheckpointError):
        return None
    return None


def _refusal(tensors: Mapping[str, Any], metadata: Mapping[str, str], name: str, prefix: str) -> str | None:
    """Why this Flux.1 transformer cannot be trained here (an image-conditioned variant), or None."""
    img_in = _shape(tensors, f"{prefix}img_in.weight") or _shape(tensors, "x_embedder.weight")
    channels = img_in[1] if img_in and len(img_in) == 2 else None
    if channels in _CONDITIONED_VARIANTS:
        return (
            f"{name} is {_CONDITIONED_VARIANTS[channels]}: its transformer takes {channels} input channels (an image "
            f"to condition on beside the latents), not 64. {_SUPPORTED}"
        )
    if channels is not None and channels != 64:
        return f"{name} is a Flux-like transformer with {channels} input channels, not Flux.1's 64. {_SUPPORTED}"
    said = " ".join([name, *metadata.values()]).lower()
    if "kontext" in said:
        return (
            f"{name} is FLUX.1 Kontext (image editing; it is told from dev only by its name or metadata, which say "
            f"Kontext). A text-to-image LoRA is trained on FLUX.1 dev. {_SUPPORTED}"
        )
    return None


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def missing_parts_sentence(have: Sequence[str]) -> str:
    """Which files to choose with a Flux file that lacks parts ("" when it holds every part)."""
    missing = [p for p in FLUX_PARTS if p not in have]
    if not missing:
        return ""
    named = _listed([f"{PART_LABELS[p].removeprefix('the ')} ({PART_FILES[p]})" for p in missing])
    return f"Choose its {named} {'file' if len(missing) == 1 else 'files'} with it."


def _holds(have: Sequence[str]) -> str:
    others = [PART_LABELS[p] for p in FLUX_PARTS[1:] if p in have]
    if len(others) == len(FLUX_PARTS) - 1:
        return "the transformer, both text encoders and the VAE"
    return "the transformer with " + _listed(others) if others else "the transformer only"


def detect_file(tensors: Mapping[str, Any], metadata: Mapping[str, str], name: str) -> FileVerdict | None:
    """What a single file says of itself, if it is a Flux-family transformer; None for anything else.

    Flux.1 dev and schnell are accepted, with or without ComfyUI's ``model.diffusion_model.`` prefix, in BFL's
    layout or diffusers' names; a file without its text encoders and VAE (BFL's own release) is accepted with
    a warning naming the files to choose with it. A Chroma file is left to Chroma's detector (None). FLUX.1 Fill,
    Depth/Canny and Kontext and FLUX.2/3 are refused, each by name.
    """
    if _CHROMA_KEY in tensors or TRANSFORMER_PREFIX + _CHROMA_KEY in tensors:
        return None
    other = _other_family(tensors)
    if other:
        return False, "error", f"{name} is {other}, not Flux.1. {_SUPPORTED}", None
    prefix = transformer_prefix(tensors)
    if prefix is None and not is_diffusers_transformer(tensors):
        return None
    refusal = _refusal(tensors, metadata, name, prefix or "")
    if refusal:
        return False, "error", refusal, None
    variant = variant_of(tensors)
    parts = file_parts(tensors)
    layout = "diffusers' names" if prefix is None else "BFL's layout"
    missing = missing_parts_sentence(parts)
    message = f"Flux.1 {variant} ({layout}, {len(tensors)} tensors): {_holds(parts)}. {missing}".strip()
    return True, "warning" if missing else "info", message, None


def detect_folder(model_index: Mapping[str, Any]) -> bool:
    """A diffusers folder of FLUX.1 dev or schnell: its ``model_index.json`` names ``FluxPipeline`` (Fill,
    Kontext, ControlNet and the rest have their own pipeline classes)."""
    return str(model_index.get("_class_name", "")) == "FluxPipeline"


# --------------------------------------------------------------------------- a split install, checked


def split_install_problems(files: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """What is wrong with the files chosen as one Flux.1 model, in plain words; empty when they make one.

    ``files`` are ``(name, tensors)``: the transformer's file first, then the others in any order (each is
    recognised from its tensors). Each message names the file and the part: a file that is no part of Flux, one
    of the wrong kind (CLIP-G, a 4-channel VAE), a part chosen twice, a part missing.
    """
    problems: list[str] = []
    have: dict[str, str] = {}
    for index, (name, tensors) in enumerate(files):
        parts = file_parts(tensors)
        verdict = detect_file(tensors, {}, name) if index == 0 else None
        if verdict is not None and not verdict[0]:
            problems.append(verdict[2])
        if index == 0 and "transformer" not in parts:
            what = f"{PART_LABELS[parts[0]]} file" if parts else "no part of a Flux model"
            problems.append(f"{name} is {what}, not the Flux transformer: choose the transformer file first "
                            f"(e.g. {PART_FILES['transformer']}).")
        if not parts:
            problems.append(f"{name} is no part of a Flux model (no transformer, T5-XXL, CLIP-L or VAE tensors).")
            continue
        for part in parts:
            if part == "clip_g":
                problems.append(f"{name} is a CLIP-G text encoder (SDXL, SD 3.5); Flux.1 uses CLIP-L: choose "
                                f"{PART_FILES['clip_l']} instead.")
                continue
            if part == "vae":
                channels = vae_latent_channels(tensors)
                if channels is not None and channels != 16:
                    problems.append(f"{name} is a {channels}-channel VAE (SD 1.5 / SDXL); Flux.1's VAE has 16 "
                                    f"channels: choose {PART_FILES['vae']}.")
                    continue
            if part in have and have[part] != name:
                problems.append(f"{PART_LABELS[part][0].upper()}{PART_LABELS[part][1:]} was chosen twice: "
                                f"{have[part]} and {name}; keep one.")
                continue
            have.setdefault(part, name)
    missing = [p for p in FLUX_PARTS if p not in have]
    if missing and "transformer" in have:
        problems.append("Missing: " + "; ".join(f"{PART_LABELS[p]} ({PART_FILES[p]})" for p in missing)
                        + f": choose {'its file' if len(missing) == 1 else 'their files'} too (Flux.1 is the "
                        "transformer, T5-XXL, CLIP-L and the VAE).")
    return problems


#: the estimator's table of full-size FLUX.1 dev, computed once from the architecture on meta by
#: ``engine/families/flux1/spec.py`` (``as_model_spec(flux_spec())``; ``tests/test_flux1_family.py`` recomputes it).
#: Its 4-entry LoRA rows keep the image tokens and drop the text's (see ``as_model_spec``); the parameter counts
#: are exact.
# fmt: off
SPEC = ModelSpec(
    family='flux1',
    denoiser=11901408320,
    text_encoders=(123060480, 4762310656),
    vae_encoder=34274208,
    vae_decoder=49545475,
    vae_channels=128,
    text_encoder_shapes=((768, 3072, 12), (4096, 10240, 24)),
    cross_attention_dim=4096,
    denoiser_lora={
        'attention': ((3072, 3072, 76, 0.0), (3072, 3072, 190, 0.25)),
        'attention_ff': ((3072, 3072, 76, 0.0), (3072, 3072, 190, 0.25), (3072, 12288, 19, 0.0), (3072, 12288, 57, 0.25), (12288, 3072, 19, 0.0), (12288, 3072, 19, 0.25), (15360, 3072, 38, 0.25)),
        'attention_ff_proj': ((3072, 3072, 76, 0.0), (3072, 3072, 190, 0.25), (3072, 9216, 38, 0.0), (3072, 12288, 19, 0.0), (3072, 12288, 57, 0.25), (3072, 18432, 38, 0.0), (12288, 3072, 19, 0.0), (12288, 3072, 19, 0.25), (15360, 3072, 38, 0.25)),
    },
    text_encoder_lora={
        'attention': (((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)), ()),
        'attention_ff': (((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)), ()),
        'attention_ff_proj': (((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)), ()),
    },
    # the 19 double-stream blocks, then the 38 single-stream ones (precision.offload_blocks keeps a share of each)
    offload_blocks=((339831296,) * 19, (141591808,) * 38),
    quantisable=QuantisableLinears(weights=11834228736, rows=3035136, layers=494, largest=56623104),
    blocks=((19, 339831296, 113283072), (38, 141591808, 28320768)),
    fp8_stored=(11837263872, 85017600, 3623878656),
)
# fmt: on


def check_parts(
    denoiser: NamedTensors, text_encoders: Sequence[NamedTensors] = (), vae: NamedTensors | None = None
) -> PartsReport:
    """The seam's split-install check (:attr:`FamilyFacts.check_parts`): :func:`split_install_problems` of the
    transformer's file, the text encoders' and the VAE's."""
    files = [denoiser, *text_encoders, *([vae] if vae is not None else [])]
    return PartsReport(problems=tuple(split_install_problems(files)))


FACTS = FamilyFacts(
    name="flux1",
    label="Flux.1",
    architecture="transformer",
    objective="flow",
    native_resolution=1024,
    latent_channels=16,
    latent_downscale=8,
    patch=2,
    text_encoders=("CLIP-L", "T5-XXL"),
    text_tokens=512,  # dev's T5 length (sd-scripts' t5xxl_max_token_length; schnell's 256 is estimated as dev's)
    # T5 stays frozen: sd-scripts' flux_train_network.py, ``self.train_t5xxl = False  # default is False``
    trainable_text_encoders=(0,),
    precision=PRECISION,
    base_model_version="flux1",  # sd-scripts library/flux_utils.py MODEL_VERSION_FLUX_V1
    # sd-scripts library/sai_model_spec.py: "flux-1-dev" / "flux-1-schnell" (+ "/lora"); schnell is told apart
    # by the file (no guidance_in), so the LoRA's metadata says which
    modelspec_architecture="flux-1-dev",
    flow_defaults=FLOW_DEFAULTS,
    split_files=True,
    detect_file=detect_file,
    detect_folder=detect_folder,
    hub_patterns=("flux.1", "flux1", "flux-1"),
    spec=SPEC,
    check_parts=check_parts,
)
