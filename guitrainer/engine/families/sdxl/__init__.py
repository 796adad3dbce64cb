"""SDXL on the seam: :class:`~guitrainer.engine.families.stable_diffusion.StableDiffusion` with SDXL's facts."""

from guitrainer.core.families.sdxl import FACTS
from guitrainer.engine.families.stable_diffusion import StableDiffusion

FAMILY = StableDiffusion(FACTS)
