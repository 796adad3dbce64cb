"""Stable Diffusion 3.5 (Large, Medium) and SD 3 Medium on paper: what their files look like, which model a file
is, and the facts the precision rules and the flow-matching defaults come from (no torch).

The transformer is Stability's MMDiT: ``joint_blocks.N.{x_block,context_block}`` with fused ``attn.qkv`` layers,
under ``model.diffusion_model.`` in Stability's and ComfyUI's checkpoints and bare in a transformer-only file.
Its width is 64 × depth (ComfyUI's ``detect_unet_config`` and sd-scripts' ``analyze_state_dict_state`` both build
``depth = x_embedder.proj.weight.shape[0] // 64`` blocks). The three released models differ in structure, which is
how sd-scripts (``library/sd3_utils.py`` ``analyze_state_dict_state``) names them, and how this module does:

* no qk-norm (``joint_blocks.0.context_block.attn.ln_k.weight`` absent): SD 3 Medium, "medium";
* qk-norm and ``x_block.attn2`` layers (the dual attention of blocks 0–12): SD 3.5 Medium, "5-medium";
* qk-norm, no ``attn2``: SD 3.5 Large (and Large Turbo, the same architecture), "5-large".

Depth then says whether it is the released size (38 blocks for Large, 24 for the Mediums); another depth of the
same structure trains the same way and is said to be one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from guitrainer.core.families import parts
from guitrainer.core.families.facts import (
    FamilyFacts,
    FileVerdict,
    ModelSpec,
    NamedTensors,
    PartsReport,
    PrecisionFacts,
    QuantisableLinears,
)

#: the prefix of the transformer's keys in Stability's and ComfyUI's checkpoints
MMDIT_PREFIX = "model.diffusion_model."
#: the head width of every MMDiT (hidden = 64 × depth)
HEAD_DIM = 64
#: tokens of each CLIP's sequence, and of T5's as sd-scripts (``--t5xxl_max_token_length``) and the diffusers
#: pipeline (``max_sequence_length``) default to
CLIP_TOKENS = 77
T5_TOKENS = 256

PartKind = Literal["transformer", "clip_l", "clip_g", "t5", "vae"]
_REQUIRED = ("x_embedder.proj.weight", "pos_embed", "context_embedder.weight", "t_embedder.mlp.0.weight",
             "y_embedder.mlp.0.weight", "final_layer.linear.weight")
_BLOCK = re.compile(r"^joint_blocks\.(\d+)\.")
_ATTN2 = re.compile(r"^joint_blocks\.(\d+)\.x_block\.attn2\.qkv\.weight$")


@dataclass(frozen=True)
class Variant:
    """One of the MMDiT models, as sd-scripts names it (``mmdit.model_type``).

    ``version`` is sd-scripts' ``ss_base_model_version``; ``architecture`` SAI ModelSpec's id, as SwarmUI (whose
    author co-wrote the ModelSpec) lists them (``stable-diffusion-v3.5-large``, …; sd-scripts writes
    ``stable-diffusion-3-5-large``, which no reader's table we found holds — SwarmUI remaps only its older
    ``stable-diffusion-3-3-5-large`` spelling). ``depth`` is the released model's; ``config`` the shipped
    transformer config folder (``resources/models/sd35/<config>``).
    """

    version: str
    label: str
    architecture: str
    depth: int
    config: str


VARIANTS: dict[str, Variant] = {
    "5-large": Variant("5-large", "SD 3.5 Large", "stable-diffusion-v3.5-large", 38, "transformer_large"),
    "5-medium": Variant("5-medium", "SD 3.5 Medium", "stable-diffusion-v3.5-medium", 24, "transformer_medium"),
    "medium": Variant("medium", "SD 3 Medium", "stable-diffusion-v3-medium", 24, ""),
}


@dataclass(frozen=True)
class MmditShape:
    """What an MMDiT's tensor names and shapes say about it (``config_from`` in the engine builds the diffusers
    config from this).

    Attributes:
        hidden: the width (``x_embedder.proj`` outputs); the depth rule wants ``blocks == hidden // 64``.
        blocks: how many ``joint_blocks`` the file holds.
        qk_norm: RMS-normed queries and keys (SD 3.5).
        dual_attention_layers: the blocks with a second image self-attention (``x_block.attn2``; SD 3.5 Medium).
        in_channels, patch: the latent channels and the patch side ``x_embedder.proj`` takes.
        out_channels: ``final_layer.linear`` outputs / patch².
        pos_embed_max_size: the side of the learned position grid (√ of ``pos_embed``'s tokens).
        joint_attention_dim: the text embedding width (4096: T5-XXL's; CLIP's 2048 is zero-padded to it).
        pooled_projection_dim: CLIP-L's + CLIP-G's pooled widths (2048).
        parameters: the transformer's parameters without the ``pos_embed`` grid (0 when shapes are unknown).
    """

    hidden: int
    blocks: int
    qk_norm: bool
    dual_attention_layers: tuple[int, ...]
    in_channels: int
    patch: int
    out_channels: int
    pos_embed_max_size: int
    joint_attention_dim: int
    pooled_projection_dim: int
    parameters: int = 0

    @property
    def depth(self) -> int:
        return self.hidden // HEAD_DIM

    @property
    def version(self) -> str:
        """sd-scripts' name of the model (``analyze_state_dict_state``): "5-large", "5-medium" or "medium"."""
        if not self.qk_norm:
            return "medium"
        return "5-medium" if self.dual_attention_layers else "5-large"

    @property
    def variant(self) -> Variant:
        return VARIANTS[self.version]


def mmdit_prefix(tensors: Mapping[str, Any]) -> str | None:
    """The prefix the file's MMDiT keys carry ("model.diffusion_model." or ""), None when it holds no MMDiT."""
    for prefix in (MMDIT_PREFIX, ""):
        if f"{prefix}joint_blocks.0.x_block.attn.qkv.weight" in tensors and f"{prefix}x_embedder.proj.weight" in tensors:
            return prefix
    return None


def mmdit_keys(tensors: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The MMDiT's entries with ``prefix`` removed (a checkpoint's VAE and text encoders left out)."""
    if not prefix:
        others = tuple(p for ps in parts.CHECKPOINT_PREFIXES.values() for p in ps if p)
        return {k: v for k, v in tensors.items() if not k.startswith(others)}
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def mmdit_shape(tensors: Mapping[str, Any]) -> MmditShape | str:
    """The structure of an MMDiT from its keys (no prefix), or a sentence saying what is wrong with it."""
    missing = [k for k in _REQUIRED if k not in tensors]
    if missing:
        return f"its transformer is incomplete ({missing[0]} is missing; a damaged or partial file?)"
    blocks = sorted({int(m.group(1)) for k in tensors if (m := _BLOCK.match(k))})
    if blocks != list(range(len(blocks))):
        return f"its transformer's joint blocks are not numbered 0..{len(blocks) - 1} (a damaged or merged file?)"
    shape = parts.shape_of
    x_embed = shape(tensors, "x_embedder.proj.weight")
    if x_embed is None:  # names only (a pickle): the released structure is assumed, the loader checks the shapes
        return MmditShape(
            hidden=HEAD_DIM * len(blocks), blocks=len(blocks), qk_norm="joint_blocks.0.context_block.attn.ln_k.weight" in tensors,
            dual_attention_layers=tuple(sorted(int(m.group(1)) for k in tensors if (m := _ATTN2.match(k)))),
            in_channels=16, patch=2, out_channels=16, pos_embed_max_size=0, joint_attention_dim=4096, pooled_projection_dim=2048,
        )
    hidden, in_channels, patch = x_embed[0], x_embed[1], x_embed[2]
    final = shape(tensors, "final_layer.linear.weight") or (0,)
    pos = shape(tensors, "pos_embed") or (1, 0, hidden)
    params = sum(math.prod(shape(tensors, k) or ()) for k in tensors if k != "pos_embed")
    return MmditShape(
        hidden=hidden,
        blocks=len(blocks),
        qk_norm="joint_blocks.0.context_block.attn.ln_k.weight" in tensors,
        dual_attention_layers=tuple(sorted(int(m.group(1)) for k in tensors if (m := _ATTN2.match(k)))),
        in_channels=in_channels,
        patch=patch,
        out_channels=final[0] // (patch * patch),
        pos_embed_max_size=round(math.sqrt(pos[1])),
        joint_attention_dim=(shape(tensors, "context_embedder.weight") or (0, 0))[1],
        pooled_projection_dim=(shape(tensors, "y_embedder.mlp.0.weight") or (0, 0))[1],
        parameters=params,
    )


def _structure_problem(s: MmditShape) -> str | None:
    """What makes an MMDiT untrainable here or unreadable by the clients, None when nothing does."""
    if s.hidden % HEAD_DIM or s.blocks != s.depth:
        return (
            f"its transformer has {s.blocks} joint blocks of width {s.hidden}, but an MMDiT of width {s.hidden} has "
            f"{s.hidden // HEAD_DIM} (width = 64 × blocks: ComfyUI and sd-scripts build it that way, so neither could "
            "use a LoRA made on it)"
        )
    if s.in_channels != 16:
        return (
            f"its transformer takes {s.in_channels} input channels, not 16 (a ControlNet, inpainting or other "
            "conditioned variant): use the plain text-to-image model"
        )
    return None


def describe_mmdit(s: MmditShape) -> str:
    """"SD 3.5 Large (38 joint blocks, 8.1 B parameters)", or the same for an unreleased depth."""
    v = s.variant
    size = f", {s.parameters / 1e9:.1f} B parameters" if s.parameters > 1e8 else (
        f", {s.parameters / 1e6:.1f} M parameters" if s.parameters else "")
    if s.depth == v.depth:
        return f"{v.label} ({s.blocks} joint blocks{size})"
    return f"an {v.label}-type MMDiT of {s.blocks} joint blocks{size} (the released model has {v.depth})"


# --------------------------------------------------------------------------- detection


def detect_file(tensors: Mapping[str, Any], metadata: Mapping[str, str], name: str) -> FileVerdict | None:
    """A single file's verdict: an SD 3 / 3.5 checkpoint or transformer (what it holds, what is missing), a clear
    refusal of an SD 3-shaped file this app cannot train on, or None when it is no SD 3 file at all."""
    if any(k.startswith("lora_unet_joint_blocks_") or (".joint_blocks." in k and "lora_" in k) for k in tensors):
        return False, "error", (
            f"{name} is a LoRA for SD 3 / 3.5, not a base model. Choose the checkpoint it was made for; to keep "
            "training this LoRA, set it as 'Continue from LoRA' instead."
        ), None
    prefix = mmdit_prefix(tensors)
    if prefix is None:
        if "pos_embed.proj.weight" in tensors and "transformer_blocks.0.attn.add_k_proj.weight" in tensors:
            return False, "error", (
                f"{name} holds an SD 3 transformer in the diffusers layout (transformer_blocks.*): choose the "
                "diffusers folder it came from (the one with model_index.json), or Stability's single-file checkpoint."
            ), None
        return None
    keys = mmdit_keys(tensors, prefix)
    if "scaled_fp8" in keys or any(k.endswith(".scale_weight") for k in keys):
        return False, "error", (
            f"{name} is a scaled-fp8 SD 3 file (ComfyUI's *_fp8_scaled): its weights need per-layer scales this app "
            "does not apply. Use the bf16 / fp16 release: fp8 storage is a setting here ('Base model weights')."
        ), None
    shape = mmdit_shape(keys)
    if isinstance(shape, str):
        return False, "error", f"{name} is an SD 3 model file, but {shape}.", None
    problem = _structure_problem(shape)
    if problem:
        return False, "error", f"{name} is {describe_mmdit(shape)}, but {problem}.", None
    inside = parts.components(tensors)
    what = describe_mmdit(shape)
    if {"clip_l", "clip_g", "vae"} <= set(inside):
        t5 = " and T5-XXL" if "t5" in inside else "; no T5-XXL inside (it trains without it, or add t5xxl as a part)"
        return True, "info", f"{name}: {what}, with its VAE, CLIP-L, CLIP-G{t5}.", None
    held = " with its VAE" if "vae" in inside else ""
    needed = [parts.COMPONENT_FILES[c] for c in ("clip_l", "clip_g", "vae") if c not in inside]
    return True, "warning", (
        f"{name}: {what}{held}. The rest are separate files: choose {', '.join(needed)} (and t5xxl_fp16.safetensors, "
        "optional) as the model's parts."
    ), None


def version_of_base(base: str) -> str | None:
    """sd-scripts' model name of the base model a config names (a diffusers folder's transformer config, or a file's
    header), None when its files do not say — for metadata written before the model is loaded."""
    # here, not at the top: core.model.checkpoint imports the family registry, which imports this module
    from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header

    path = Path(str(base)).expanduser()
    config = path / "transformer" / "config.json"
    try:
        if config.is_file():
            return version_of_config(json.loads(config.read_text(encoding="utf-8")))
        if path.is_file() and path.suffix.lower() == ".safetensors":
            header = read_safetensors_header(path)[0]
            prefix = mmdit_prefix(header)
            shape = mmdit_shape(mmdit_keys(header, prefix)) if prefix is not None else None
            return shape.version if isinstance(shape, MmditShape) else None
    except (OSError, ValueError, CheckpointError):
        return None
    return None


def detect_folder(model_index: Mapping[str, Any]) -> bool:
    """A diffusers folder of SD 3 / 3.5 (``StableDiffusion3Pipeline`` and its img2img / inpaint siblings)."""
    return str(model_index.get("_class_name", "")).startswith("StableDiffusion3")


def version_of_config(transformer_config: Mapping[str, Any]) -> str:
    """sd-scripts' model name from a diffusers ``SD3Transformer2DModel`` config (the same rule as :attr:`MmditShape.version`)."""
    if not transformer_config.get("qk_norm"):
        return "medium"
    return "5-medium" if transformer_config.get("dual_attention_layers") else "5-large"


# --------------------------------------------------------------------------- split files


def part_kind(tensors: Mapping[str, Any]) -> PartKind | None:
    """What one file of a split SD 3.5 install is: "transformer" (the MMDiT, whatever else the file holds),
    "clip_l", "clip_g", "t5" or "vae" (a file of that part alone), None for anything else (:func:`parts.describe`
    says what)."""
    if mmdit_prefix(tensors) is not None:
        return "transformer"
    found = parts.components(tensors)
    if len(found) == 1:
        (kind,) = found
        return kind
    return None


def check_parts(
    denoiser: NamedTensors, text_encoders: Sequence[NamedTensors] = (), vae: NamedTensors | None = None
) -> PartsReport:
    """Check the files of a split install: the transformer's file (which may hold the VAE and text encoders too, as
    Stability's and ComfyUI's checkpoints do), the text encoders' files in any order, and the VAE's file.

    A part given as a file of its own replaces the same part inside the transformer's file (ComfyUI's loaders
    do the same). CLIP-L, CLIP-G and the VAE are needed; T5-XXL is optional (zeros take its place, as in
    diffusers and sd-scripts).
    """
    problems: list[str] = []
    notes: list[str] = []
    sources: dict[str, tuple[str, str]] = {}
    name, tensors = denoiser
    prefix = mmdit_prefix(tensors)
    if prefix is None:
        problems.append(f"{name} is {parts.describe(tensors)}, not the SD 3.5 transformer: choose the model file "
                        "(sd3.5_large.safetensors or similar) as the transformer")
    else:
        shape = mmdit_shape(mmdit_keys(tensors, prefix))
        problem = shape if isinstance(shape, str) else _structure_problem(shape)
        if problem:
            problems.append(f"{name} is an SD 3 model file, but {problem}")
        sources["transformer"] = (name, prefix)
        for component, key_prefix in parts.components(tensors).items():
            sources[component] = (name, key_prefix)
    given: dict[str, str] = {}
    for te_name, te_tensors in text_encoders:
        found = {c: p for c, p in parts.components(te_tensors).items() if c != "vae"}
        if len(found) != 1:
            what = parts.describe(te_tensors)
            problems.append(f"{te_name} is {what}: a text encoder of SD 3.5 is CLIP-L, CLIP-G or T5-XXL")
            continue
        ((component, key_prefix),) = found.items()
        _take(component, te_name, key_prefix, sources, given, problems, notes)
    if vae is not None:
        vae_name, vae_tensors = vae
        found_vae = parts.components(vae_tensors).get("vae")
        if found_vae is None:
            problems.append(f"{vae_name} is {parts.describe(vae_tensors)}: SD 3.5 needs its own 16-channel VAE")
        else:
            _take("vae", vae_name, found_vae, sources, given, problems, notes)
    for component in ("clip_l", "clip_g", "vae"):
        if component not in sources:
            label = parts.COMPONENT_LABELS[component]
            inside = f" ({name} has none inside)" if prefix is not None else ""
            problems.append(f"{label} is missing{inside}: add {parts.COMPONENT_FILES[component]}")
    if "t5" not in sources:
        notes.append(
            "T5-XXL is not given: SD 3.5 runs without it (zeros take its place, as in diffusers and sd-scripts), "
            "following long prompts less well; add t5xxl_fp16.safetensors to use it"
        )
    return PartsReport(sources=sources, problems=tuple(problems), notes=tuple(notes))


def _take(
    component: str, file: str, key_prefix: str, sources: dict[str, tuple[str, str]], given: dict[str, str],
    problems: list[str], notes: list[str],
) -> None:
    """Record a part given as its own file: a second file of the same part is an error, one that replaces the part
    inside the checkpoint a note."""
    label = parts.COMPONENT_LABELS[component]
    if component in given:
        problems.append(f"{label} is given twice: {given[component]} and {file}; keep one")
        return
    if component in sources:
        notes.append(f"{label} is taken from {file}, not from {sources[component][0]}")
    given[component] = file
    sources[component] = (file, key_prefix)


# --------------------------------------------------------------------------- the estimator's tables

#: parameter counts and LoRA layer tables of the released sizes, computed from the shipped configs
#: adaLN modulation layers (in ``attention_ff_proj``) see one vector per image, listed at 0 like the text stream.
#: The offload table lists the joint blocks in order; the last writes no text stream (``context_pre_only``): smaller.
#: (``tests/test_sd35_spec.py`` recomputes them). Text encoders: CLIP-L, CLIP-G, T5-XXL; T5 trains no LoRA. The
#: adaLN modulation layers (in ``attention_ff_proj``) see one vector per image, listed at 0 like the text stream.
# fmt: off
SPECS: dict[str, ModelSpec] = {
    "5-large": ModelSpec(
        family="sd35",
        denoiser=8056627520,
        text_encoders=(123650304, 694659840, 4762310656),
        vae_encoder=34274208,
        vae_decoder=49545475,
        vae_channels=128,
        text_encoder_shapes=((768, 3072, 12), (1280, 5120, 32), (4096, 10240, 24)),
        cross_attention_dim=4096,
        denoiser_lora={
            "attention": ((2432, 2432, 151, 0.0), (2432, 2432, 152, 0.25)),
            "attention_ff": ((2432, 2432, 151, 0.0), (2432, 2432, 152, 0.25), (2432, 9728, 37, 0.0), (2432, 9728, 38, 0.25), (9728, 2432, 37, 0.0), (9728, 2432, 38, 0.25)),
            "attention_ff_proj": ((2432, 2432, 151, 0.0), (2432, 2432, 152, 0.25), (2432, 4864, 1, 0.0), (2432, 9728, 37, 0.0), (2432, 9728, 38, 0.25), (2432, 14592, 75, 0.0), (9728, 2432, 37, 0.0), (9728, 2432, 38, 0.25)),
        },
        text_encoder_lora={
            "attention": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),), ()),
            "attention_ff": (((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)), ((1280, 1280, 128, 0.0), (1280, 5120, 32, 0.0), (5120, 1280, 32, 0.0)), ()),
            "attention_ff_proj": (((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)), ((1280, 1280, 128, 0.0), (1280, 5120, 32, 0.0), (5120, 1280, 32, 0.0)), ()),
        },
        offload_blocks=((212999680,) * 37 + (136085248,),),
        quantisable=QuantisableLinears(weights=8014315520, rows=2748160, layers=529, largest=35487744),
        blocks=((38, 212999680, 71004672),),
        denoiser_buffers=89653248,
        fp8_stored=(8017063680, 85607424, 631152640, 3623878656),
    ),
    "5-medium": ModelSpec(
        family="sd35",
        denoiser=2243171520,
        text_encoders=(123650304, 694659840, 4762310656),
        vae_encoder=34274208,
        vae_decoder=49545475,
        vae_channels=128,
        text_encoder_shapes=((768, 3072, 12), (1280, 5120, 32), (4096, 10240, 24)),
        cross_attention_dim=4096,
        denoiser_lora={
            "attention": ((1536, 1536, 95, 0.0), (1536, 1536, 148, 0.25)),
            "attention_ff": ((1536, 1536, 95, 0.0), (1536, 1536, 148, 0.25), (1536, 6144, 23, 0.0), (1536, 6144, 24, 0.25), (6144, 1536, 23, 0.0), (6144, 1536, 24, 0.25)),
            "attention_ff_proj": ((1536, 1536, 95, 0.0), (1536, 1536, 148, 0.25), (1536, 3072, 1, 0.0), (1536, 6144, 23, 0.0), (1536, 6144, 24, 0.25), (1536, 9216, 34, 0.0), (1536, 13824, 13, 0.0), (6144, 1536, 23, 0.0), (6144, 1536, 24, 0.25)),
        },
        text_encoder_lora={
            "attention": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),), ()),
            "attention_ff": (((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)), ((1280, 1280, 128, 0.0), (1280, 5120, 32, 0.0), (5120, 1280, 32, 0.0)), ()),
            "attention_ff_proj": (((768, 768, 48, 0.0), (768, 3072, 12, 0.0), (3072, 768, 12, 0.0)), ((1280, 1280, 128, 0.0), (1280, 5120, 32, 0.0), (5120, 1280, 32, 0.0)), ()),
        },
        offload_blocks=((101506944,) * 13 + (84980992,) * 10 + (54294784,),),
        quantisable=QuantisableLinears(weights=2222456832, rows=1230336, layers=385, largest=21233664),
        blocks=((24, 101506944, 35412480),),
        denoiser_buffers=226492416,
        fp8_stored=(2223687168, 85607424, 631152640, 3623878656),
    ),
}
# fmt: on
#: per text encoder, ``(in, out, count)`` of its MLP layers (CLIP-L's and CLIP-G's fc1 / fc2; T5 none)
TEXT_ENCODER_MLP_TABLES = (((768, 3072, 12), (3072, 768, 12)), ((1280, 5120, 32), (5120, 1280, 32)), ())


# --------------------------------------------------------------------------- facts

#: where the flow-matching defaults come from
FLOW_SOURCES = (
    "diffusers examples/dreambooth/train_dreambooth_lora_sd3.py: --weighting_scheme logit_normal, --logit_mean 0, "
    "--logit_std 1, --precondition_outputs 1 (the clean-latent target), and σ from the scheduler's shifted sigmas",
    "shift 3.0: the SD 3 / 3.5 scheduler_config (FlowMatchEulerDiscreteScheduler, shift 3.0, no dynamic shifting); "
    "ComfyUI comfy/supported_models.py SD3.sampling_settings {'shift': 3.0}; HF blog 'Diffusers welcomes Stable "
    "Diffusion 3.5 Large': the noise scheduler is the same as SD 3 Medium's",
    "sd-scripts library/sd3_train_utils.py: the preconditioned (sigma_scaled) loss is always on; its own default "
    "sampling is uniform with --training_shift 1.0",
)

def spec_of_base(base: str) -> ModelSpec | None:
    """The estimator's table of the SD 3.5 model ``base`` names (Large or Medium), None when its files do not say."""
    version = version_of_base(base)
    if version is None:  # a hub id, or a file not on this computer yet: its name ("stable-diffusion-3.5-medium")
        low = str(base).lower()
        version = "5-medium" if "3.5-medium" in low or "3.5_medium" in low else "5-large" if "large" in low else None
    return SPECS.get(version) if version else None


FACTS = FamilyFacts(
    name="sd35",
    label="SD 3.5",
    architecture="transformer",
    objective="flow",
    native_resolution=1024,
    latent_channels=16,
    latent_downscale=8,
    patch=2,
    text_encoders=("CLIP-L", "CLIP-G", "T5-XXL"),
    text_tokens=CLIP_TOKENS + T5_TOKENS,
    trainable_text_encoders=(0, 1),  # the CLIPs; T5 frozen, as sd-scripts' default (train_t5xxl False)
    precision=PrecisionFacts(
        released="bf16",
        fp16_overflows=(
            "T5-XXL overflows fp16: its feed-forward output (wo) becomes inf (transformers issue #9295; transformers "
            "keeps T5's wo in fp32 for that reason). Nothing is published about the SD 3.5 transformer itself in fp16."
        ),
        recommended="bf16",
        sources=(
            "HF blog 'Diffusers welcomes Stable Diffusion 3.5 Large' (2024-10-22): torch.bfloat16 'is the format used "
            "in the original checkpoint published by Stability AI'",
            "huggingface/transformers#9295 'T5 FP16 in Pytorch': only t5-small works in fp16",
            "google-research/text-to-text-transfer-transformer#539: 'All of our experiments use bfloat16 activations'",
        ),
    ),
    # one model's values (the family has three); SD35.metadata writes the model's own (VARIANTS)
    base_model_version=VARIANTS["5-large"].version,
    modelspec_architecture=VARIANTS["5-large"].architecture,
    flow_defaults={
        "timestep_sampling": "logit_normal",
        "discrete_flow_shift": 3.0,
        "model_prediction_type": "sigma_scaled",
        "weighting_scheme": "none",
        "sources": FLOW_SOURCES,
    },
    split_files=True,
    detect_file=detect_file,
    detect_folder=detect_folder,
    hub_patterns=("stable-diffusion-3", "sd3", "sd-3"),
    # the larger model's where the base does not say: an estimate errs on the safe side
    spec=SPECS["5-large"],
    spec_for_base=spec_of_base,
    check_parts=check_parts,
    text_encoder_mlp_tables=TEXT_ENCODER_MLP_TABLES,
)
