"""kohya's UNet module names: the diffusers layout for SD 1.x / 2.x, the original (LDM/SGM) layout for SDXL.

kohya's sd-scripts trains SD 1.x on a UNet that keeps diffusers' module paths (``library/original_unet.py``),
and SDXL on its port of Stability's UNet (``library/sdxl_original_unet.py``), whose paths are the original
checkpoint's: ``input_blocks.4.1.transformer_blocks.0.attn1.to_q``. A LoRA module is named after its path
with ``.`` as ``_``, so kohya's SDXL files hold ``lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q``
where the diffusers spelling would be ``lora_unet_down_blocks_1_attentions_0_...``. ComfyUI and A1111/Forge
run the original layout and look SDXL names up there; diffusers maps them back
(``_maybe_map_sgm_blocks_to_diffusers``). This module gives both spellings of every UNet layer, so files are
written as kohya writes them and read in either.

The original layout, level by level (``n`` = resnets per level; SDXL: 2 down, 3 up):

* ``input_blocks.0.0`` = ``conv_in``; each down level adds ``n`` blocks ``[resnet, attention?]`` and, when it
  downsamples, one block ``[Downsample]`` whose conv is ``op``;
* ``middle_block.0`` / ``.1`` / ``.2`` = ``mid_block.resnets.0`` / ``attentions.0`` / ``resnets.1``;
* each up level adds ``n`` blocks ``[resnet, attention?, Upsample?]``, the upsampler in the level's last;
* a resnet's ``norm1 conv1 time_emb_proj norm2 conv2 conv_shortcut`` are ``in_layers.0 in_layers.2
  emb_layers.1 out_layers.0 out_layers.3 skip_connection``; attention blocks keep their inner names.
"""

from __future__ import annotations

from torch import nn

UNET_PREFIX = "lora_unet"

#: a diffusers ResnetBlock2D's layers in the original ResBlock
_RESNET = {
    "norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
    "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection",
}
#: layers outside the blocks
_TOP = {
    "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2",
    "time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
    "add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2",
}


def uses_original_layout(unet: nn.Module) -> bool:
    """True for SDXL-family UNets (added text/time conditioning), whose kohya names are the original layout's."""
    return getattr(getattr(unet, "config", None), "addition_embed_type", None) == "text_time"


def block_map(unet: nn.Module) -> dict[str, tuple[str, dict[str, str]]]:
    """diffusers block path -> (original block path, renaming of the block's first inner name)."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    index = 1
    for b, block in enumerate(getattr(unet, "down_blocks", ())):
        attentions = getattr(block, "attentions", None)
        for i in range(len(block.resnets)):
            out[f"down_blocks.{b}.resnets.{i}"] = (f"input_blocks.{index}.0", _RESNET)
            if attentions is not None:
                out[f"down_blocks.{b}.attentions.{i}"] = (f"input_blocks.{index}.1", {})
            index += 1
        if getattr(block, "downsamplers", None) is not None:
            out[f"down_blocks.{b}.downsamplers.0"] = (f"input_blocks.{index}.0", {"conv": "op"})
            index += 1
    mid = getattr(unet, "mid_block", None)
    if mid is not None:
        out["mid_block.resnets.0"] = ("middle_block.0", _RESNET)
        if getattr(mid, "attentions", None) is not None:
            out["mid_block.attentions.0"] = ("middle_block.1", {})
            out["mid_block.resnets.1"] = ("middle_block.2", _RESNET)
        elif len(mid.resnets) > 1:
            out["mid_block.resnets.1"] = ("middle_block.1", _RESNET)
    index = 0
    for b, block in enumerate(getattr(unet, "up_blocks", ())):
        attentions = getattr(block, "attentions", None)
        for i in range(len(block.resnets)):
            out[f"up_blocks.{b}.resnets.{i}"] = (f"output_blocks.{index}.0", _RESNET)
            if attentions is not None:
                out[f"up_blocks.{b}.attentions.{i}"] = (f"output_blocks.{index}.1", {})
            index += 1
        if getattr(block, "upsamplers", None) is not None:
            slot = 2 if attentions is not None else 1
            out[f"up_blocks.{b}.upsamplers.0"] = (f"output_blocks.{index - 1}.{slot}", {})
    return out


def original_path(path: str, blocks: dict[str, tuple[str, dict[str, str]]]) -> str | None:
    """The original-layout path of the diffusers module ``path`` (``blocks`` from :func:`block_map`); None if none."""
    if path in _TOP:
        return _TOP[path]
    parts = path.split(".")
    head = 3 if parts[0] == "mid_block" else 4
    block = ".".join(parts[:head])
    if block not in blocks:
        return None
    target, inner = blocks[block]
    rest = parts[head:]
    if rest and rest[0] in inner:
        rest = inner[rest[0]].split(".") + rest[1:]
    return ".".join([target, *rest])


def _name(path: str) -> str:
    return f"{UNET_PREFIX}_{path.replace('.', '_')}"


class UnetNames:
    """kohya's name of each UNet layer (:meth:`name`) and every spelling a file may use for it (:meth:`aliases`)."""

    def __init__(self, unet: nn.Module):
        self.original = uses_original_layout(unet)
        self._blocks = block_map(unet)

    def name(self, path: str) -> str:
        """The name kohya writes for the layer at diffusers ``path`` (a peft-wrapped ``.base_layer`` is the layer)."""
        path = path.removesuffix(".base_layer")
        original = original_path(path, self._blocks) if self.original else None
        return _name(original or path)

    def aliases(self, path: str) -> list[str]:
        """Both spellings (diffusers and original layout) of the layer at ``path``, kohya's own first."""
        path = path.removesuffix(".base_layer")
        original = original_path(path, self._blocks)
        names = [self.name(path), _name(path), *([_name(original)] if original else [])]
        return list(dict.fromkeys(names))
