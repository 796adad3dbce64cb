"""The VAE a run encodes with (``model.vae``): what a folder or file holds, whether it may run in fp16, and
where an fp16-safe SDXL VAE already lies on this computer.

Pure Python: reads ``config.json`` files and .safetensors headers only, each answer cached until the files it
read change (the advice asks on every settings change, from the GUI thread).
Whether a VAE may run in fp16 comes from its own config, diffusers' ``force_upcast`` (true in SDXL's
original VAE, false in ``madebyollin/sdxl-vae-fp16-fix``), never from a name.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from guitrainer.base import safe_open
from guitrainer.base.names import printable
from guitrainer.base.paths import expand
from guitrainer.config import TrainingConfig
from guitrainer.core.families import registry
from guitrainer.core.memory.specs import config_family
from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header

#: the fp16-fixed SDXL VAE: SDXL's decoder rescaled so its activations fit fp16
FP16_FIX_REPO = "madebyollin/sdxl-vae-fp16-fix"
#: its published config.json says ``"force_upcast": false`` (and SDXL's 4 latent channels, scale 0.13025): what
#: it is, before it is downloaded
FP16_FIX_FACTS = {"latent_channels": 4, "force_upcast": False, "scaling_factor": 0.13025}
#: the latents' scale of each family's own VAE (diffusers' AutoencoderKL configs), when the base model's VAE
#: config cannot be read
FAMILY_SCALING = {"sd15": 0.18215, "sdxl": 0.13025}
#: the command that puts it in the Hugging Face cache, where :func:`find_fp16_safe_vae` looks
FP16_FIX_DOWNLOAD = f"hf download {FP16_FIX_REPO} config.json diffusion_pytorch_model.safetensors"
#: the weights file of a diffusers VAE folder (only .safetensors: a pickle could run code)
VAE_WEIGHTS = "diffusion_pytorch_model.safetensors"
#: prefixes a VAE's keys carry when it was cut out of a full checkpoint (diffusers' ``LDM_VAE_KEYS``)
VAE_KEY_PREFIXES = ("first_stage_model.", "vae.")
#: the latent channels of SD 1.x / SDXL UNets, when the base model's own config cannot be read
DEFAULT_UNET_IN_CHANNELS = 4
#: siblings of the base model looked at for an fp16-safe VAE (a big models folder is not listed whole)
MAX_SIBLINGS = 200
#: largest config.json read (a VAE's is under a kilobyte)
MAX_JSON_BYTES = 16 * 1024 * 1024
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

VaeKind = Literal["base", "folder", "file", "hub"]


@dataclass(frozen=True)
class VaeFacts:
    """What a ``model.vae`` value is, read from disk.

    Attributes:
        kind: "base" (empty: the base model's own VAE), "folder", "file" or "hub".
        path: the folder holding the VAE's config.json (a model folder's ``vae/``), the file, or the hub id.
        latent_channels: channels of the latents it makes (None: not known).
        force_upcast: its config's ``force_upcast`` (None: no config to read, e.g. a bare file).
        problem: why it cannot be used, in plain words ("" when it can).
        scaling_factor: its config's ``scaling_factor``, the latents' scale (None: not known).
        downscale: how many pixels a latent spans per side, 2 ** (len(block_out_channels) - 1) (None: not known).
    """

    kind: VaeKind
    path: str = ""
    latent_channels: int | None = None
    force_upcast: bool | None = None
    problem: str = ""
    scaling_factor: float | None = None
    downscale: int | None = None

    @property
    def fp16_safe(self) -> bool:
        """Its config says it runs in fp16 (``force_upcast`` false)."""
        return self.force_upcast is False and not self.problem


def _read_json(p: Path) -> dict[str, Any] | None:
    """A JSON config read safely (a named pipe or a device is never opened); None when it cannot be read."""
    try:
        data = safe_open.read_json(p, limit=MAX_JSON_BYTES, what="a model config")
    except safe_open.PathError:
        return None
    return data if isinstance(data, dict) else None


def read_vae_config(folder: Path) -> dict[str, Any] | None:
    """``folder/config.json`` when it is an AutoencoderKL's config, else None."""
    data = _read_json(folder / "config.json")
    if data is None:
        return None
    if data.get("_class_name") == "AutoencoderKL" or ("latent_channels" in data and "down_block_types" in data):
        return data
    return None


def vae_config_folder(path: Path) -> Path | None:
    """The folder holding the VAE's config.json: ``path`` itself, or a full model folder's ``vae/``."""
    for folder in (path, path / "vae"):
        if read_vae_config(folder) is not None:
            return folder
    return None


def force_upcast_of(config: dict[str, Any]) -> bool:
    """A VAE config's ``force_upcast``; diffusers' default (true) when it does not say."""
    return bool(config.get("force_upcast", True))


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return expand(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return expand(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (expand(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def hub_snapshots(repo_id: str) -> list[Path]:
    """Downloaded snapshots of ``repo_id`` in the hub cache; the one ``refs/main`` names first."""
    repo = _hub_repo(repo_id)
    try:
        found = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
    except OSError:
        return []
    try:
        main = safe_open.read_text(repo / "refs" / "main", limit=4096, what="a hub ref").strip()
    except safe_open.PathError:
        main = ""
    return sorted(found, key=lambda p: p.name != main)


def _folder_facts(folder: Path, shown: str, kind: VaeKind = "folder") -> VaeFacts:
    cfg_folder = vae_config_folder(folder)
    if cfg_folder is None:
        return VaeFacts(kind, str(folder), problem=f"{shown} holds no VAE config.json: a diffusers VAE folder holds "
                                                   f"config.json and {VAE_WEIGHTS} (as {FP16_FIX_REPO} does)")
    cfg = read_vae_config(cfg_folder) or {}
    channels = cfg.get("latent_channels", DEFAULT_UNET_IN_CHANNELS)
    scale = cfg.get("scaling_factor")
    facts = VaeFacts(kind, str(cfg_folder), int(channels) if isinstance(channels, int) else None, force_upcast_of(cfg),
                     scaling_factor=float(scale) if isinstance(scale, int | float) else None, downscale=_downscale(cfg))
    if safe_open.problem(cfg_folder / VAE_WEIGHTS, "file"):
        return replace(facts, problem=f"{shown} has a VAE config.json but no {VAE_WEIGHTS} beside it (incomplete "
                                      "download?)")
    return facts


def _downscale(cfg: dict[str, Any]) -> int | None:
    """Pixels per latent per side of a VAE config: each encoder block but the last halves the image."""
    blocks = cfg.get("block_out_channels")
    return 2 ** (len(blocks) - 1) if isinstance(blocks, list | tuple) and blocks else None


def _strip_prefix(keys: list[str]) -> list[str]:
    for prefix in VAE_KEY_PREFIXES:
        if any(k.startswith(prefix) for k in keys):
            return [k.removeprefix(prefix) for k in keys if k.startswith(prefix)]
    return keys


#: (encoder's first conv, decoder's first conv) in diffusers' names, and in Wan's original names (the 3-D VAE of
#: Qwen-Image, as ComfyUI's ``qwen_image_vae.safetensors`` keeps it)
_CONV_IN_NAMES = (("encoder.conv_in.weight", "decoder.conv_in.weight"), ("encoder.conv1.weight", "decoder.conv1.weight"))


def _decoder_conv_in(names: dict[str, Any]) -> dict[str, Any] | None:
    """The decoder's first convolution's header entry (its input channels are the latent channels) of a 2-D VAE
    (4-D kernels) or a 3-D one (5-D kernels), None when the file has no encoder and decoder."""
    for encoder, decoder in _CONV_IN_NAMES:
        conv_in = names.get(decoder)
        if conv_in and encoder in names and len(conv_in.get("shape", ())) in (4, 5):
            return conv_in
    return None


def _file_facts(p: Path, shown: str) -> VaeFacts:
    if p.suffix.lower() != ".safetensors":
        return VaeFacts("file", str(p), problem=f"{shown} is not a .safetensors file: a VAE is read from .safetensors "
                                                "only (a pickle could run code); download the .safetensors version")
    try:
        header, _meta = read_safetensors_header(p)
    except CheckpointError:
        return VaeFacts("file", str(p), problem=f"{shown} cannot be read as a .safetensors file (damaged, cut short, "
                                                "or another kind of file renamed): choose another VAE file or "
                                                "folder, or clear the setting to use the base model's own VAE")
    if any(k.startswith("model.diffusion_model.") for k in header):
        return VaeFacts("file", str(p), problem=f"{shown} is a whole model checkpoint, not a VAE: choose it as the "
                                                "base model, or choose a VAE file or folder here")
    names = dict(zip(_strip_prefix(list(header)), header.values()))
    conv_in = _decoder_conv_in(names)
    if conv_in is None:
        return VaeFacts("file", str(p), problem=f"{shown} is not a VAE (it has no encoder and decoder weights)")
    side = read_vae_config(p.parent)  # a hub snapshot holds config.json beside the weights
    upcast = force_upcast_of(side) if side is not None else None
    return VaeFacts("file", str(p), int(conv_in["shape"][1]), upcast)


def _hub_repo(repo_id: str) -> Path:
    return hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def _stamp(p: Path, text: str) -> tuple[Any, ...]:
    """What changes when the VAE at ``p`` changes: stats of the path, the configs that describe it and (a hub
    id) its snapshots in the cache."""
    out: list[Any] = [str(hub_cache_dir())]
    snapshots = _hub_repo(text) / "snapshots" if _HUB_ID.match(text) else p
    for f in (p, p / "config.json", p / "vae" / "config.json", p.parent / "config.json", snapshots):
        try:
            st = f.stat()
            out.append((st.st_mode, st.st_size, st.st_mtime_ns))
        except (OSError, ValueError):  # nothing there, or a path the OS refuses (NUL, a name too long)
            out.append(None)
    return tuple(out)


def describe_vae(value: str) -> VaeFacts:
    """What ``model.vae`` names: the base's own VAE (""), a folder, a .safetensors file or a hub id."""
    text = str(value).strip()
    if not text:
        return VaeFacts("base")
    p = expand(text)
    return _describe(text, _stamp(p, text))


@functools.lru_cache(maxsize=32)
def _describe(text: str, _stamp: tuple[Any, ...]) -> VaeFacts:
    p = expand(text)
    shown = printable(text)
    try:
        kind = safe_open.look(p).kind
    except safe_open.PathError as e:  # a name too long, a NUL character, a link loop
        return VaeFacts("folder", text, problem=f"The VAE {e}: choose a VAE folder or .safetensors file, or clear the "
                                                "setting to use the base model's own VAE")
    if kind == "folder":
        return _folder_facts(p, f"The VAE folder “{shown}”")
    if kind == "file":
        return _file_facts(p, f"The VAE file “{shown}”")
    if kind != "missing":  # a named pipe, a device: refused at once, never looked up on the hub
        return VaeFacts("file", text, problem=f"The VAE “{shown}” is {safe_open.KIND_WORDS[kind]}, not a file or a "
                                              "folder: choose a VAE folder or .safetensors file, or clear the setting")
    looks_like_path = text.startswith(("/", ".", "~", "\\")) or ":" in text or text.lower().endswith(".safetensors")
    if looks_like_path or not _HUB_ID.match(text):
        return VaeFacts("folder", text, problem=f"The VAE “{shown}” was not found: choose a VAE folder or .safetensors "
                                                "file, a hub id, or clear the setting to use the base model's own VAE")
    for snap in hub_snapshots(text):  # downloaded before: its config says what it is
        facts = _folder_facts(snap, f"The VAE “{text}”", "hub")
        if not facts.problem:
            return replace(facts, path=text)
    if text == FP16_FIX_REPO:  # not downloaded yet, but its config is known
        return VaeFacts("hub", text, FP16_FIX_FACTS["latent_channels"], False,
                        scaling_factor=FP16_FIX_FACTS["scaling_factor"])
    return VaeFacts("hub", text)


def unet_in_channels(base: str) -> int:
    """The latent channels the base model's UNet takes: from a diffusers folder's ``unet/config.json``, else 4."""
    text = str(base).strip()
    if text and text != "demo":
        cfg = _read_json(expand(text) / "unet" / "config.json")
        if cfg is not None and isinstance(cfg.get("in_channels"), int):
            return int(cfg["in_channels"])
    return DEFAULT_UNET_IN_CHANNELS


def vae_problem(config: TrainingConfig) -> str:
    """Why ``model.vae`` cannot be used with this base model ("" when it can, or when it is not set)."""
    facts = describe_vae(config.model.vae)
    if facts.kind == "base" or facts.problem:
        return facts.problem
    family = registry.facts(config_family(config))
    wanted = unet_in_channels(config.model.base) if family.architecture == "unet" else family.latent_channels
    if facts.latent_channels is not None and facts.latent_channels != wanted:
        return (f"The VAE “{config.model.vae}” makes {facts.latent_channels}-channel latents, but the base model "
                f"({family.label}) takes {wanted}: it belongs to another kind of model. Choose a {family.label} VAE, "
                "or clear the setting to use the base model's own VAE")
    own = base_vae_facts(config.model.base).downscale or (8 if config.model.family in ("sd15", "sdxl") else None)
    if facts.downscale is not None and own is not None and facts.downscale != own:
        return (f"The VAE “{config.model.vae}” makes one latent per {facts.downscale}x{facts.downscale} pixels, the "
                f"base model's own VAE one per {own}x{own}: the UNet would train on latents of another size. Choose "
                "a VAE made for this base model, or clear the setting to use its own")
    return ""


def base_vae_facts(base: str) -> VaeFacts:
    """The base model's own VAE, as far as its files say (a diffusers folder's ``vae/config.json``)."""
    text = str(base).strip()
    if not text or text == "demo":
        return VaeFacts("base")
    p = expand(text)
    is_dir = _kind(p) == "folder"
    folders = [p / "vae"] if is_dir else [s / "vae" for s in hub_snapshots(text)] if _HUB_ID.match(text) else []
    for folder in folders:
        cfg = read_vae_config(folder)
        if cfg is not None:
            scale = cfg.get("scaling_factor")
            return VaeFacts("base", str(folder), cfg.get("latent_channels"), force_upcast_of(cfg),
                            scaling_factor=float(scale) if isinstance(scale, int | float) else None,
                            downscale=_downscale(cfg))
    return VaeFacts("base")


def vae_fp16_safe(config: TrainingConfig) -> bool:
    """Whether the VAE this config trains with may run in fp16 by its own config (``force_upcast`` false).

    A bare .safetensors file without a config.json beside it is built from the base model's VAE config (as
    the engine does), so the base's says.
    """
    value = str(config.model.vae or "").strip()
    facts = describe_vae(value) if value else VaeFacts("base")
    if facts.kind == "base" or (facts.kind == "file" and facts.force_upcast is None and not facts.problem):
        return base_vae_facts(config.model.base).fp16_safe
    return facts.fp16_safe


def vae_summary(config: TrainingConfig) -> tuple[str, str]:
    """What the Model page says under the VAE setting: ``(level, text)``, level "error" or "" (a fact)."""
    value = str(config.model.vae or "").strip()
    problem = vae_problem(config)
    if problem:
        return "error", problem.rstrip(".") + "."
    if not value:
        return "", "The base model's own VAE."
    facts = describe_vae(value)
    if facts.kind == "hub" and facts.force_upcast is None:
        return "", "A hub VAE, downloaded when training starts (online only)."
    warning = vae_warning(config)
    if warning:
        return "warning", warning + "."
    if vae_fp16_safe(config):
        later = " Downloaded when training starts (online only)." if hub_pending(value) else ""
        return "", "fp16-safe (its config says force_upcast = false): it runs in fp16 under fp16 AMP." + later
    family = registry.facts(config_family(config))
    if not family.precision.vae_upcast:  # its VAE runs in the training precision: nothing about fp16 fixes to say
        channels = f" ({facts.latent_channels} latent channels)" if facts.latent_channels else ""
        return "", f"A VAE file{channels}; it runs in the training precision."
    if facts.force_upcast is None:
        return "", ("No config.json beside the file: it is built like the base model's own VAE and runs as it does; "
                    "an fp16-fixed VAE runs in fp16 with its config.json (force_upcast false) beside it.")
    return "", "Its config asks for fp32 (force_upcast): an SDXL VAE then stays in fp32 under fp16 AMP."


def _fp16_safe_folder(folder: Path) -> str | None:
    """The folder holding an fp16-safe VAE's config and weights (``folder`` or its ``vae/``), else None."""
    facts = _folder_facts(folder, str(folder))
    return facts.path if facts.fp16_safe else None


def find_fp16_safe_vae(config: TrainingConfig) -> str | None:
    """An fp16-safe VAE already on this computer, as ``model.vae`` would name it, or None.

    Looked for in the configured ``model.vae``, the Hugging Face cache (:data:`FP16_FIX_REPO`, named by its hub
    id: loaded from the cache offline, and it survives a new snapshot) and the folders beside the base model
    (e.g. ``models/sdxl-vae-fp16-fix`` next to ``models/sdxl.safetensors``). Cached until those folders change.
    """
    configured = str(config.model.vae or "").strip()
    if configured and describe_vae(configured).fp16_safe:
        return configured
    base = str(config.model.base).strip()
    base_path = expand(base) if base and base != "demo" else None
    parent = base_path.parent if base_path is not None and _kind(base_path) in ("file", "folder") else None
    stamps = tuple(_mtime(p) for p in (_hub_repo(FP16_FIX_REPO) / "snapshots", parent))
    return _find(str(hub_cache_dir()), str(base_path or ""), str(parent or ""), stamps)


def _kind(p: Path) -> str:
    """What is at ``p`` (:func:`safe_open.look`); "missing" also for a path that cannot be looked at."""
    try:
        return safe_open.look(p).kind
    except safe_open.PathError:
        return "missing"


def _mtime(p: Path | None) -> int | None:
    try:
        return p.stat().st_mtime_ns if p is not None else None
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _find(_cache: str, base: str, parent: str, _stamps: tuple[int | None, ...]) -> str | None:
    if any(_fp16_safe_folder(snap) for snap in hub_snapshots(FP16_FIX_REPO)):
        return FP16_FIX_REPO
    if not parent:
        return None
    try:
        with os.scandir(parent) as it:
            siblings = sorted(Path(e.path) for _, e in zip(range(MAX_SIBLINGS), it) if e.is_dir())
    except OSError:
        return None
    for folder in siblings:
        found = _fp16_safe_folder(folder) if str(folder) != base else None
        if found:
            return found
    return None


def hub_pending(value: str) -> bool:
    """``value`` is a hub id that is not in the Hugging Face cache yet (downloaded when training starts)."""
    text = str(value or "").strip()
    return bool(text) and describe_vae(text).kind == "hub" and not hub_snapshots(text)


def vae_warning(config: TrainingConfig) -> str:
    """Why the chosen VAE may not suit the base model although it can be used ("" when nothing to say): a latent
    scale other than the base VAE's (an SD 1.5 VAE on SDXL has SDXL's shapes, not its latents)."""
    value = str(config.model.vae or "").strip()
    facts = describe_vae(value) if value else None
    if facts is None or facts.problem or facts.scaling_factor is None:
        return ""
    own = base_vae_facts(config.model.base).scaling_factor or FAMILY_SCALING.get(config.model.family)
    if own is None or abs(own - facts.scaling_factor) <= 1e-4 * own:
        return ""
    kinds = {v: k for k, v in FAMILY_SCALING.items()}
    theirs = f" ({kinds[facts.scaling_factor].replace('sd15', 'SD 1.5').replace('sdxl', 'SDXL')}'s)" \
        if facts.scaling_factor in kinds else ""
    return (f"The VAE “{value}” scales its latents by {facts.scaling_factor:g}{theirs}, the base model's own VAE by "
            f"{own:g}: the UNet would learn from latents unlike its own. Choose a VAE made for this base model, or "
            "clear the setting")
