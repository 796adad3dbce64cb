"""Stable Diffusion 3.5 (Large, Medium; SD 3 Medium too): the engine side of the family seam (DESIGN.md §2).

``FAMILY`` is what :func:`guitrainer.engine.families.registry.family` returns for "sd35". Beyond the seam it
offers :meth:`SD35.diffusers_state_dict` (the LoRA in the PEFT layout diffusers' SD 3 loader reads) and, in
:mod:`.spec`, the estimator's parameter tables (which ``core/families/sd35.py`` ships as ``SPECS``).

Modules: :mod:`.convert` (MMDiT ⇄ diffusers names), :mod:`.loading` (folder, checkpoint, split files),
:mod:`.loaded` (the LoadedModel it makes), :mod:`.text` (the three text encoders), :mod:`.objective` (flow
matching), :mod:`.network` (LoRA targets), :mod:`.export` (the LoRA file layouts), :mod:`.metadata`,
:mod:`.sampling`, :mod:`.spec`, :mod:`.family` (the seam's class).
"""

from guitrainer.engine.families.sd35.family import SD35

FAMILY = SD35()

__all__ = ["FAMILY", "SD35"]
