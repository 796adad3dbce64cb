"""Flux's latent tokens: 2x2 patches of the 16-channel latents packed into 64-channel tokens, and the position
ids its rotary embedding reads.

As diffusers' ``FluxPipeline._pack_latents`` / ``_unpack_latents`` / ``_prepare_latent_image_ids`` (and
sd-scripts' ``"b c (h ph) (w pw) -> b (h w) (c ph pw)"``): token ``(row, col)`` holds channel ``c``'s patch pixel
``(ph, pw)`` at index ``c·4 + ph·2 + pw``; image ids are ``(0, row, col)``, text ids all zero. The ids are 2-D
(``[tokens, 3]``): FluxTransformer2DModel deprecates the batched 3-D form.
"""

from __future__ import annotations

import torch


def pack(latents: torch.Tensor) -> torch.Tensor:
    """``[B, C, h, w]`` -> ``[B, (h/2)(w/2), 4C]``; ``h`` and ``w`` must be even (images a multiple of 16 px)."""
    b, c, h, w = latents.shape
    if h % 2 or w % 2:
        raise ValueError(f"Flux packs 2x2 latent patches: the latents are {h}x{w}; use image sides divisible by 16")
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse of :func:`pack`: ``[B, (h/2)(w/2), 4C]`` -> ``[B, C, h, w]`` for latents ``height`` x ``width``."""
    b, n, d = tokens.shape
    c = d // 4
    x = tokens.view(b, height // 2, width // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, height, width)


def image_ids(height: int, width: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``[(h/2)(w/2), 3]`` ids ``(0, row, col)`` of the packed tokens of ``height`` x ``width`` latents."""
    rows, cols = height // 2, width // 2
    ids = torch.zeros(rows, cols, 3, device=device, dtype=dtype)
    ids[..., 1] = torch.arange(rows, device=device, dtype=dtype)[:, None]
    ids[..., 2] = torch.arange(cols, device=device, dtype=dtype)[None, :]
    return ids.reshape(rows * cols, 3)


def text_ids(tokens: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``[tokens, 3]`` zeros: text tokens carry no position in Flux's rotary embedding."""
    return torch.zeros(tokens, 3, device=device, dtype=dtype)


def image_tokens(height: int, width: int) -> int:
    """Tokens of ``height`` x ``width`` latents (what ``flux_shift`` and the flux μ read)."""
    return (height // 2) * (width // 2)
