"""Chroma's BFL <-> diffusers converter: the names and row splits agree with diffusers' own
``convert_chroma_transformer_checkpoint_to_diffusers`` at full width (3072, the only width it reads), on ``meta``,
and a tiny model's weights go round the converter unchanged."""

from __future__ import annotations

import json

import pytest
import torch

from guitrainer.base.paths import resources_dir
from guitrainer.engine.families.chroma import convert

pytestmark = pytest.mark.slow


def test_our_split_of_a_full_width_file_is_diffusers_own():
    from diffusers import ChromaTransformer2DModel
    from diffusers.loaders.single_file_utils import convert_chroma_transformer_checkpoint_to_diffusers

    cfg = json.loads((resources_dir() / "models" / "chroma" / "transformer" / "config.json").read_text())
    cfg.update(num_layers=2, num_single_layers=2)  # full width, two blocks of each kind
    with torch.device("meta"):
        model = ChromaTransformer2DModel.from_config(cfg)
    ours_bfl = convert.diffusers_to_bfl(model.state_dict(), prefix="model.diffusion_model.")
    # diffusers reads the original file (it pops keys: give it a copy) and must give back every tensor's name/shape
    theirs = convert_chroma_transformer_checkpoint_to_diffusers(dict(ours_bfl))
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in theirs.items()} == want
    ours = convert.bfl_to_diffusers(ours_bfl)
    assert {k: tuple(v.shape) for k, v in ours.items()} == want
    assert not any("img_mod" in k or "modulation" in k for k in ours_bfl)


def test_a_tiny_transformer_goes_round_the_converter_unchanged():
    from helpers import tiny_chroma

    tiny = tiny_chroma.build(seed=3)
    sd = tiny.transformer.state_dict()
    bfl = convert.diffusers_to_bfl(sd)
    assert "distilled_guidance_layer.layers.1.in_layer.weight" in bfl and "single_blocks.1.linear1.weight" in bfl
    back = convert.bfl_to_diffusers(bfl)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    with pytest.raises(KeyError, match="Chroma transformer"):
        convert.bfl_to_diffusers({**bfl, "double_blocks.0.img_mod.lin.weight": torch.zeros(1)})
