"""The VAE a run encodes with: the base model's own, or ``model.vae`` (a diffusers VAE folder, one .safetensors
file, or a hub id), and whether it runs in fp16.

What a folder or file holds is read by :mod:`guitrainer.core.model.vae_choice` (the same answer the settings pages
show); here the weights are loaded. Whether a VAE may run in fp16 comes from its own config (diffusers'
``force_upcast``), not from its name: :func:`vae_needs_fp32`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.errors import first_line
from guitrainer.core.model import vae_choice
from guitrainer.engine.models.hub import HUB_ADVICE, download_model, is_offline
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, Progress, model_identity

log = logging.getLogger(__name__)

#: the files of a diffusers VAE repo (madebyollin/sdxl-vae-fp16-fix keeps them at its root), or of a whole
#: pipeline repo's VAE (its ``vae/`` folder: only those two files are fetched)
VAE_HUB_PATTERNS = ["config.json", vae_choice.VAE_WEIGHTS, "vae/config.json", f"vae/{vae_choice.VAE_WEIGHTS}"]


def vae_needs_fp32(precision: str, family_upcasts: bool, force_upcast: bool, device_type: str) -> bool:
    """Whether the frozen VAE stays fp32 while the rest runs in ``precision``.

    Only under fp16: on a CPU (no fast fp16 convolutions: a 64 px demo step is 10x slower), and for a family
    whose VAE overflows in fp16 (``family_upcasts``, :attr:`~guitrainer.core.families.facts.PrecisionFacts.vae_upcast`:
    SDXL's) when the VAE's config asks for it (``force_upcast``; the fp16-fixed SDXL VAE says false). SD 1.5's VAE
    runs in fp16 whatever its config says (diffusers' default is true), as before.
    """
    return precision == "fp16" and (device_type == "cpu" or (family_upcasts and force_upcast))


def force_upcast(vae: Any) -> bool:
    """The loaded VAE's ``force_upcast`` (diffusers' default, true, when its config does not say)."""
    return bool(vae.config.get("force_upcast", True))


def use_configured_vae(
    m: LoadedModel, value: str, *, offline: bool | None = None, progress: Progress | None = None,
    dtype: torch.dtype = torch.float32,
) -> None:
    """Replace ``m.vae`` with the VAE ``value`` names (nothing to do when it is empty), in ``dtype``; ``m.vae_identity``
    names it.

    Raises:
        ModelLoadError: the VAE is missing, is not a VAE, or makes latents the UNet cannot take.
    """
    text = str(value).strip()
    if not text:
        return
    facts = vae_choice.describe_vae(text)
    if facts.problem:
        raise ModelLoadError(f"model.vae: {facts.problem}")
    if facts.kind == "file":
        vae = _load_file(Path(facts.path), m.vae)
        identity = model_identity(facts.path)
    else:
        folder = _hub_folder(text, offline, progress) if facts.kind == "hub" else Path(facts.path)
        vae = _load_folder(folder, text)
        identity = model_identity(folder)
    wanted = int(m.denoiser.config.in_channels)
    if int(vae.config.latent_channels) != wanted:
        raise ModelLoadError(
            f"model.vae: {text} makes {vae.config.latent_channels}-channel latents, but the base model's UNet takes "
            f"{wanted}: choose an SD 1.5 / SDXL VAE, or clear the setting to use the base model's own VAE"
        )
    vae.to(dtype)
    vae.requires_grad_(False)
    vae.eval()
    m.vae, m.vae_identity = vae, identity
    log.info("VAE: %s (force_upcast %s)", text, force_upcast(vae))


def _load_folder(folder: Path, shown: str) -> Any:
    from diffusers import AutoencoderKL

    found = vae_choice.vae_config_folder(folder) or folder
    try:
        return AutoencoderKL.from_pretrained(str(found), local_files_only=True, use_safetensors=True)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelLoadError(f"model.vae: {shown} is not a usable diffusers VAE folder: {e}") from e


def _hub_folder(repo_id: str, offline: bool | None, progress: Progress | None) -> Path:
    """A hub VAE's folder: downloaded (online), else its snapshot in the Hugging Face cache."""
    if offline is None:
        offline = is_offline()
    if not offline:
        return download_model(repo_id, progress, patterns=VAE_HUB_PATTERNS, what="VAE")
    for snap in vae_choice.hub_snapshots(repo_id):
        found = vae_choice.vae_config_folder(snap)  # the snapshot itself, or a pipeline's vae/
        if found is not None and (found / vae_choice.VAE_WEIGHTS).is_file():
            return snap
    raise ModelLoadError(
        f"model.vae: could not load the VAE {repo_id!r}: working offline, and it is not in the Hugging Face cache",
        ("connect to the network and unset HF_HUB_OFFLINE to download it", *HUB_ADVICE[1:]),
    )


def _load_file(path: Path, base_vae: Any) -> Any:
    """One .safetensors VAE file, diffusers or original (ldm) layout, built offline.

    The architecture comes from a config.json beside the file (a hub snapshot has one), else from the base
    model's own VAE (SD 1.5 and SDXL VAEs share it).
    """
    from diffusers import AutoencoderKL
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint
    from safetensors.torch import load_file

    side = vae_choice.read_vae_config(path.parent)
    config = dict(side) if side is not None else dict(base_vae.config)
    try:
        state = load_file(str(path))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ModelLoadError(f"model.vae: {path.name} cannot be read as .safetensors: {e}") from e
    vae = AutoencoderKL.from_config(config)
    for prefix in vae_choice.VAE_KEY_PREFIXES:
        if any(k.startswith(prefix) for k in state):
            state = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
            break
    if not any(".down_blocks." in k for k in state):  # the original (ldm) layout: encoder.down.0.block.0...
        state = convert_ldm_vae_checkpoint(state, vae.config)
    try:
        vae.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ModelLoadError(
            f"model.vae: {path.name} does not match the VAE architecture in "
            f"{path.parent / 'config.json' if side is not None else 'the base model'}: {first_line(e, 300)}"
        ) from e
    return vae



