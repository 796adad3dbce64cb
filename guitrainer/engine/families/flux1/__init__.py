"""Flux.1 (dev and schnell): loading from a diffusers folder, one file or split files, T5 + CLIP text
conditioning, flow matching on packed latents, the LoRA's layers and its kohya file, sampling, the estimator's
table.

``FAMILY`` is what :func:`guitrainer.engine.families.registry.family` returns for "flux1"; the modules:
:mod:`.convert` (BFL <-> diffusers layout), :mod:`.loading`, :mod:`.text`, :mod:`.latents`, :mod:`.network`
(target sets), :mod:`.export` (the kohya file, both ways, and its metadata), :mod:`.sampling`, :mod:`.spec`.
"""

from guitrainer.engine.families.flux1.family import Flux1

FAMILY = Flux1()

__all__ = ["FAMILY", "Flux1"]
