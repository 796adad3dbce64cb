"""Stable Diffusion 1.x: a UNet on a DDPM schedule (epsilon or v-prediction), one CLIP-L text encoder, a 4-channel
VAE, trained at 512 px (the CompVis / RunwayML model card)."""

from __future__ import annotations

from guitrainer.core.families.facts import FamilyFacts, PrecisionFacts

FACTS = FamilyFacts(
    name="sd15",
    label="SD 1.5",
    architecture="unet",
    objective="diffusion",
    native_resolution=512,
    latent_channels=4,
    text_encoders=("CLIP-L",),
    trainable_text_encoders=(0,),
    precision=PrecisionFacts(released="fp32", sources=("runwayml/stable-diffusion-v1-5 model card: fp32 and fp16 weights",)),
    base_model_version="sd_v1",  # sd-scripts' sai_model_spec / train_network: SD 1.x
    modelspec_architecture="stable-diffusion-v1",
    hub_patterns=("v1-5", "v1.5", "sd15", "sd-1-5", "stable-diffusion-v1"),
)
