"""The LoRA's shape on paper: which layers each target choice trains, and the file-format constants.

One table for the engine (``engine/lora.py`` injects exactly these layers) and the VRAM estimator
(``core/vram.py`` counts them). Pure data: no torch here.
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
#: fp16's largest finite value
FP16_MAX = 65504.0
