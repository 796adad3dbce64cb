"""Qwen-Image: loading from a diffusers folder, one file or split files, Qwen2.5-VL-7B text conditioning through its
system template, flow matching on the 3-D VAE's normalised latents as QwenImagePipeline samples it, the LoRA's
layers and its two file layouts, sampling, the estimator's table.

``FAMILY`` is what :func:`guitrainer.engine.families.registry.family` returns for "qwenimage"; the modules:
:mod:`.loading`, :mod:`.text`, :mod:`.network` (target sets), :mod:`.export` (both file layouts, both ways, and the
metadata), :mod:`.client_keys` (how ComfyUI reads them), :mod:`.sampling`, :mod:`.spec`.
"""

from guitrainer.engine.families.qwenimage.family import QwenImage

FAMILY = QwenImage()

__all__ = ["FAMILY", "QwenImage"]
