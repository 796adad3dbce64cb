"""Stable Diffusion 3.5 (Large, Medium; SD 3 Medium too): the engine side of the family seam (DESIGN.md §2).

Modules: :mod:`.convert` (MMDiT ⇄ diffusers names), :mod:`.loading` (folder, checkpoint, split files),
:mod:`.loaded` (the LoadedModel it makes), :mod:`.text` (the three text encoders),
:mod:`.objective` (flow matching), :mod:`.network` (LoRA targets), :mod:`.export` (the LoRA file layouts),
:mod:`.sampling`.
"""
