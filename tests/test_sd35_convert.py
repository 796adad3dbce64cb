"""MMDiT ⇄ diffusers conversion: bit-identical both ways on a tiny model, read by diffusers' own single-file
loader, and every key of full-size SD 3.5 Large and Medium mapped (on ``meta``), as diffusers' converter maps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.tiny_sd35 import transformer_config

from guitrainer.engine.families.sd35 import convert

pytestmark = pytest.mark.slow

CONFIGS = Path(__file__).resolve().parent.parent / "resources" / "models" / "sd35"


@pytest.fixture(scope="module")
def tiny():
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    model = SD3Transformer2DModel(**transformer_config())
    with torch.no_grad():  # the zero-initialised layers get values, so a swapped or misplaced row shows
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model


def test_the_tiny_model_round_trips_bit_identically(tiny):
    sd = tiny.state_dict()
    original = convert.to_original(sd, tiny.config)
    back = convert.to_diffusers(original)
    assert set(back) == set(sd)
    assert all(torch.equal(back[k], sd[k]) for k in sd)
    again = convert.to_original(back, convert.config_from_original(original))
    assert set(again) == set(original) and all(torch.equal(again[k], original[k]) for k in original)


def test_the_original_layout_has_the_mmdits_structure(tiny):
    """Fused q/k/v (3 × width rows), the dual-attention block's attn2 and 9·h modulation, the last block's
    pre-only context stream (qkv and a 2·h modulation only), and its halves swapped against diffusers'."""
    sd = tiny.state_dict()
    original = convert.to_original(sd, tiny.config)
    h, last = 192, 2
    assert original["joint_blocks.0.x_block.attn.qkv.weight"].shape == (3 * h, h)
    assert torch.equal(original["joint_blocks.0.x_block.attn.qkv.weight"][h:2 * h], sd["transformer_blocks.0.attn.to_k.weight"])
    assert torch.equal(original["joint_blocks.0.context_block.attn.qkv.bias"][2 * h:], sd["transformer_blocks.0.attn.add_v_proj.bias"])
    assert torch.equal(original["joint_blocks.0.x_block.attn2.qkv.weight"][:h], sd["transformer_blocks.0.attn2.to_q.weight"])
    assert original["joint_blocks.0.x_block.adaLN_modulation.1.weight"].shape == (9 * h, h)
    assert "joint_blocks.1.x_block.attn2.qkv.weight" not in original
    assert {k for k in original if k.startswith(f"joint_blocks.{last}.context_block.")} == {
        f"joint_blocks.{last}.context_block.{p}" for p in (
            "attn.qkv.weight", "attn.qkv.bias", "attn.ln_q.weight", "attn.ln_k.weight",
            "adaLN_modulation.1.weight", "adaLN_modulation.1.bias")
    }
    mod = original[f"joint_blocks.{last}.context_block.adaLN_modulation.1.weight"]
    diffusers_mod = sd[f"transformer_blocks.{last}.norm1_context.linear.weight"]
    assert torch.equal(mod[:h], diffusers_mod[h:]) and torch.equal(mod[h:], diffusers_mod[:h])
    final = original["final_layer.adaLN_modulation.1.bias"]
    assert torch.equal(final[:h], sd["norm_out.linear.bias"][h:])


def test_diffusers_own_converter_and_single_file_loader_read_our_file(tiny, tmp_path):
    """diffusers' converter infers depth, dual attention and qk-norm from the keys (it is width-generic), and
    ``from_single_file`` with a local config reads what we write, offline."""
    from diffusers import SD3Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers
    from safetensors.torch import save_file

    sd = tiny.state_dict()
    original = convert.to_original(sd, tiny.config)
    theirs = convert_sd3_transformer_checkpoint_to_diffusers(dict(original))
    assert set(theirs) == set(sd) and all(torch.equal(theirs[k], sd[k]) for k in sd)

    tiny.save_config(str(tmp_path / "transformer"))
    file = tmp_path / "tiny_mmdit.safetensors"
    save_file({f"model.diffusion_model.{k}": v for k, v in original.items()}, str(file))
    loaded = SD3Transformer2DModel.from_single_file(
        str(file), config=str(tmp_path), subfolder="transformer", local_files_only=True, torch_dtype=torch.float32
    )
    got = loaded.state_dict()
    assert all(torch.equal(got[k], sd[k]) for k in sd)


def test_unknown_tensors_are_refused(tiny):
    original = convert.to_original(tiny.state_dict(), tiny.config)
    original["joint_blocks.0.x_block.extra.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match="not part of an SD 3 MMDiT"):
        convert.to_diffusers(original)


@pytest.mark.parametrize("folder", ["transformer_large", "transformer_medium"])
def test_every_key_of_full_size_models_maps_both_ways_on_meta(folder):
    from diffusers import SD3Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers

    shipped = json.loads((CONFIGS / folder / "config.json").read_text(encoding="utf-8"))
    with torch.device("meta"):
        model = SD3Transformer2DModel.from_config(shipped)
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    original = convert.to_original(model.state_dict(), model.config)
    assert {k: v.shape for k, v in convert.to_diffusers(original).items()} == shapes
    assert {k: v.shape for k, v in convert_sd3_transformer_checkpoint_to_diffusers(dict(original)).items()} == shapes
    inferred = convert.config_from_original(original)
    assert inferred == {k: v for k, v in shipped.items() if not k.startswith("_")}
