"""The LoRA's shape on paper: which layers each target choice trains, and the file-format constants.

One table for the engine (``engine/network/lora.py`` injects exactly these layers) and the VRAM estimator
(``core/memory/estimate.py`` counts them). Pure data: no torch here.
"""

from __future__ import annotations

#: which UNet layers each ``network.target_modules`` choice trains (peft name suffixes)
UNET_LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "attention": ("to_q", "to_k", "to_v", "to_out.0"),
    "attention_ff": ("to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"),
    "attention_ff_proj": ("to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2", "proj_in", "proj_out"),
}
#: a CLIP text encoder's LoRA covers its attention projections
TEXT_ENCODER_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "out_proj")
#: the same per ``network.target_modules`` choice (whatever the UNet's set), as the estimator looks it up
TEXT_ENCODER_LORA_TARGETS: dict[str, tuple[str, ...]] = {target: TEXT_ENCODER_TARGETS for target in UNET_LORA_TARGETS}

#: the weights file of the diffusers format (``<folder>/<name>/pytorch_lora_weights.safetensors``)
DIFFUSERS_WEIGHT_NAME = "pytorch_lora_weights.safetensors"

#: the network types (``network.type``); every one but plain LoRA also trains :data:`CONV_UNET_TARGETS`
NETWORK_TYPES: tuple[str, ...] = ("lora", "locon", "loha", "lokr", "dora")
#: kohya's conv_dim variant adds the UNet's ResnetBlock2D, Downsample2D and Upsample2D layers (peft name suffixes)
CONV_UNET_TARGETS: tuple[str, ...] = (
    "conv1", "conv2", "conv_shortcut", "time_emb_proj", "downsamplers.0.conv", "upsamplers.0.conv",
)
#: kohya trains the CLIP MLP too (CLIPMLP in its text-encoder module list)
TEXT_ENCODER_MLP_TARGETS: tuple[str, ...] = ("fc1", "fc2")


def unet_targets(network_type: str, target_modules: str) -> tuple[str, ...]:
    """The UNet layers a ``network.type`` trains for a ``network.target_modules`` choice."""
    base = UNET_LORA_TARGETS[target_modules]
    return base if network_type == "lora" else base + CONV_UNET_TARGETS


def text_encoder_targets(network_type: str) -> tuple[str, ...]:
    """The CLIP layers a ``network.type`` trains: attention only for plain LoRA (as before), plus the MLP otherwise."""
    return TEXT_ENCODER_TARGETS if network_type == "lora" else TEXT_ENCODER_TARGETS + TEXT_ENCODER_MLP_TARGETS
