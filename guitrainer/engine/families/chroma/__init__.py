"""Chroma (Chroma1-HD, Chroma1-Base): loading from a diffusers folder, one file or split files, T5-XXL text
conditioning with Chroma's attention mask, flow matching on Flux's packed latents, the LoRA's layers and its kohya
file, sampling, the estimator's table.

``FAMILY`` is what :func:`guitrainer.engine.families.registry.family` returns for "chroma"; the modules:
:mod:`.convert` (BFL <-> diffusers layout), :mod:`.loading`, :mod:`.text`, :mod:`.network` (target sets),
:mod:`.export` (the kohya file, both ways, and its metadata), :mod:`.client_keys` (how ComfyUI reads it),
:mod:`.sampling`, :mod:`.spec`.
"""

from guitrainer.engine.families.chroma.family import Chroma

FAMILY = Chroma()

__all__ = ["FAMILY", "Chroma"]
