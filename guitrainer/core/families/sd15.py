"""Stable Diffusion 1.x: a UNet on a DDPM schedule (epsilon or v-prediction), one CLIP-L text encoder, a 4-channel
VAE, trained at 512 px (the CompVis / RunwayML model card)."""

from __future__ import annotations

from guitrainer.core.families.facts import FamilyFacts, ModelSpec, PrecisionFacts, QuantisableLinears

#: parameter counts and LoRA layer tables, computed from the bundled configs on ``meta`` by
#: :func:`guitrainer.engine.memory.model_spec.compute_model_spec` (``tests/test_vram.py`` recomputes them)
# fmt: off
SPEC = ModelSpec(
    family='sd15',
    denoiser=859520964,
    text_encoders=(123060480,),
    vae_encoder=34163664,
    vae_decoder=49490199,
    vae_channels=128,
    text_encoder_shapes=((768, 3072, 12),),
    cross_attention_dim=768,
    denoiser_lora={
        "attention": ((320, 320, 30, 1.0), (640, 640, 30, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 1280, 6, 0.015625), (1280, 1280, 30, 0.0625)),
        "attention_ff": ((320, 320, 30, 1.0), (320, 2560, 5, 1.0), (640, 640, 30, 0.25), (640, 5120, 5, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 320, 5, 1.0), (1280, 1280, 6, 0.015625), (1280, 1280, 30, 0.0625), (1280, 10240, 1, 0.015625), (1280, 10240, 5, 0.0625), (2560, 640, 5, 0.25), (5120, 1280, 1, 0.015625), (5120, 1280, 5, 0.0625)),
        "attention_ff_proj": ((320, 320, 40, 1.0), (320, 2560, 5, 1.0), (640, 640, 40, 0.25), (640, 5120, 5, 0.25), (768, 320, 10, 0.0), (768, 640, 10, 0.0), (768, 1280, 12, 0.0), (1280, 320, 5, 1.0), (1280, 1280, 8, 0.015625), (1280, 1280, 40, 0.0625), (1280, 10240, 1, 0.015625), (1280, 10240, 5, 0.0625), (2560, 640, 5, 0.25), (5120, 1280, 1, 0.015625), (5120, 1280, 5, 0.0625)),
    },
    text_encoder_lora={
        "attention": (((768, 768, 48, 0.0),),),
        "attention_ff": (((768, 768, 48, 0.0),),),
        "attention_ff_proj": (((768, 768, 48, 0.0),),),
    },
    offload_blocks=(
        (2255040, 2255040, 6558080, 8196480, 24584960, 31138560, 31138560, 31138560, 31138560, 49164800, 49164800, 49164800, 49164800, 49164800, 40971520, 16801280, 12704000, 10655360, 4407040, 3382400, 3382400),
        (2340160, 2340160, 8366720, 8366720, 31479040, 31479040, 31479040, 31479040, 31479040, 31479040, 8366720, 8366720, 8366720, 2340160, 2340160, 2340160),
    ),
    quantisable=QuantisableLinears(weights=242196480, rows=212160, layers=160, largest=13107200),
)
#: ``(in channels, out, kernel side, count, positions per latent pixel)`` of the UNet layers the variants add
#: (ResNet conv1 / conv2 / conv_shortcut / time_emb_proj, down- and upsampler convs;
#: :mod:`guitrainer.engine.memory.variant_spec` recomputes them)
CONV_TABLE = ((320, 320, 3, 8, 1.0), (320, 640, 1, 1, 0.25), (320, 640, 3, 1, 0.25), (640, 320, 1, 2, 1.0), (640, 320, 3, 2, 1.0), (640, 640, 3, 1, 1.0), (640, 640, 3, 7, 0.25), (640, 1280, 1, 1, 0.0625), (640, 1280, 3, 1, 0.0625), (960, 320, 1, 1, 1.0), (960, 320, 3, 1, 1.0), (960, 640, 1, 1, 0.25), (960, 640, 3, 1, 0.25), (1280, 320, 1, 5, 0.0), (1280, 640, 1, 1, 0.25), (1280, 640, 1, 5, 0.0), (1280, 640, 3, 1, 0.25), (1280, 1280, 1, 12, 0.0), (1280, 1280, 3, 1, 0.25), (1280, 1280, 3, 8, 0.0625), (1280, 1280, 3, 11, 0.015625), (1920, 640, 1, 1, 0.25), (1920, 640, 3, 1, 0.25), (1920, 1280, 1, 1, 0.0625), (1920, 1280, 3, 1, 0.0625), (2560, 1280, 1, 2, 0.0625), (2560, 1280, 1, 3, 0.015625), (2560, 1280, 3, 2, 0.0625), (2560, 1280, 3, 3, 0.015625))
#: per text encoder, ``(in, out, count)`` of its MLP layers (fc1 / fc2), which every variant trains
TEXT_ENCODER_MLP_TABLES = (((768, 3072, 12), (3072, 768, 12)),)
# fmt: on

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
    spec=SPEC,
    conv_table=CONV_TABLE,
    text_encoder_mlp_tables=TEXT_ENCODER_MLP_TABLES,
)
