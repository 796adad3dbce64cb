"""Z-Image (Z-Image-Turbo, Z-Image Base): loading from a diffusers folder, one file or split files, Qwen3-4B text
conditioning through its chat template, flow matching as ZImagePipeline samples it, the LoRA's layers and its two
file layouts, sampling, the estimator's table.

``FAMILY`` is what :func:`guitrainer.engine.families.registry.family` returns for "zimage"; the modules:
:mod:`.convert` (original <-> diffusers layout), :mod:`.loading`, :mod:`.text`, :mod:`.network` (target sets),
:mod:`.export` (both file layouts, both ways, and the metadata), :mod:`.client_keys` (how ComfyUI reads them),
:mod:`.sampling`, :mod:`.spec`.
"""

from guitrainer.engine.families.zimage.family import Zimage

FAMILY = Zimage()

__all__ = ["FAMILY", "Zimage"]
