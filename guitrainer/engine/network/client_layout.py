"""What the clients know of a family whose LoRA files name the original model's layers: the map a family gives
Verify, so Verify can merge a file by the clients' rules (:mod:`guitrainer.engine.verify.client_rules`).

Flux's and SD 3's files name the layers of the original models (BFL's ``double_blocks.0.img_attn.qkv``, the
MMDiT's ``joint_blocks.0.x_block.attn.qkv``), which fuse what diffusers splits. ComfyUI reads such a file on
its own model, which has the original layout, and knows diffusers' names only through one table per family
(``comfy/utils.py`` ``flux_to_diffusers``, ``mmdit_to_diffusers``): diffusers key -> the original key, or a row
slice ``(dim, start, length)`` of a fused original weight, or the original key with a function on the way
(``swap_scale_shift``, the final layer's (shift, scale) halves). :class:`ClientLayout` carries that table for
one built model (:attr:`ClientLayout.denoiser`: a function of the denoiser, since the slices depend on its
width and its block counts), ComfyUI's names of the text encoders (which decide their kohya prefixes in
``model_lora_keys_clip``), the spellings of diffusers-named LoRA keys ComfyUI accepts for the family, and what
the other programs make of the file, for the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torch import nn


@dataclass(frozen=True)
class Original:
    """Where one diffusers weight is in the original model: ``key`` (``double_blocks.0.img_attn.qkv.weight``);
    ``rows`` = (start, length) of the original weight's dim 0 that it is (ComfyUI's ``(0, start, length)``), None
    for all of it; ``swapped``: its two halves of rows are the original's swapped (ComfyUI's ``swap_scale_shift``).
    """

    key: str
    rows: tuple[int, int] | None = None
    swapped: bool = False


#: ``denoiser -> {diffusers parameter name: Original}`` for every parameter the clients' table names
DenoiserMap = Callable[[nn.Module], dict[str, Original]]


@dataclass(frozen=True)
class Spelling:
    """One way a LoRA file may name a diffusers module that ComfyUI accepts for the family: ``prefix`` before the
    module path, its dots as ``_`` when ``underscores`` (``transformer.`` + path; ``lora_transformer_`` + path_)."""

    prefix: str
    underscores: bool = False

    def name(self, module: str) -> str:
        return self.prefix + (module.replace(".", "_") if self.underscores else module)


@dataclass(frozen=True)
class ClientLayout:
    """A family's file layout as the clients read it (see the module docstring).

    Attributes:
        denoiser: ComfyUI's diffusers -> original table for a built denoiser.
        text_encoders: ComfyUI's name of each text encoder, in the model's order ("clip_l", "clip_g", "t5xxl").
        diffusers_spellings: the diffusers-named LoRA keys ComfyUI reads for this family's denoiser.
        readers: file layout ("kohya", "diffusers") -> what sd-scripts, diffusers and the others make of such a
            file, with their sources, for the verdict ("" for a layout the family does not write).
    """

    denoiser: DenoiserMap
    text_encoders: tuple[str, ...]
    diffusers_spellings: tuple[Spelling, ...] = ()
    readers: Mapping[str, str] = field(default_factory=dict)
