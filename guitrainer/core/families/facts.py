"""FamilyFacts: a model family's torch-free facts, one frozen object per family (``core/families/<name>.py``).

The engine's :class:`~guitrainer.engine.families.base.Family` holds its facts; core reads them directly (the
estimator, the precision rules, detection, ``--check``), so nothing outside a family's two packages names it.
Every fact that is not arithmetic cites where it comes from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from guitrainer.config.families import LORA_FORMATS

#: one file of a split install: its name and its tensor table (a safetensors header)
NamedTensors = tuple[str, Mapping[str, Any]]


@dataclass(frozen=True)
class PartsReport:
    """What the files of a split install provide, and what is wrong or missing, in plain words.

    ``sources`` maps each part found to ``(file name, key prefix)``; ``problems`` are errors (training cannot
    start), ``notes`` what the user should know (an optional part absent, a part taken from another file).
    """

    sources: dict[str, tuple[str, str]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


#: ``check_parts(denoiser, text_encoders, vae) -> PartsReport``: a split install's files checked as one model
PartsChecker = Callable[[NamedTensors, Sequence[NamedTensors], NamedTensors | None], PartsReport]
#: what a family's single-file detector says of a checkpoint: (ok, level, message, prediction type)
FileVerdict = tuple[bool, Literal["info", "warning", "error"], str, str | None]
#: ``detect_file(tensors, metadata, name) -> FileVerdict | None``: None = not this family's file
FileDetector = Callable[[Mapping[str, Any], Mapping[str, str], str], FileVerdict | None]
#: ``detect_folder(model_index) -> bool``: a diffusers folder's model_index.json is this family's
FolderDetector = Callable[[Mapping[str, Any]], bool]


LoraTable = tuple[tuple[int, int, int, float], ...]  # (in, out, count, tokens per latent pixel; 0 = text tokens)


@dataclass(frozen=True)
class QuantisableLinears:
    """The denoiser's Linear layers ``precision.base_weights = "int8" | "nf4"`` quantises (the family's
    ``storage_skip_patterns`` left out): what the estimator needs to size them. Everything else of the denoiser —
    their biases, the kept Linears, convs, norms, embeddings — stays in the compute dtype."""

    weights: int  # parameters in the quantised weight matrices
    rows: int  # their output rows (int8: one fp32 scale per row)
    layers: int  # how many (nf4: a few constants of quantisation state per layer)
    largest: int  # the largest one's weights (dequantised to the compute dtype while it computes)


@dataclass(frozen=True)
class ModelSpec:
    """Parameter counts of one model family, and the shapes of the layers each LoRA target set trains."""

    family: str
    denoiser: int  # the UNet or the transformer
    text_encoders: tuple[int, ...]
    vae_encoder: int  # encoder + quant_conv
    vae_decoder: int  # decoder + post_quant_conv
    vae_channels: int  # channels of the VAE's first (full-resolution) block
    text_encoder_shapes: tuple[tuple[int, int, int], ...]  # (hidden, intermediate, layers) per text encoder
    cross_attention_dim: int
    denoiser_lora: dict[str, LoraTable] = field(default_factory=dict)
    text_encoder_lora: dict[str, tuple[LoraTable, ...]] = field(default_factory=dict)
    #: the denoiser's repeated blocks ``precision.offload_blocks`` chooses from: per block list (the engine family's
    #: ``offload_blocks``), each block's parameter count in forward order; () = none known (offload not estimated)
    offload_blocks: tuple[tuple[int, ...], ...] = ()
    #: the Linear weights int8 / nf4 storage quantises; None = not counted (the estimator then quantises them all)
    quantisable: QuantisableLinears | None = None
    #: a transformer's lists of repeated blocks (Flux's double and single, SD 3's joint): per list (how many blocks,
    #: parameters of its largest block, of which its adaLN modulation Linears: fed one vector per image, never kept
    #: for the backward pass); () for the UNets. The transformer activation fit is per block of each list.
    blocks: tuple[tuple[int, int, int], ...] = ()
    #: parameters fp8 storage (``precision.base_weights = "fp8"``) stores in fp8, per part (the denoiser, then each
    #: text encoder): its Linear weights and biases outside the family's skip list; the rest (norms, embeddings,
    #: the skipped layers) keeps the compute dtype. () = every parameter counted in fp8 (the UNet tables)
    fp8_stored: tuple[int, ...] = ()
    #: values of the denoiser's buffers (SD 3's position-embedding grid), held in the compute dtype like its weights
    denoiser_buffers: int = 0

    @property
    def vae(self) -> int:
        return self.vae_encoder + self.vae_decoder

    def lora_params_per_rank(self, target: str, text_encoder: bool = False) -> int:
        """Trainable parameters per unit of rank: sum of ``in + out`` over the targeted layers."""
        n = sum(c * (i + o) for i, o, c, _ in self.denoiser_lora[target])
        if text_encoder:
            n += sum(c * (i + o) for table in self.text_encoder_lora[target] for i, o, c, _ in table)
        return n


#: ``(in channels, out, kernel side, count, positions per latent pixel)`` of conv layers the variants train
ConvTable = tuple[tuple[int, int, int, int, float], ...]
#: per text encoder, ``(in, out, count)`` of its MLP layers
MlpTables = tuple[tuple[tuple[int, int, int], ...], ...]


@dataclass(frozen=True)
class PrecisionFacts:
    """What is known about a family's numerics, each with its source.

    ``released``: the dtype the authors published the weights in. ``fp16_overflows``: a sentence naming where
    fp16 overflows, with its source ("" when nothing is published). ``recommended``: the training precision
    on hardware that has it (None: the device decides, as for the UNets). ``vae_upcast``: the family's VAE
    overflows in fp16 unless its config says otherwise (``force_upcast`` false, as SDXL's fp16-fixed VAE).
    """

    released: str = "fp16"
    fp16_overflows: str = ""
    recommended: str | None = None
    vae_upcast: bool = False
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class FamilyFacts:
    """One model family's facts.

    Attributes:
        name: the config's ``model.family`` value ("sd15", "flux1", …).
        label: what the user reads ("SD 1.5", "Flux.1").
        architecture: "unet" or "transformer".
        objective: "diffusion" (epsilon / v-prediction on a DDPM schedule) or "flow" (flow matching).
        native_resolution: the side the model was trained at (px); resolutions above it are a saver hint.
        latent_channels: channels of the VAE's latents.
        latent_downscale: image pixels per latent pixel (per side).
        patch: latent pixels per token side (Flux packs 2×2 latents into one token; UNets 1).
        text_encoders: the text encoders' names, in the model's order ("CLIP-L", "T5-XXL").
        text_tokens: the text tokens the denoiser sees beside the image's (a transformer's joint attention: Flux
            dev's 512 T5 tokens, SD 3.5's 77 CLIP + 256 T5); the estimator's activations grow with them.
        trainable_text_encoders: which of them a LoRA may train (Flux and SD 3.5: the CLIPs, not T5).
        precision: :class:`PrecisionFacts`.
        base_model_version: sd-scripts' ``ss_base_model_version`` for this family's LoRAs.
        modelspec_architecture: ``modelspec.architecture`` of a LoRA (``<arch>/lora``).
        flow_defaults: the ``[flow]`` settings ``"auto"`` resolves to, with their sources.
        split_files: whether users keep it as separate files (a transformer file, text encoders, a VAE).
        detect_file / detect_folder: recognise a single file's tensors / a diffusers folder's model_index.
        hub_patterns: lower-case substrings of hub ids that name this family ("flux.1", "flux1").
        spec: the estimator's parameter counts and LoRA layer tables (:class:`ModelSpec`); ``spec_for_base`` the
            table of the model a base path names, for a family of several sizes (SD 3.5 Large / Medium).
        check_parts: for families kept as split files, what a set of files provides and lacks.
        vae_file: which of a split install's files is the VAE, for a family whose VAE is not the flow families'
            2-D one (Qwen-Image's 3-D VAE); None: the file holding only a 2-D flow VAE.
        conv_table / text_encoder_mlp_tables: the layers the network variants add (UNet convs, CLIP MLPs).
    """

    name: str
    label: str
    architecture: Literal["unet", "transformer"]
    objective: Literal["diffusion", "flow"]
    native_resolution: int
    latent_channels: int
    latent_downscale: int = 8
    patch: int = 1
    text_encoders: tuple[str, ...] = ()
    text_tokens: int = 77
    trainable_text_encoders: tuple[int, ...] = ()
    precision: PrecisionFacts = field(default_factory=PrecisionFacts)
    base_model_version: str = ""
    modelspec_architecture: str = ""
    flow_defaults: Mapping[str, Any] = field(default_factory=dict)
    split_files: bool = False
    detect_file: FileDetector | None = None
    detect_folder: FolderDetector | None = None
    hub_patterns: tuple[str, ...] = ()
    spec: ModelSpec | None = None
    spec_for_base: Callable[[str], ModelSpec | None] | None = None
    check_parts: PartsChecker | None = None
    vae_file: Callable[[Mapping[str, Any]], bool] | None = None
    conv_table: ConvTable = ()
    text_encoder_mlp_tables: MlpTables = ()

    @property
    def lora_formats(self) -> tuple[str, ...]:
        """The layouts this family's LoRA can be written in (``output.format`` values, the default first): the
        config's table :data:`~guitrainer.config.families.LORA_FORMATS`, which the config check reads too."""
        return LORA_FORMATS.get(self.name, ("kohya",))

    def image_tokens(self, width: int, height: int) -> int:
        """How many image tokens (transformers) or latent pixels (UNets) a ``width`` × ``height`` image makes."""
        side = self.latent_downscale * self.patch
        return (width // side) * (height // side)
