"""Loading Flux.1: a diffusers folder, one file holding everything (ComfyUI's "checkpoint" layout), or the
split files a ComfyUI user keeps (the transformer, ``t5xxl_*.safetensors``, ``clip_l.safetensors``,
``ae.safetensors``) — always offline.

The architectures of the parts a file does not describe come from the shipped configs
(``resources/models/flux1``: the transformer (dev), the 16-channel VAE, CLIP-L, the T5-XXL encoder, the
scheduler, the CLIP tokenizer); the transformer's own widths and block counts come from its file
(:mod:`.convert` is width-aware), so a tiny test model loads through the same code as the 12 B one. Every
part is built on ``meta`` and its tensors assigned, so nothing is allocated twice.

The T5 tokenizer is the one file that cannot be shipped here (Google's ``spiece.model``): it is taken from
the diffusers folder, a ``tokenizer_2/`` (or ``t5_tokenizer/``) folder beside the model files or in the config
folder, or the Hugging Face cache (FLUX.1-dev / FLUX.1-schnell's ``tokenizer_2``, ``google/t5-v1_1-xxl``);
otherwise :class:`~guitrainer.engine.models.types.ModelLoadError` gives the one command that downloads it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.core.families import flux1 as facts
from guitrainer.engine.families.base import ModelParts
from guitrainer.engine.families.flux1 import convert
from guitrainer.engine.models import split_install
from guitrainer.engine.models.state_dicts import in_dtype
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, model_identity

log = logging.getLogger(__name__)

#: where the Hugging Face cache may hold a T5-XXL tokenizer: (repo id, subfolder)
T5_TOKENIZER_REPOS: tuple[tuple[str, str], ...] = (
    ("black-forest-labs/FLUX.1-dev", "tokenizer_2"),
    ("black-forest-labs/FLUX.1-schnell", "tokenizer_2"),
    ("google/t5-v1_1-xxl", ""),
)
#: the command that puts it there (FLUX.1-schnell's repository is Apache-2.0: no licence to accept first)
T5_TOKENIZER_COMMAND = 'hf download black-forest-labs/FLUX.1-schnell --include "tokenizer_2/*"'
#: names of a T5 tokenizer folder looked for beside the model files and in the config folder
T5_TOKENIZER_FOLDERS = ("tokenizer_2", "t5_tokenizer")
#: FLUX.1-schnell's scheduler_config.json differs from dev's: no resolution-dependent shift, shift 1
SCHNELL_SCHEDULER = {"use_dynamic_shifting": False, "shift": 1.0}


# --------------------------------------------------------------------------- the LoadedModel, in one place


def denoiser_of(model: LoadedModel) -> nn.Module:
    """The transformer of a loaded model."""
    return model.denoiser


def _assemble(
    transformer: nn.Module, vae: nn.Module, text_encoders: list[nn.Module], tokenizers: list[Any], scheduler: Any,
    *, path: str, identity: str, source: str,
) -> LoadedModel:
    """The :class:`LoadedModel` of Flux's parts (the one call that constructs it), frozen and in eval mode."""
    for module in (transformer, vae, *text_encoders):
        module.requires_grad_(False)
        module.eval()
    variant = "dev" if transformer.config.guidance_embeds else "schnell"
    return LoadedModel(
        denoiser=transformer, vae=vae, text_encoders=text_encoders, tokenizers=tokenizers, noise_scheduler=scheduler,
        family="flux1", path=path, identity=identity, source=source, extra={"variant": variant},
    )


def is_dev(transformer: nn.Module) -> bool:
    """dev has the guidance embedder (guidance-distilled), schnell does not."""
    return bool(transformer.config.guidance_embeds)


# --------------------------------------------------------------------------- building parts from tensors


def _cast(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    # torch's own .to: diffusers' ModelMixin.to warns on every dtype cast
    return nn.Module.to(module, dtype)


def _assign(module: nn.Module, state: Mapping[str, torch.Tensor], part: str, dtype: torch.dtype) -> None:
    """``state`` into ``module`` (built on meta) by assignment, each tensor cast to ``dtype`` on the way (never a
    whole part in fp32 first); ModelLoadError naming the part on any mismatch."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or wrong:
        detail = (
            f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}" if unexpected
            else f"{wrong[0]} is {tuple(state[wrong[0]].shape)}, the architecture has {tuple(expected[wrong[0]].shape)}"
        )
        raise ModelLoadError(f"{part} does not match its architecture ({detail})")
    module.load_state_dict(in_dtype(state, dtype), strict=True, assign=True)


def _read_config(config_dir: Path, part: str) -> dict[str, Any]:
    path = config_dir / part / ("scheduler_config.json" if part == "scheduler" else "config.json")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"the model config folder {config_dir} is incomplete: {path.name} of {part}/ cannot be "
                             f"read ({first_line(e)}); reinstall the app") from e


def transformer_config(state: Mapping[str, torch.Tensor], config_dir: Path) -> dict[str, Any]:
    """The shipped transformer config with everything the weights say put in: widths, block counts, text
    widths, guidance (dev / schnell). Only the RoPE axes (no weights) come from the config alone."""
    shape = convert.diffusers_shape(state)
    cfg = _read_config(config_dir, "transformer")
    head_dim = int(state["transformer_blocks.0.attn.norm_q.weight"].shape[0]) if shape.double_blocks else int(
        state["single_transformer_blocks.0.attn.norm_q.weight"].shape[0]
    )
    if shape.mlp != 4 * shape.hidden:
        raise ModelLoadError(f"this Flux transformer's MLP is {shape.mlp} wide, not 4 x {shape.hidden}: not Flux.1")
    if sum(cfg.get("axes_dims_rope", (16, 56, 56))) != head_dim:
        raise ModelLoadError(
            f"the transformer's heads are {head_dim} wide but the config's RoPE axes {cfg.get('axes_dims_rope')} "
            f"sum to {sum(cfg.get('axes_dims_rope', ()))}: give a config folder made for this model"
        )
    cfg.update(
        in_channels=int(state["x_embedder.weight"].shape[1]),
        num_layers=shape.double_blocks,
        num_single_layers=shape.single_blocks,
        attention_head_dim=head_dim,
        num_attention_heads=shape.hidden // head_dim,
        joint_attention_dim=int(state["context_embedder.weight"].shape[1]),
        pooled_projection_dim=int(state["time_text_embed.text_embedder.linear_1.weight"].shape[1]),
        guidance_embeds=shape.guidance,
    )
    return cfg


def build_transformer(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    """The FluxTransformer2DModel of a BFL-layout (any prefix) or diffusers-named state dict."""
    from accelerate import init_empty_weights
    from diffusers import FluxTransformer2DModel

    try:
        named = dict(state) if facts.is_diffusers_transformer(state) else convert.bfl_to_diffusers(state)
    except KeyError as e:
        raise ModelLoadError(f"the Flux transformer is incomplete or not Flux.1: {e.args[0]}") from e
    with init_empty_weights():
        model = FluxTransformer2DModel.from_config(transformer_config(named, config_dir))
    _assign(model, named, "the Flux transformer", dtype)
    return _cast(model, dtype)


def build_vae(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    """The 16-channel AutoencoderKL of an LDM/BFL-layout VAE (``ae.safetensors``, or under ``vae.`` /
    ``first_stage_model.``) or a diffusers-named one."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    cfg = _read_config(config_dir, "vae")
    prefix = next((p for p in facts.VAE_PREFIXES if any(k.startswith(p) for k in state)), "")
    own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    named = own if any(k.startswith("encoder.down_blocks.") for k in own) else convert_ldm_vae_checkpoint(own, cfg)
    with init_empty_weights():
        vae = AutoencoderKL.from_config(cfg)
    _assign(vae, named, "the VAE", dtype)
    return _cast(vae, dtype)


def build_clip(state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype) -> nn.Module:
    """CLIP-L's text model (transformers' CLIPTextModel) from a ``clip_l.safetensors``-style state dict:
    ``text_model.`` (transformers 4's level, kept by the files) and ``text_projection`` (an unused extra in some
    files) dropped, as transformers 5 has neither."""
    from accelerate import init_empty_weights
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(**{k: v for k, v in _read_config(config_dir, "text_encoder").items() if not k.startswith("_")})
    own = {
        k.removeprefix("text_model."): v for k, v in state.items()
        if not k.endswith("position_ids") and not k.startswith("text_projection.")
    }
    with init_empty_weights():
        clip = CLIPTextModel(cfg)
    _assign(clip, own, "the CLIP-L text encoder", dtype)
    return _cast(clip, dtype)


def build_t5(
    state: Mapping[str, torch.Tensor], config_dir: Path, dtype: torch.dtype, *, part: str = "text_encoder_2"
) -> nn.Module:
    """The T5-XXL encoder (transformers' T5EncoderModel) from a ``t5xxl_*.safetensors``-style state dict, its
    architecture from ``config_dir/<part>/config.json`` (Flux's second text encoder; Chroma's only one).

    The token embedding is tied (``shared`` = ``encoder.embed_tokens``): files carry either name or both. The
    "scaled" fp8 files (extra ``scale_weight`` tensors) need their scales applied and are refused, as sd-scripts
    asks for the plain ones; a plain fp8 file is cast up.
    """
    from accelerate import init_empty_weights
    from transformers import T5Config, T5EncoderModel

    if any(k.endswith(("scale_weight", "scaled_fp8")) for k in state):
        raise ModelLoadError(
            "this T5-XXL file is a 'scaled fp8' one (scale_weight tensors beside the weights); choose "
            "t5xxl_fp16.safetensors or the plain t5xxl_fp8_e4m3fn.safetensors instead"
        )
    cfg = T5Config(**{k: v for k, v in _read_config(config_dir, part).items() if not k.startswith("_")})
    own = dict(state)
    embedding = own.get("shared.weight", own.get("encoder.embed_tokens.weight"))
    if embedding is not None:
        own["shared.weight"] = own["encoder.embed_tokens.weight"] = embedding
    with init_empty_weights():
        t5 = T5EncoderModel(cfg)
    _assign(t5, own, "the T5-XXL text encoder", dtype)
    t5.encoder.embed_tokens.weight = t5.shared.weight  # assignment left two Parameters: tie them again
    return _cast(t5, dtype)


def _scheduler(config_dir: Path, dev: bool) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    cfg = _read_config(config_dir, "scheduler")
    return FlowMatchEulerDiscreteScheduler.from_config(cfg if dev else {**cfg, **SCHNELL_SCHEDULER})


# --------------------------------------------------------------------------- tokenizers


def has_vocabulary(tokenizer: Any) -> bool:
    """Whether a tokenizer read real files: transformers 5 builds one of its special tokens alone (CLIP: 2, T5:
    104 = 4 + 100 sentinels) from a folder or cache entry without its files, instead of raising."""
    specials = set(tokenizer.all_special_tokens)
    return sum(1 for token in tokenizer.get_vocab() if token not in specials) > 1


def clip_tokenizer(config_dir: Path) -> Any:
    """CLIP-L's tokenizer from the config folder (shipped: the same files as SD 1.5's)."""
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(str(config_dir / "tokenizer"), local_files_only=True)
    if not has_vocabulary(tokenizer):
        raise ModelLoadError(f"the model config folder {config_dir} has no CLIP tokenizer files in tokenizer/ "
                             "(vocab.json, merges.txt); reinstall the app")
    return tokenizer


def _tokenizer_in(folder: Path) -> Any | None:
    from transformers import T5TokenizerFast

    if not folder.is_dir() or not any((folder / f).is_file() for f in ("tokenizer.json", "spiece.model")):
        return None
    try:
        tokenizer = T5TokenizerFast.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - another kind of tokenizer there (a Qwen or CLIP one) raises anything
        # from TypeError to ValueError: not a T5 tokenizer, look on
        log.warning("%s holds a T5 tokenizer that cannot be read: %s", folder, first_line(e))
        return None
    if not has_vocabulary(tokenizer):
        log.warning("%s holds a T5 tokenizer without its vocabulary (spiece.model needs sentencepiece; "
                    "tokenizer.json does not)", folder)
        return None
    return tokenizer


def _tokenizer_in_cache(repos: Sequence[tuple[str, str]]) -> Any | None:
    """A T5 tokenizer of ``repos`` that is really in the Hugging Face cache (its files, not a cache entry: see
    :func:`has_vocabulary`)."""
    from huggingface_hub import try_to_load_from_cache

    for repo, subfolder in repos:
        for name in ("tokenizer.json", "spiece.model"):
            cached = try_to_load_from_cache(repo, f"{subfolder}/{name}" if subfolder else name)
            if isinstance(cached, str):
                found = _tokenizer_in(Path(cached).parent)
                if found is not None:
                    return found
    return None


def t5_tokenizer(
    near: Iterable[Path], config_dir: Path, *, folders: Sequence[str] = T5_TOKENIZER_FOLDERS,
    repos: Sequence[tuple[str, str]] = T5_TOKENIZER_REPOS, command: str = T5_TOKENIZER_COMMAND, label: str = "Flux",
) -> Any:
    """The T5-XXL tokenizer: in a folder named one of ``folders`` (Flux: ``tokenizer_2/``, ``t5_tokenizer/``)
    beside any of ``near`` (the model's files) or in the config folder, else from the Hugging Face cache
    (``repos``); else ModelLoadError with the ``command`` that downloads it (``label``: the family's files)."""
    places = [*(p.parent if p.is_file() else p for p in near), config_dir]
    for place in dict.fromkeys(places):
        for name in folders:
            found = _tokenizer_in(place / name)
            if found is not None:
                return found
    found = _tokenizer_in_cache(repos)
    if found is not None:
        return found
    raise ModelLoadError(
        f"the T5-XXL tokenizer is missing: {label}'s files do not include it and it is not in a {folders[0]}/ folder "
        f"beside them, nor in the Hugging Face cache. Download it once (a few MB) with:  {command}",
        (f"run: {command}", f"or put a T5 tokenizer folder named {folders[0]} beside the model files"),
    )


# --------------------------------------------------------------------------- the three ways in


def load_folder(
    path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
    vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """A diffusers FLUX.1 folder (or a hub id in the cache): FluxTransformer2DModel, the 16-channel VAE,
    CLIP-L, the T5-XXL encoder, both tokenizers and the FlowMatchEulerDiscreteScheduler; each weight in ``dtype``
    (the VAE's in ``vae_dtype``, default ``dtype``) as it is read."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    src = str(path)
    index_file = Path(src) / "model_index.json"
    if index_file.is_file():
        index = json.loads(index_file.read_text(encoding="utf-8"))
        if not facts.detect_folder(index):
            raise ModelLoadError(f"{src} is a {index.get('_class_name') or 'unknown'} model, not FLUX.1 dev or "
                                 "schnell (a FluxPipeline folder)")
    kw: dict[str, Any] = {"local_files_only": local_files_only}
    part = "transformer"
    try:
        transformer = FluxTransformer2DModel.from_pretrained(src, subfolder="transformer", torch_dtype=dtype, **kw)
        if int(transformer.config.in_channels) != 64:
            raise ModelLoadError(f"{src}: its transformer takes {transformer.config.in_channels} input channels, not "
                                 "64 (an image-conditioned variant such as Fill or Depth); choose FLUX.1 dev or schnell")
        part = "vae"
        vae = AutoencoderKL.from_pretrained(src, subfolder="vae", torch_dtype=vae_dtype or dtype, **kw)
        part = "text_encoder"
        clip = CLIPTextModel.from_pretrained(src, subfolder="text_encoder", dtype=dtype, **kw)
        part = "text_encoder_2"
        t5 = T5EncoderModel.from_pretrained(src, subfolder="text_encoder_2", dtype=dtype, **kw)
        part = "tokenizer"
        clip_tok = CLIPTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)
        part = "tokenizer_2"
        t5_tok = T5TokenizerFast.from_pretrained(src, subfolder="tokenizer_2", **kw)
        for name, tok in (("tokenizer", clip_tok), ("tokenizer_2", t5_tok)):
            if not has_vocabulary(tok):
                raise ModelLoadError(f"{src} is not a complete FLUX.1 diffusers folder: {name}/ holds no vocabulary")
        part = "scheduler"
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(src, subfolder="scheduler", **kw)
    except ModelLoadError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelLoadError(f"{src} is not a complete FLUX.1 diffusers folder ({part}/ is missing or broken): "
                             f"{first_line(e)}") from e
    ident = model_identity(src) if Path(src).is_dir() else hashlib.sha256(src.encode()).hexdigest()[:24]
    return _assemble(transformer, vae, [clip, t5], [clip_tok, t5_tok], scheduler,
                     path=src, identity=ident, source="folder")


def _headers(state: Mapping[str, torch.Tensor]) -> dict[str, dict[str, list[int]]]:
    """A state dict as the torch-free detectors read a safetensors header: name -> {"shape": …}."""
    return {k: {"shape": list(v.shape)} for k, v in state.items()}


def _sub(state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def _build_all(
    states: Mapping[str, Mapping[str, torch.Tensor]], config_dir: Path, dtype: torch.dtype, near: Sequence[Path],
    *, path: str, identity: str, source: str, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """The LoadedModel from each part's own state dict (``states[part]``, prefixes removed)."""
    transformer = build_transformer(states["transformer"], config_dir, dtype)
    vae = build_vae(states["vae"], config_dir, vae_dtype or dtype)
    clip = build_clip(states["clip_l"], config_dir, dtype)
    t5 = build_t5(states["t5"], config_dir, dtype)
    tokenizers = [clip_tokenizer(config_dir), t5_tokenizer(near, config_dir)]
    return _assemble(transformer, vae, [clip, t5], tokenizers, _scheduler(config_dir, is_dev(transformer)),
                     path=path, identity=identity, source=source)


def _checkpoint_states(state: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """A ComfyUI checkpoint's tensors by part, each with its prefix removed."""
    vae_prefix = next((p for p in facts.VAE_PREFIXES if any(k.startswith(p) for k in state)), facts.VAE_PREFIXES[0])
    return {
        "transformer": convert.strip_prefix(state),
        "clip_l": _sub(state, facts.CLIP_L_PREFIX),
        "t5": _sub(state, facts.T5_PREFIX),
        "vae": _sub(state, vae_prefix),
    }


def load_single_file(
    path: Path, state: dict[str, torch.Tensor], *, config_dir: Path, dtype: torch.dtype = torch.float32,
    vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """One file holding the whole model, as ComfyUI's "checkpoint" files do (``model.diffusion_model.`` +
    ``text_encoders.clip_l.transformer.`` + ``text_encoders.t5xxl.transformer.`` + ``vae.`` /
    ``first_stage_model.``). A transformer-only file (BFL's release) is refused with the parts it lacks."""
    name = Path(path).name
    headers = _headers(state)
    verdict = facts.detect_file(headers, {}, name)
    if verdict is None or not verdict[0]:
        raise ModelLoadError(verdict[2] if verdict else f"{name} holds no Flux.1 transformer")
    missing = [p for p in facts.FLUX_PARTS if p not in facts.file_parts(headers)]
    if missing:
        raise ModelLoadError(
            f"{name} holds the Flux transformer without "
            + " and ".join(facts.PART_LABELS[p] for p in missing)
            + f": {facts.missing_parts_sentence(facts.file_parts(headers))} (the files of a split model are chosen "
            "together), or choose a diffusers folder"
        )
    return _build_all(_checkpoint_states(state), config_dir, dtype, [Path(path)],
                      path=str(path), identity=model_identity(path), source="single_file", vae_dtype=vae_dtype)


def _part_state(part: str, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One part's tensors from the file that holds it (a split file as is; a checkpoint's under its prefix)."""
    if part == "transformer":
        return convert.strip_prefix(state)
    by_part = _checkpoint_states(state)
    return by_part[part] if by_part[part] else dict(state)


def load_parts(
    parts: ModelParts, *, config_dir: Path, dtype: torch.dtype = torch.float32, vae_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """A split install: the transformer's file, the T5-XXL and CLIP-L files (any order) and ``ae.safetensors``;
    ModelLoadError naming each part that is missing, chosen twice or of the wrong kind."""
    files = [Path(parts.denoiser), *map(Path, parts.text_encoders), *([Path(parts.vae)] if parts.vae else [])]
    for f in files:
        if not f.is_file():
            raise ModelLoadError(f"{f}: the file does not exist. Check the path, or choose the file again.")
    read = {f: split_install.read_part(f, "Flux") for f in files}
    problems = facts.split_install_problems([(f.name, read[f][0]) for f in files])
    if problems:
        raise ModelLoadError(" ".join(problems))
    states: dict[str, dict[str, torch.Tensor]] = {}
    for f in files:
        for part in facts.file_parts(read[f][0]):
            states.setdefault(part, _part_state(part, read[f][1]))
    identity = hashlib.sha256("\n".join(model_identity(f) for f in files).encode()).hexdigest()[:24]
    return _build_all(states, config_dir, dtype, files, path=str(parts.denoiser), identity=identity, source="split_files",
                      vae_dtype=vae_dtype)
