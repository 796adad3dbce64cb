"""SD 1.5 on the seam: :class:`~guitrainer.engine.families.stable_diffusion.StableDiffusion` with SD 1.5's facts."""

from guitrainer.core.families.sd15 import FACTS
from guitrainer.engine.families.stable_diffusion import StableDiffusion

FAMILY = StableDiffusion(FACTS)
