"""The tables Verify reads Flux and SD 3.5 files by (ComfyUI's ``flux_to_diffusers`` / ``mmdit_to_diffusers``,
transcribed in ``families/<name>/client_keys.py``) against the families' own converters, written from diffusers'
converters: two transcriptions of one correspondence must agree weight for weight (tiny models, real values) and
name for name at full size (``meta``), and every module of a full-size file must be one the key map reads, of the
shape of the weight (or slice) it patches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import tiny_flux
from helpers.tiny_sd35 import build_tiny_sd35

from guitrainer.engine.families.flux1 import FAMILY as FLUX
from guitrainer.engine.families.flux1 import convert as flux_convert
from guitrainer.engine.families.flux1 import export as flux_export
from guitrainer.engine.families.flux1 import network as flux_network
from guitrainer.engine.families.sd35 import FAMILY as SD35
from guitrainer.engine.families.sd35 import convert as sd35_convert
from guitrainer.engine.families.sd35 import export as sd35_export
from guitrainer.engine.families.sd35 import network as sd35_network
from guitrainer.engine.network.client_layout import ClientLayout
from guitrainer.engine.network.lora import ADAPTER, lora_layers
from guitrainer.engine.verify import comfy_rules

pytestmark = pytest.mark.slow
SD35_CONFIGS = Path(__file__).resolve().parent.parent / "resources" / "models" / "sd35"


def _assembled(layout: ClientLayout, transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The original-layout weights as ComfyUI's ``convert_diffusers_mmdit`` builds them from diffusers' weights with
    the table: each diffusers weight written into its rows (through ``swap_scale_shift`` where the table says)."""
    sd = transformer.state_dict()
    table = layout.denoiser(transformer)
    shapes = {k: v.shape for k, v in sd.items()}
    out = {}
    for key, pieces in comfy_rules.pieces_of(table, shapes).items():
        weight = torch.empty(comfy_rules.original_shape(pieces, shapes), device=sd[pieces[0][0]].device)
        for d, o in pieces:
            value = comfy_rules.swap_scale_shift(sd[d]) if o.swapped else sd[d]
            (weight.narrow(0, *o.rows) if o.rows else weight).copy_(value)
        out[key] = weight
    return out


def test_the_tables_assemble_exactly_what_the_families_converters_write(tmp_path):
    flux = tiny_flux.build(seed=3).transformer
    ours, theirs = _assembled(FLUX.client_layout, flux), flux_convert.diffusers_to_bfl(flux.state_dict())
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name

    tiny = build_tiny_sd35(tmp_path / "sd35")
    sd35 = SD35.load_folder(tiny.folder).denoiser
    ours, theirs = _assembled(SD35.client_layout, sd35), sd35_convert.to_original(sd35.state_dict(), sd35.config)
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    # the last block's pre-only context modulation and the final one are the swapped ones
    assert {o.key for o in SD35.client_layout.denoiser(sd35).values() if o.swapped} == {
        "joint_blocks.2.context_block.adaLN_modulation.1.weight", "joint_blocks.2.context_block.adaLN_modulation.1.bias",
        "final_layer.adaLN_modulation.1.weight", "final_layer.adaLN_modulation.1.bias"}


def _names_fit(layout: ClientLayout, transformer: torch.nn.Module, file: dict[str, torch.Tensor]) -> None:
    """Every module of ``file`` is read by the key map of ``transformer`` (no LoRA on it), and its up x down is the
    shape of the weight it patches."""
    params = dict(transformer.named_parameters())
    table = layout.denoiser(transformer)
    shapes = {k: p.shape for k, p in params.items()}
    original = {key: comfy_rules.original_shape(pieces, shapes) for key, pieces in comfy_rules.pieces_of(table, shapes).items()}
    loaded = comfy_rules.load_lora(file, comfy_rules.denoiser_key_map(layout, table, params))
    assert loaded.not_loaded == []
    assert len(loaded.patches) == len(file) // 3
    for target, patch in loaded.patches.items():
        assert (patch.up.shape[0], patch.down.shape[1]) == tuple(original[target.key]), patch.name


def test_full_size_flux_files_are_read_whole():
    """FLUX.1 dev on meta with a rank-1 LoRA on every block Linear (materialised: 10 MB)."""
    from diffusers import FluxTransformer2DModel
    from peft import LoraConfig

    with torch.device("meta"):
        base, full = FluxTransformer2DModel(guidance_embeds=True), FluxTransformer2DModel(guidance_embeds=True)
    ours, theirs = _assembled_shapes(FLUX.client_layout, base), flux_convert.diffusers_to_bfl(base.state_dict())
    assert ours == {k: tuple(v.shape) for k, v in theirs.items()}
    assert ours["double_blocks.0.img_attn.qkv.weight"] == (9216, 3072)
    assert ours["single_blocks.37.linear1.weight"] == (21504, 3072)
    full.add_adapter(LoraConfig(r=1, lora_alpha=1, target_modules=list(flux_network.TARGETS["attention_ff_proj"])))
    for layer in lora_layers(full).values():
        for sub in (layer.lora_A[ADAPTER], layer.lora_B[ADAPTER]):
            sub.to_empty(device="cpu")
            torch.nn.init.ones_(sub.weight)
    _names_fit(FLUX.client_layout, base, flux_export.kohya_state_dict(full, [], alpha=None))


@pytest.mark.parametrize("folder", ["transformer_large", "transformer_medium"])
def test_full_size_sd35_files_are_read_whole(folder):
    from diffusers import SD3Transformer2DModel
    from peft import LoraConfig

    config = json.loads((SD35_CONFIGS / folder / "config.json").read_text(encoding="utf-8"))
    with torch.device("meta"):
        base, full = SD3Transformer2DModel.from_config(config), SD3Transformer2DModel.from_config(config)
    ours, theirs = _assembled_shapes(SD35.client_layout, base), sd35_convert.to_original(base.state_dict(), base.config)
    assert ours == {k: tuple(v.shape) for k, v in theirs.items()}
    full.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=list(sd35_network.DENOISER_TARGETS["attention_ff_proj"])))
    _names_fit(SD35.client_layout, base, sd35_export.denoiser_state_dict(full))  # the writer keeps meta tensors


def _assembled_shapes(layout: ClientLayout, transformer: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    shapes = {k: v.shape for k, v in transformer.state_dict().items()}
    pieces = comfy_rules.pieces_of(layout.denoiser(transformer), shapes)
    return {key: tuple(comfy_rules.original_shape(p, shapes)) for key, p in pieces.items()}
