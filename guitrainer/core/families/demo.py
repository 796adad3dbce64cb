"""The built-in demo: a tiny SD-1.x-shaped model of our own that trains on a CPU in seconds (64 px)."""

from __future__ import annotations

from guitrainer.core.families.facts import FamilyFacts, PrecisionFacts

FACTS = FamilyFacts(
    name="demo",
    label="Demo (tiny)",
    architecture="unet",
    objective="diffusion",
    native_resolution=64,
    latent_channels=4,
    text_encoders=("CLIP (tiny)",),
    trainable_text_encoders=(0,),
    precision=PrecisionFacts(released="fp32"),
    base_model_version="guitrainer_demo",  # no real client can use a demo LoRA: its metadata says so
    modelspec_architecture="guitrainer-demo",
)
