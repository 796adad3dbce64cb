"""SDXL 1.0: a UNet with size conditioning on a DDPM schedule, CLIP-L and OpenCLIP bigG text encoders, a 4-channel
VAE whose own decoder overflows in fp16 (hence madebyollin's fp16-fixed VAE), trained at 1024 px."""

from __future__ import annotations

from guitrainer.core.families.facts import FamilyFacts, PrecisionFacts

FACTS = FamilyFacts(
    name="sdxl",
    label="SDXL",
    architecture="unet",
    objective="diffusion",
    native_resolution=1024,
    latent_channels=4,
    text_encoders=("CLIP-L", "CLIP-G"),
    trainable_text_encoders=(0, 1),
    precision=PrecisionFacts(
        released="fp16",
        fp16_overflows="SDXL's own VAE overflows in fp16 (its config sets force_upcast; madebyollin/sdxl-vae-fp16-fix "
        "rescales it to fit)",
        vae_upcast=True,
        sources=("stabilityai/stable-diffusion-xl-base-1.0 vae/config.json: force_upcast true",
                 "huggingface.co/madebyollin/sdxl-vae-fp16-fix model card"),
    ),
    base_model_version="sdxl_base_v1-0",  # sd-scripts' sdxl_train_network metadata
    modelspec_architecture="stable-diffusion-xl-v1-base",
    hub_patterns=("xl",),
)
