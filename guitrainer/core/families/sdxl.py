"""SDXL 1.0: a UNet with size conditioning on a DDPM schedule, CLIP-L and OpenCLIP bigG text encoders, a 4-channel
VAE whose own decoder overflows in fp16 (hence madebyollin's fp16-fixed VAE), trained at 1024 px."""

from __future__ import annotations

from guitrainer.core.families.facts import FamilyFacts, ModelSpec, PrecisionFacts, QuantisableLinears

#: parameter counts and LoRA layer tables, computed from the bundled configs on ``meta`` by
#: :func:`guitrainer.engine.memory.model_spec.compute_model_spec` (``tests/test_vram.py`` recomputes them)
# fmt: off
SPEC = ModelSpec(
    family='sdxl',
    denoiser=2567463684,
    text_encoders=(123060480, 694659840),
    vae_encoder=34163664,
    vae_decoder=49490199,
    vae_channels=128,
    text_encoder_shapes=((768, 3072, 12), (1280, 5120, 32)),
    cross_attention_dim=2048,
    denoiser_lora={
        "attention": ((640, 640, 60, 0.25), (1280, 1280, 360, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0)),
        "attention_ff": ((640, 640, 60, 0.25), (640, 5120, 10, 0.25), (1280, 1280, 360, 0.0625), (1280, 10240, 60, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0), (2560, 640, 10, 0.25), (5120, 1280, 60, 0.0625)),
        "attention_ff_proj": ((640, 640, 70, 0.25), (640, 5120, 10, 0.25), (1280, 1280, 372, 0.0625), (1280, 10240, 60, 0.0625), (2048, 640, 20, 0.0), (2048, 1280, 120, 0.0), (2560, 640, 10, 0.25), (5120, 1280, 60, 0.0625)),
    },
    text_encoder_lora={
        "attention": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
        "attention_ff": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
        "attention_ff_proj": (((768, 768, 48, 0.0),), ((1280, 1280, 128, 0.0),)),
    },
    offload_blocks=(
        (2255040, 2255040, 6558080, 8196480, 24584960, 31138560, 31138560, 49164800, 49164800, 40971520, 16801280, 12704000, 10655360, 4407040, 3382400, 3382400),
        (10005120, 10005120, 10005120, 10005120, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 34755840, 10005120, 10005120, 10005120, 10005120, 10005120, 10005120),
    ),
    quantisable=QuantisableLinears(weights=2183987200, rows=1414400, layers=700, largest=13107200),
)
#: ``(in channels, out, kernel side, count, positions per latent pixel)`` of the UNet layers the variants add
#: (ResNet conv1 / conv2 / conv_shortcut / time_emb_proj, down- and upsampler convs;
#: :mod:`guitrainer.engine.memory.variant_spec` recomputes them)
CONV_TABLE = ((320, 320, 3, 8, 1.0), (320, 640, 1, 1, 0.25), (320, 640, 3, 1, 0.25), (640, 320, 1, 2, 1.0), (640, 320, 3, 2, 1.0), (640, 640, 3, 1, 1.0), (640, 640, 3, 7, 0.25), (640, 1280, 1, 1, 0.0625), (640, 1280, 3, 1, 0.0625), (960, 320, 1, 1, 1.0), (960, 320, 3, 1, 1.0), (960, 640, 1, 1, 0.25), (960, 640, 3, 1, 0.25), (1280, 320, 1, 5, 0.0), (1280, 640, 1, 1, 0.25), (1280, 640, 1, 5, 0.0), (1280, 640, 3, 1, 0.25), (1280, 1280, 1, 7, 0.0), (1280, 1280, 3, 1, 0.25), (1280, 1280, 3, 10, 0.0625), (1920, 640, 1, 1, 0.25), (1920, 640, 3, 1, 0.25), (1920, 1280, 1, 1, 0.0625), (1920, 1280, 3, 1, 0.0625), (2560, 1280, 1, 2, 0.0625), (2560, 1280, 3, 2, 0.0625))
#: per text encoder, ``(in, out, count)`` of its MLP layers (fc1 / fc2), which every variant trains
TEXT_ENCODER_MLP_TABLES = (((768, 3072, 12), (3072, 768, 12)), ((1280, 5120, 32), (5120, 1280, 32)))
# fmt: on

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
    spec=SPEC,
    conv_table=CONV_TABLE,
    text_encoder_mlp_tables=TEXT_ENCODER_MLP_TABLES,
)
