"""The built-in demo: a tiny SD-1.x-shaped model of our own that draws flat shapes at 64 px and trains on a CPU."""

from __future__ import annotations

from guitrainer.core.families.facts import FamilyFacts, ModelSpec, PrecisionFacts, QuantisableLinears

#: parameter counts and LoRA layer tables, computed from the bundled configs on ``meta`` by
#: :func:`guitrainer.engine.memory.model_spec.compute_model_spec` (``tests/test_vram.py`` recomputes them)
# fmt: off
SPEC = ModelSpec(
    family='demo',
    denoiser=1055044,
    text_encoders=(51616,),
    vae_encoder=367344,
    vae_decoder=587223,
    vae_channels=32,
    text_encoder_shapes=((32, 64, 2),),
    cross_attention_dim=32,
    denoiser_lora={
        "attention": ((32, 32, 6, 0.0), (32, 32, 18, 1.0), (32, 64, 8, 0.0), (64, 64, 24, 0.25)),
        "attention_ff": ((32, 32, 6, 0.0), (32, 32, 18, 1.0), (32, 64, 8, 0.0), (32, 256, 3, 1.0), (64, 64, 24, 0.25), (64, 512, 4, 0.25), (128, 32, 3, 1.0), (256, 64, 4, 0.25)),
        "attention_ff_proj": ((32, 32, 6, 0.0), (32, 32, 24, 1.0), (32, 64, 8, 0.0), (32, 256, 3, 1.0), (64, 64, 32, 0.25), (64, 512, 4, 0.25), (128, 32, 3, 1.0), (256, 64, 4, 0.25)),
    },
    text_encoder_lora={
        "attention": (((32, 32, 8, 0.0),),),
        "attention_ff": (((32, 32, 8, 0.0),),),
        "attention_ff_proj": (((32, 32, 8, 0.0),),),
    },
    offload_blocks=(
        (22752, 65984, 82368, 127616, 107072, 44416, 34112),
        (21024, 78912, 78912, 78912, 78912, 21024, 21024),
    ),
    quantisable=QuantisableLinears(weights=372736, rows=5984, layers=70, largest=32768),
)
#: ``(in channels, out, kernel side, count, positions per latent pixel)`` of the UNet layers the variants add
#: (ResNet conv1 / conv2 / conv_shortcut / time_emb_proj, down- and upsampler convs;
#: :mod:`guitrainer.engine.memory.variant_spec` recomputes them)
CONV_TABLE = ((32, 32, 3, 5, 1.0), (32, 64, 1, 1, 0.25), (32, 64, 3, 1, 0.25), (64, 32, 1, 1, 1.0), (64, 32, 3, 1, 1.0), (64, 64, 3, 1, 1.0), (64, 64, 3, 7, 0.25), (96, 32, 1, 1, 1.0), (96, 32, 3, 1, 1.0), (96, 64, 1, 1, 0.25), (96, 64, 3, 1, 0.25), (128, 32, 1, 3, 0.0), (128, 64, 1, 1, 0.25), (128, 64, 1, 5, 0.0), (128, 64, 3, 1, 0.25))
#: per text encoder, ``(in, out, count)`` of its MLP layers (fc1 / fc2), which every variant trains
TEXT_ENCODER_MLP_TABLES = (((32, 64, 2), (64, 32, 2)),)
# fmt: on

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
    spec=SPEC,
    conv_table=CONV_TABLE,
    text_encoder_mlp_tables=TEXT_ENCODER_MLP_TABLES,
)
