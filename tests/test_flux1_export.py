"""The Flux LoRA file proven by its readers: a reader written from ComfyUI's rules consumes every key and
merges exactly the delta peft trained (tiny model, full size on meta); diffusers' loader reproduces the double
blocks (its converter hard-codes 3072-wide single blocks: shown, and the full-size shapes checked instead);
and Continue from LoRA reads our files and kohya's back into the split LoRA."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import comfy_reader

from guitrainer.engine.families.flux1 import FAMILY, convert, export, network
from guitrainer.engine.network.lora import ADAPTER, LoraFormatError, lora_layers, lora_parameters

pytestmark = pytest.mark.slow
RANK, ALPHA = 4, 8.0  # scale 2: a file that got the alpha wrong merges visibly wrong


def _inject(transformer: torch.nn.Module, clip: torch.nn.Module | None, target_modules: str, seed: int) -> None:
    """A split peft LoRA on ``target_modules``, every A and B random (B != 0: each slot's delta counts)."""
    from peft import LoraConfig, inject_adapter_in_model

    targets = list(network.TARGETS[target_modules])
    transformer.add_adapter(LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=targets))
    if clip is not None:
        inject_adapter_in_model(LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=list(network.CLIP_TARGETS)), clip)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lora_parameters(transformer) + (lora_parameters(clip) if clip is not None else []):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def _deltas(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What the peft model adds to each weight (diffusers names)."""
    return {f"{name}.weight": layer.get_delta_weight(ADAPTER).detach() for name, layer in lora_layers(model).items()}


def _comfy_model(transformer_sd: dict, clip_sd: dict) -> dict[str, torch.Tensor]:
    """A model's weights under ComfyUI's names: ``diffusion_model.<BFL>`` and ``clip_l.transformer.text_model.…``."""
    out = {f"diffusion_model.{k}": v for k, v in convert.diffusers_to_bfl(transformer_sd).items()}
    return out | {f"clip_l.transformer.text_model.{k}": v for k, v in clip_sd.items() if not k.endswith("position_ids")}


def _expected(base_t: dict, base_c: dict, transformer: torch.nn.Module, clip: torch.nn.Module | None) -> dict:
    t = {k: v + _deltas(transformer).get(k, 0) for k, v in base_t.items()}
    c = {k: v + (_deltas(clip).get(k, 0) if clip is not None else 0) for k, v in base_c.items()}
    return _comfy_model(t, c)


def _forward(transformer: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    cfg = transformer.config
    gen = torch.Generator().manual_seed(seed)
    n, t = 16, 5
    with torch.no_grad():
        return transformer(
            hidden_states=torch.randn(1, n, cfg.in_channels, generator=gen),
            encoder_hidden_states=torch.randn(1, t, cfg.joint_attention_dim, generator=gen),
            pooled_projections=torch.randn(1, cfg.pooled_projection_dim, generator=gen),
            timestep=torch.tensor([0.4]),
            img_ids=torch.stack([torch.zeros(n), torch.arange(n) // 4, torch.arange(n) % 4], dim=1).float(),
            txt_ids=torch.zeros(t, 3),
            guidance=torch.tensor([3.5]) if cfg.guidance_embeds else None,
            return_dict=False,
        )[0]


@pytest.fixture(scope="module")
def tiny():
    from helpers import tiny_flux

    return tiny_flux.build(seed=7)


@pytest.fixture
def trained(tiny):
    """(transformer + CLIP with a random LoRA on every block Linear, their base weights)."""
    transformer, clip = copy.deepcopy(tiny.transformer), copy.deepcopy(tiny.clip)
    base_t, base_c = transformer.state_dict(), clip.state_dict()
    _inject(transformer, clip, "attention_ff_proj", seed=1)
    return transformer, clip, base_t, base_c


def test_a_comfyui_rules_reader_consumes_every_key_and_merges_the_trained_delta(trained):
    transformer, clip, base_t, base_c = trained
    sd = FAMILY.kohya_state_dict(transformer, [clip], alpha=None)
    # 2 double blocks x 10 BFL Linears + 2 single x 3, and CLIP's 2 layers x 6; three tensors each
    assert len(sd) == 3 * (2 * 10 + 2 * 3 + 2 * 6)
    h = 64
    assert sd["lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight"].shape == (3 * RANK, h)
    assert sd["lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight"].shape == (3 * h, 3 * RANK)
    assert sd["lora_unet_single_blocks_1_linear1.lora_up.weight"].shape == (7 * h, 4 * RANK)
    assert sd["lora_unet_single_blocks_1_linear2.lora_down.weight"].shape == (RANK, 5 * h)
    assert float(sd["lora_unet_double_blocks_0_img_attn_qkv.alpha"]) == 3 * ALPHA  # alpha/rank unchanged
    assert float(sd["lora_unet_single_blocks_0_linear1.alpha"]) == 4 * ALPHA
    assert float(sd["lora_unet_double_blocks_0_img_mod_lin.alpha"]) == ALPHA
    assert "lora_te1_text_model_encoder_layers_1_mlp_fc2.lora_up.weight" in sd

    merged, loaded = comfy_reader.merge(_comfy_model(base_t, base_c), sd)
    assert loaded.not_loaded == []
    assert len(loaded.patches) == 2 * 10 + 2 * 3 + 2 * 6
    expected = _expected(base_t, base_c, transformer, clip)
    assert set(merged) == set(expected)
    for k in expected:
        torch.testing.assert_close(merged[k], expected[k], rtol=0, atol=1e-5, msg=k)

    # and the merged model (back in diffusers' names) computes what the trained one does
    from diffusers import FluxTransformer2DModel

    fresh = FluxTransformer2DModel.from_config(transformer.config)
    bfl = {k.removeprefix("diffusion_model."): v for k, v in merged.items() if k.startswith("diffusion_model.")}
    fresh.load_state_dict(convert.bfl_to_diffusers(bfl))
    torch.testing.assert_close(_forward(fresh), _forward(transformer), rtol=1e-4, atol=1e-5)


def test_untrained_slots_of_a_fused_module_get_zero_rows(tiny):
    """"attention" trains q, k, v of the single blocks but not proj_mlp: linear1 is written with zero mlp rows."""
    transformer = copy.deepcopy(tiny.transformer)
    base_t = transformer.state_dict()
    _inject(transformer, None, "attention", seed=2)
    sd = FAMILY.kohya_state_dict(transformer, [], alpha=None)
    up = sd["lora_unet_single_blocks_0_linear1.lora_up.weight"]
    assert up.shape == (7 * 64, 3 * RANK) and not up[3 * 64:].any()
    merged, loaded = comfy_reader.merge(_comfy_model(base_t, {}), sd)
    assert loaded.not_loaded == []
    for k, v in _expected(base_t, {}, transformer, None).items():
        torch.testing.assert_close(merged[k], v, rtol=0, atol=1e-5, msg=k)


def test_diffusers_loads_the_double_blocks_and_refuses_tiny_single_blocks(tiny, tmp_path, trained):
    from helpers import tiny_flux

    transformer, clip, _base_t, _base_c = trained
    sd = FAMILY.kohya_state_dict(transformer, [clip], alpha=None)
    double = {k: v for k, v in sd.items() if k.startswith("lora_unet_double_blocks_")}
    model = FAMILY.load_folder(tiny_flux.save_diffusers(tiny, tmp_path / "flux"))
    pipe = FAMILY.pipeline(model)
    pipe.load_lora_weights(dict(double))
    reference = copy.deepcopy(transformer)  # the same LoRA with its single-block part switched off
    with torch.no_grad():
        for name, layer in lora_layers(reference).items():
            if name.startswith("single_transformer_blocks."):
                layer.lora_B[ADAPTER].weight.zero_()
    torch.testing.assert_close(_forward(pipe.transformer), _forward(reference), rtol=1e-4, atol=1e-5)

    # diffusers' kohya converter splits single-block linear1 with dims [3072, 3072, 3072, 12288]: not at width 64
    fresh = FAMILY.pipeline(FAMILY.load_folder(tmp_path / "flux"))
    with pytest.raises((AssertionError, RuntimeError, ValueError)):
        fresh.load_lora_weights({k: v for k, v in sd.items() if k.startswith("lora_unet_")})


def _full_on_meta():
    from diffusers import FluxTransformer2DModel

    with torch.device("meta"):
        return FluxTransformer2DModel(guidance_embeds=True)


def test_full_size_files_have_kohyas_names_and_shapes_and_both_readers_take_them():
    """Full-size FLUX.1 dev on meta, a rank-2 LoRA on every block Linear materialised on the CPU (41 MB)."""
    from diffusers.loaders import FluxLoraLoaderMixin
    from peft import LoraConfig

    r, alpha, h, m = 2, 2.0, 3072, 12288
    full = _full_on_meta()
    full.add_adapter(LoraConfig(r=r, lora_alpha=alpha, target_modules=list(network.TARGETS["attention_ff_proj"])))
    gen = torch.Generator().manual_seed(0)
    for layer in lora_layers(full).values():
        for sub in (layer.lora_A[ADAPTER], layer.lora_B[ADAPTER]):
            sub.to_empty(device="cpu")
            with torch.no_grad():
                sub.weight.copy_(torch.randn(sub.weight.shape, generator=gen) * 0.01)
    sd = export.kohya_state_dict(full, [], alpha=None)
    # 19 double blocks x 10 modules + 38 single blocks x 3, three tensors each
    assert len(sd) == 3 * (19 * 10 + 38 * 3)
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    assert shapes["lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight"] == (3 * r, h)
    assert shapes["lora_unet_double_blocks_18_txt_attn_qkv.lora_up.weight"] == (3 * h, 3 * r)
    assert shapes["lora_unet_double_blocks_0_img_mod_lin.lora_up.weight"] == (6 * h, r)
    assert shapes["lora_unet_double_blocks_0_txt_mlp_2.lora_down.weight"] == (r, m)
    assert shapes["lora_unet_single_blocks_37_linear1.lora_down.weight"] == (4 * r, h)
    assert shapes["lora_unet_single_blocks_37_linear1.lora_up.weight"] == (3 * h + m, 4 * r)
    assert shapes["lora_unet_single_blocks_0_linear2.lora_down.weight"] == (r, h + m)
    assert shapes["lora_unet_single_blocks_0_modulation_lin.lora_up.weight"] == (3 * h, r)

    # ComfyUI: every key consumed, every patch the shape of the weight it patches
    bfl_shapes = {f"diffusion_model.{k}": v for k, v in convert.diffusers_to_bfl(_full_on_meta().state_dict()).items()}
    loaded = comfy_reader.load_lora(sd, comfy_reader.model_lora_keys(list(bfl_shapes)))
    assert loaded.not_loaded == [] and len(loaded.patches) == 19 * 10 + 38 * 3
    for key, patch in loaded.patches.items():
        assert (patch.up.shape[0], patch.down.shape[1]) == tuple(bfl_shapes[key].shape), key

    # diffusers: at full size its converter takes the file and gives back exactly our split LoRA
    converted = FluxLoraLoaderMixin.lora_state_dict(dict(sd))
    converted = converted[0] if isinstance(converted, tuple) else converted
    ours = lora_layers(full)
    assert len(converted) == 2 * len(ours)  # lora_A and lora_B of 19 x 14 + 38 x 6 split modules
    for name, layer in ours.items():
        a, b = converted[f"transformer.{name}.lora_A.weight"], converted[f"transformer.{name}.lora_B.weight"]
        assert torch.equal(a, layer.lora_A[ADAPTER].weight) and torch.equal(b, layer.lora_B[ADAPTER].weight), name


def _fresh_split(tiny, target_modules: str, seed: int):
    transformer, clip = copy.deepcopy(tiny.transformer), copy.deepcopy(tiny.clip)
    _inject(transformer, clip, target_modules, seed=seed)
    return transformer, clip


def test_continue_from_lora_reads_our_file_back_exactly(tiny, trained, tmp_path):
    from helpers import config_with
    from safetensors.torch import save_file

    transformer, clip, _bt, _bc = trained
    sd = FAMILY.kohya_state_dict(transformer, [clip], alpha=None)
    path = tmp_path / "flux_lora.safetensors"
    save_file(sd, str(path))
    again, again_clip = _fresh_split(tiny, "attention_ff_proj", seed=5)
    network_cfg = config_with(network__target_modules="attention_ff_proj").network
    skipped: list[str] = []
    assert FAMILY.load_lora_file(path, network_cfg, again, [again_clip, tiny.t5], skipped) == len(sd) // 3
    assert skipped == []
    for a, b in zip(lora_parameters(transformer) + lora_parameters(clip), lora_parameters(again) + lora_parameters(again_clip)):
        assert torch.equal(a, b)
    assert torch.equal(_forward(again), _forward(transformer))


def test_continue_from_a_kohya_fused_file_shares_its_down_and_splits_its_up(tiny, trained):
    """kohya trains img_attn_qkv / linear1 as one LoRA of rank r: its down goes to each split module, the up is
    split by rows; the loaded network then merges to what ComfyUI merges from the file."""
    transformer, clip, base_t, base_c = trained
    sd = dict(FAMILY.kohya_state_dict(transformer, [clip], alpha=None))
    gen = torch.Generator().manual_seed(9)
    for key in [k for k in sd if k.endswith("_qkv.lora_down.weight") or k.endswith("_linear1.lora_down.weight")]:
        module = key.removesuffix(".lora_down.weight")
        rows = sd[f"{module}.lora_up.weight"].shape[0]
        sd[key] = torch.randn(RANK, 64, generator=gen) * 0.1
        sd[f"{module}.lora_up.weight"] = torch.randn(rows, RANK, generator=gen) * 0.1
        sd[f"{module}.alpha"] = torch.tensor(ALPHA)
    again, again_clip = _fresh_split(tiny, "attention_ff_proj", seed=6)
    FAMILY.load_kohya_lora(sd, again, [again_clip])
    merged, loaded = comfy_reader.merge(_comfy_model(base_t, base_c), sd)
    assert loaded.not_loaded == []
    for k, v in _expected(base_t, base_c, again, again_clip).items():
        torch.testing.assert_close(merged[k], v, rtol=0, atol=1e-5, msg=k)


def test_continue_from_lora_says_what_does_not_fit(tiny, trained):
    transformer, clip, _bt, _bc = trained
    sd = FAMILY.kohya_state_dict(transformer, [clip], alpha=None)
    narrow, narrow_clip = _fresh_split(tiny, "attention", seed=3)
    double = {k: v for k, v in sd.items() if "single_blocks" not in k}
    with pytest.raises(LoraFormatError, match="match no layer trained here"):
        FAMILY.load_kohya_lora(double, narrow, [narrow_clip])
    skipped: list[str] = []
    FAMILY.load_kohya_lora(double, narrow, [narrow_clip], strict=False, skipped=skipped)
    assert {"lora_unet_double_blocks_0_img_mlp_0", "lora_unet_double_blocks_1_txt_mod_lin"} <= set(skipped)
    assert not any("attn" in name for name in skipped)
    with pytest.raises(LoraFormatError, match="proj_mlp, a layer this network does not train"):
        FAMILY.load_kohya_lora({k: v for k, v in sd.items() if "single_blocks_0_linear1" in k}, narrow, [narrow_clip])
    t5 = {"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_down.weight": torch.zeros(RANK, 32),
          "lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_up.weight": torch.zeros(32, RANK)}
    with pytest.raises(LoraFormatError, match="lora_te3_encoder_block_0_layer_0_SelfAttention_q"):
        FAMILY.load_kohya_lora(t5, narrow, [narrow_clip])


def test_a_lora_file_of_another_kind_is_refused_naming_the_setting(tiny, tmp_path):
    from helpers import config_with
    from safetensors.torch import save_file

    narrow, narrow_clip = _fresh_split(tiny, "attention", seed=4)
    with pytest.raises(LoraFormatError, match="set network.type to lora"):
        FAMILY.load_lora_file(tmp_path / "x.safetensors", config_with(network__type="loha").network, narrow, [], [])
    peft_file = tmp_path / "pytorch_lora_weights.safetensors"
    save_file({"transformer.transformer_blocks.0.attn.to_q.lora_A.weight": torch.zeros(RANK, 64)}, str(peft_file))
    with pytest.raises(LoraFormatError, match="diffusers-format Flux.1 LoRA"):
        FAMILY.load_lora_file(peft_file, config_with().network, narrow, [narrow_clip], [])
