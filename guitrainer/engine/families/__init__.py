"""One package per model family (``sd15``, ``sdxl``, ``flux1``, ``sd35``, …), each a
:class:`~guitrainer.engine.families.base.Family`: loading, text encoding, latents, the objective, the LoRA's
layers and file layout, sampling."""
