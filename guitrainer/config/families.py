"""The model families a config can name (``model.family``), in the order the picker lists them.

The one registry line each family adds to the config; everything else about a family lives in its packages
(``core/families/<name>.py`` for its facts, ``engine/families/<name>/`` for its engine side).
"""

from __future__ import annotations

#: ``model.family`` value -> the name the user reads; "auto" reads the family from the base model's files
FAMILY_LABELS: dict[str, str] = {
    "auto": "Detect",
    "demo": "Demo (tiny)",
    "sd15": "SD 1.5",
    "sdxl": "SDXL",
    "flux1": "Flux.1",
    "sd35": "SD 3.5",
    "chroma": "Chroma",
    "zimage": "Z-Image",
    "qwenimage": "Qwen-Image",
}
FAMILY_NAMES: tuple[str, ...] = tuple(FAMILY_LABELS)
#: the families trained with flow matching (the ``[flow]`` settings apply to them)
FLOW_FAMILIES: tuple[str, ...] = ("flux1", "sd35", "chroma", "zimage", "qwenimage")
#: the families trained on a DDPM schedule (epsilon / v-prediction: min-SNR-γ, noise offset and the like apply)
DIFFUSION_FAMILIES: tuple[str, ...] = ("demo", "sd15", "sdxl")
#: the layouts each family's LoRA can be written in (``output.format``), the first the default. kohya's layout is
#: what ComfyUI, Forge and sd-scripts read for every family. diffusers' layout is what the family's diffusers pipeline
#: reads where the files are not already that: Flux.1's kohya file is what diffusers' Flux loader converts, so its
#: diffusers layout is not written; SD 3.5's diffusers loader reads nothing of kohya's layout, so SD 3.5 writes both.
LORA_FORMATS: dict[str, tuple[str, ...]] = {
    "demo": ("kohya", "diffusers"),
    "sd15": ("kohya", "diffusers"),
    "sdxl": ("kohya", "diffusers"),
    "flux1": ("kohya",),
    "sd35": ("kohya", "diffusers"),
    "chroma": ("kohya",),
    "zimage": ("kohya", "diffusers"),
    "qwenimage": ("kohya", "diffusers"),
}
