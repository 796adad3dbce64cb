"""Constants that more than one layer shares: the file kinds the app reads, and fp16's largest value."""

from __future__ import annotations

#: images the dataset reads (lower-case suffixes)
IMAGE_EXTENSIONS: frozenset[str] = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp"})

#: single-file checkpoints in torch's pickle format: loading one can run code, so they are read only as tensor
#: names (never unpickled) and refused where a .safetensors file or a diffusers folder is asked for
PICKLE_SUFFIXES: tuple[str, ...] = (".ckpt", ".pt", ".pth", ".bin")

#: the largest finite float16 value: a LoRA saved in fp16 must stay inside ±FP16_MAX
FP16_MAX = 65504.0
