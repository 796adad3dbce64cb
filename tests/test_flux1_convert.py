"""BFL's original layout <-> diffusers' names for the Flux transformer: bit-identical round trips at any width,
every key of full-size Flux mapped, and the same result as diffusers' own (full-width only) converter."""

from __future__ import annotations

import pytest
import torch

from guitrainer.engine.families.flux1 import convert


def _full_on_meta(dev: bool = True) -> torch.nn.Module:
    from diffusers import FluxTransformer2DModel

    with torch.device("meta"):
        return FluxTransformer2DModel(guidance_embeds=dev)


@pytest.mark.slow
def test_tiny_round_trips_are_bit_identical_both_ways():
    from helpers import tiny_flux

    tiny = tiny_flux.build(seed=3)
    sd = tiny.transformer.state_dict()
    bfl = convert.diffusers_to_bfl(sd)
    back = convert.bfl_to_diffusers(bfl)
    assert set(back) == set(sd)
    assert all(torch.equal(back[k], sd[k]) for k in sd)
    again = convert.diffusers_to_bfl(back, prefix=convert.CHECKPOINT_PREFIX)
    assert all(torch.equal(again[convert.CHECKPOINT_PREFIX + k], v) for k, v in bfl.items())
    # the prefix is stripped on the way in, and only the transformer's keys are taken from a checkpoint
    assert convert.bfl_to_diffusers(again | {"vae.encoder.conv_in.weight": torch.zeros(1)}).keys() == sd.keys()


@pytest.mark.slow
def test_every_key_of_full_size_flux_maps():
    """dev: 780 BFL keys = embedders 16 (time_in, vector_in, guidance_in: 2 Linears x weight+bias each; txt_in,
    img_in: 2 each) + 19 double blocks x 24 (img/txt mod, qkv, proj: 2 each; img/txt mlp: 4 each; 4 norm scales)
    + 38 single blocks x 8 (linear1, linear2, modulation: 2 each; 2 norm scales) + final layer 4. The diffusers
    model has 1160: 16 + 19 x 32 (q, k, v and add_q/k/v split out) + 38 x 14 (q, k, v, proj_mlp split out) + 4."""
    for dev, bfl_keys, diffusers_keys in ((True, 16 + 19 * 24 + 38 * 8 + 4, 16 + 19 * 32 + 38 * 14 + 4),
                                          (False, 12 + 19 * 24 + 38 * 8 + 4, 12 + 19 * 32 + 38 * 14 + 4)):
        model = _full_on_meta(dev)
        sd = model.state_dict()
        bfl = convert.diffusers_to_bfl(sd)
        assert (len(sd), len(bfl)) == (diffusers_keys, bfl_keys)
        assert bfl["single_blocks.37.linear1.weight"].shape == (3 * 3072 + 12288, 3072)
        assert bfl["double_blocks.18.img_attn.qkv.weight"].shape == (3 * 3072, 3072)
        assert bfl["final_layer.adaLN_modulation.1.weight"].shape == (2 * 3072, 3072)
        back = convert.bfl_to_diffusers(bfl)
        assert {k: tuple(v.shape) for k, v in back.items()} == {k: tuple(v.shape) for k, v in sd.items()}
        assert convert.shape_of_model(model) == convert.FluxShape(3072, 12288, 19, 38, dev)


@pytest.mark.slow
def test_full_width_values_match_diffusers_own_converter():
    """diffusers' converter only splits along dim 0, so each tensor here keeps only its rows ([rows, 1], distinct
    values): the full-size layout is checked value by value against it in a few MB."""
    from diffusers.loaders.single_file_utils import convert_flux_transformer_checkpoint_to_diffusers

    bfl_meta = convert.diffusers_to_bfl(_full_on_meta().state_dict())
    rows: dict[str, torch.Tensor] = {}
    start = 0
    for key, t in bfl_meta.items():
        n = t.shape[0]
        rows[key] = torch.arange(start, start + n, dtype=torch.float64).reshape(n, *([1] if t.dim() > 1 else []))
        start += n
    theirs = convert_flux_transformer_checkpoint_to_diffusers(dict(rows))
    ours = convert.bfl_to_diffusers(rows)
    assert set(ours) == set(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    # and diffusers' converter is exactly what breaks on a tiny model: it hard-codes 3072
    tiny = {k: v[: max(1, v.shape[0] // 48)] for k, v in rows.items()}
    with pytest.raises(RuntimeError, match="split"):
        convert_flux_transformer_checkpoint_to_diffusers(tiny)


def test_unknown_or_missing_keys_are_named():
    h = 8
    sd = {"img_in.weight": torch.zeros(h, 4), "img_in.bias": torch.zeros(h)}
    with pytest.raises(KeyError, match="time_in.in_layer.weight"):
        convert.bfl_to_diffusers(sd)
