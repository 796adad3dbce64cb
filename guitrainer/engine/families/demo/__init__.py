"""The demo on the seam: :class:`~guitrainer.engine.families.stable_diffusion.StableDiffusion` with the demo's facts
(its model ships in ``resources/models/demo_base``: :mod:`guitrainer.engine.models.demo`)."""

from guitrainer.core.families.demo import FACTS
from guitrainer.engine.families.stable_diffusion import StableDiffusion

FAMILY = StableDiffusion(FACTS)
