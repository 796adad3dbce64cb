"""SD 3.5 LoRA files: a reader written from ComfyUI's rules consumes every key of ours and merges exactly the
trained delta; diffusers' SD 3 loader cannot read kohya's layout but reads our diffusers-layout file; Continue
from LoRA reads both back, and kohya's own fused files; full-size names and fused shapes on ``meta``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import comfy_reader_sd3 as comfy
from helpers import config_with
from helpers.tiny_sd35 import DEPTH, build_tiny_sd35

from guitrainer.engine.families.sd35 import export, loading, network, sampling
from guitrainer.engine.families.sd35.loaded import denoiser_of
from guitrainer.engine.network.lora import ADAPTER, LoraFormatError, lora_layers

pytestmark = pytest.mark.slow
RANK, ALPHA = 4, 2.0
CONFIGS = Path(__file__).resolve().parent.parent / "resources" / "models" / "sd35"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_sd35(tmp_path_factory.mktemp("tiny_sd35"))


def _inject(model, *, rank: int = RANK, alpha: float = ALPHA, random_up: bool = True) -> None:
    """kohya's full target set on the transformer, attention + MLP on both CLIPs; ups random so deltas are not 0."""
    from peft import LoraConfig, inject_adapter_in_model

    cfg = config_with(network__target_modules="attention_ff_proj").network

    def lora(targets: tuple[str, ...]) -> LoraConfig:
        return LoraConfig(r=rank, lora_alpha=alpha, init_lora_weights="gaussian", target_modules=list(targets))

    denoiser_of(model).add_adapter(lora(network.denoiser_targets(cfg)))
    for i in (0, 1):
        inject_adapter_in_model(lora(network.text_encoder_targets(i, cfg)), model.text_encoders[i])
    if random_up:
        generator = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for m in (denoiser_of(model), *model.text_encoders[:2]):
                for name, p in m.named_parameters():
                    if "lora_B" in name:
                        p.copy_(torch.randn(p.shape, generator=generator) * 0.05)


@pytest.fixture(scope="module")
def trained(tiny):
    """(the model with its LoRA, the base weights of the transformer and the CLIPs before the LoRA)."""
    model = loading.load_folder(tiny.folder)
    base = {"transformer": {k: v.clone() for k, v in denoiser_of(model).state_dict().items()},
            "clip_l": {k: v.clone() for k, v in model.text_encoders[0].state_dict().items()},
            "clip_g": {k: v.clone() for k, v in model.text_encoders[1].state_dict().items()}}
    _inject(model)
    return model, base


def _with_deltas(base: dict[str, torch.Tensor], module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """base + the peft model's own delta (``get_delta_weight``) of every LoRA layer."""
    out = {k: v.clone().float() for k, v in base.items()}
    for path, layer in lora_layers(module).items():
        out[f"{path}.weight"] += layer.get_delta_weight(ADAPTER).detach().float()
    return out


def _saved(tmp_path: Path, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Through a real .safetensors file and back."""
    from safetensors.torch import load_file, save_file

    path = tmp_path / "lora.safetensors"
    save_file(sd, str(path))
    return load_file(str(path))


def _comfy_merge(model, base, lora: dict[str, torch.Tensor]):
    """ComfyUI's rules applied to ``lora``: (merged MMDiT, merged CLIP weights, keys not loaded)."""
    mmdit = comfy.original_weights(base["transformer"], DEPTH)
    clips = {f"{name}.transformer.{k}": v.float() for name in ("clip_l", "clip_g") for k, v in base[name].items()}
    key_map = {**comfy.unet_key_map(list(mmdit), DEPTH), **comfy.clip_key_map(list(clips))}
    patches, not_loaded = comfy.load_lora(lora, key_map)
    weights = comfy.apply({**mmdit, **clips}, patches)
    return weights, not_loaded, len(patches)


def _expected(model, base):
    mmdit = comfy.original_weights(_with_deltas(base["transformer"], denoiser_of(model)), DEPTH)
    for i, name in enumerate(("clip_l", "clip_g")):
        mmdit.update({f"{name}.transformer.{k}": v for k, v in _with_deltas(base[name], model.text_encoders[i]).items()})
    return mmdit


def _assert_merged(weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert set(weights) == set(expected)
    for key in expected:
        torch.testing.assert_close(weights[key], expected[key], atol=1e-5, rtol=1e-5, msg=key)


def test_the_comfyui_rules_reader_consumes_every_key_and_merges_the_trained_delta(trained, tmp_path):
    model, base = trained
    lora = _saved(tmp_path, export.kohya_state_dict(denoiser_of(model), model.text_encoders))
    weights, not_loaded, patched = _comfy_merge(model, base, lora)
    assert not_loaded == []
    assert patched == len([k for k in lora if k.endswith(".lora_down.weight")])
    expected = _expected(model, base)
    _assert_merged(weights, expected)

    # the check can fail: sd-scripts' split_qkv alpha (α, not 3α; kohya-ss/sd-scripts#2204) merges a third
    name, key = "lora_unet_joint_blocks_0_x_block_attn_qkv", "diffusion_model.joint_blocks.0.x_block.attn.qkv.weight"
    weak, _, _ = _comfy_merge(model, base, {**lora, f"{name}.alpha": torch.tensor(ALPHA)})
    original = comfy.original_weights(base["transformer"], DEPTH)[key]
    torch.testing.assert_close(weak[key] - original, (expected[key] - original) / 3, atol=1e-6, rtol=1e-5)


def test_the_same_reader_merges_the_diffusers_layout_file_identically(trained, tmp_path):
    """Read through ComfyUI's ``transformer.`` names: q/k/v as row slices of the fused weight, the swapped
    modulations through ``swap_scale_shift``."""
    model, base = trained
    lora = _saved(tmp_path, export.diffusers_state_dict(denoiser_of(model), model.text_encoders))
    assert not any(k.endswith(".alpha") for k in lora)
    weights, not_loaded, _ = _comfy_merge(model, base, lora)
    assert not_loaded == []
    _assert_merged(weights, _expected(model, base))


def test_fused_layers_are_one_lora_of_rank_3r_with_alpha_3x(trained):
    """down = cat(downs) [3r, in], up block-diagonal [3·out, 3r], alpha 3α: alpha / rows = α / r as trained
    (sd-scripts' split_qkv keeps α and comes out 3× weaker: kohya-ss/sd-scripts#2204)."""
    model, _ = trained
    sd = export.kohya_state_dict(denoiser_of(model), model.text_encoders)
    h = 192
    name = "lora_unet_joint_blocks_0_x_block_attn_qkv"
    assert sd[f"{name}.lora_down.weight"].shape == (3 * RANK, h)
    assert sd[f"{name}.lora_up.weight"].shape == (3 * h, 3 * RANK)
    assert sd[f"{name}.alpha"].item() == 3 * ALPHA
    up = sd[f"{name}.lora_up.weight"]
    assert torch.all(up[:h, RANK:] == 0) and torch.all(up[h:2 * h, :RANK] == 0) and torch.all(up[2 * h:, :2 * RANK] == 0)
    assert sd["lora_unet_joint_blocks_0_x_block_attn2_qkv.alpha"].item() == 3 * ALPHA
    assert sd["lora_unet_joint_blocks_1_x_block_mlp_fc1.alpha"].item() == ALPHA
    assert sd["lora_unet_joint_blocks_0_x_block_adaLN_modulation_1.lora_up.weight"].shape == (9 * h, RANK)
    assert sd["lora_unet_joint_blocks_2_context_block_adaLN_modulation_1.lora_up.weight"].shape == (2 * h, RANK)
    assert "lora_unet_joint_blocks_2_context_block_attn_proj.lora_up.weight" not in sd
    assert "lora_te1_text_model_encoder_layers_1_mlp_fc2.lora_down.weight" in sd
    assert "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.alpha" in sd
    assert not any(k.startswith("lora_te3_") for k in sd)


def test_diffusers_cannot_read_kohyas_layout_but_reads_our_diffusers_file(tiny, trained):
    """diffusers' SD3LoraLoaderMixin converts no keys: kohya names inject nothing (only a warning); PEFT names
    (``transformer.…lora_A/B``, α/r baked) load, and the model then computes what ours does."""
    model, _ = trained
    kohya = export.kohya_state_dict(denoiser_of(model), model.text_encoders)
    fresh = loading.load_folder(tiny.folder)
    pipe = sampling.pipeline(fresh)
    pipe.load_lora_weights(dict(kohya))
    assert not any("lora" in k for k in denoiser_of(fresh).state_dict())

    pipe.load_lora_weights(dict(export.diffusers_state_dict(denoiser_of(model), model.text_encoders)))
    generator = torch.Generator().manual_seed(5)
    latents = torch.randn(1, 16, 8, 8, generator=generator)
    hidden, pooled = torch.randn(1, 20, 2304, generator=generator), torch.randn(1, 2048, generator=generator)
    t = torch.tensor([500.0])
    with torch.no_grad():
        ours = denoiser_of(model)(latents, hidden, pooled, t, return_dict=False)[0]
        theirs = denoiser_of(fresh)(latents, hidden, pooled, t, return_dict=False)[0]
        ids = model.tokenizers[1]("a red circle", return_tensors="pt").input_ids
        te_ours = model.text_encoders[1](ids).text_embeds
        te_theirs = fresh.text_encoders[1](ids).text_embeds
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(te_theirs, te_ours, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ours, denoiser_of(loading.load_folder(tiny.folder))(latents, hidden, pooled, t, return_dict=False)[0])


def _fresh(tiny, **kw):
    model = loading.load_folder(tiny.folder)
    _inject(model, random_up=False, **kw)
    return model


def test_continue_from_lora_reads_our_kohya_file_back_exactly(tiny, trained, tmp_path):
    model, _ = trained
    lora = _saved(tmp_path, export.kohya_state_dict(denoiser_of(model), model.text_encoders))
    fresh = _fresh(tiny)
    count = export.load_into(lora, denoiser_of(fresh), fresh.text_encoders)
    assert count == len([k for k in lora if k.endswith(".lora_down.weight")])
    again = export.kohya_state_dict(denoiser_of(fresh), fresh.text_encoders)
    assert set(again) == set(lora) and all(torch.equal(again[k], lora[k]) for k in lora)
    for (name, p), q in zip(denoiser_of(model).named_parameters(), denoiser_of(fresh).parameters()):
        if "lora_" in name:
            assert torch.equal(p, q), name


def test_continue_from_lora_reads_the_diffusers_layout_file(tiny, trained):
    model, _ = trained
    fresh = _fresh(tiny)
    export.load_into(export.diffusers_state_dict(denoiser_of(model), model.text_encoders), denoiser_of(fresh), fresh.text_encoders)
    for (name, p), q in zip(denoiser_of(model).named_parameters(), denoiser_of(fresh).parameters()):
        if "lora_" in name:
            torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-6, msg=name)


def test_kohyas_own_fused_file_shares_one_down_between_q_k_and_v(tiny):
    """kohya's lora_sd3 trains a qkv as one LoRA of rank r: down [r, in] shared, up [3·out, r] split by rows."""
    h = 192
    generator = torch.Generator().manual_seed(7)
    down, up = torch.randn(RANK, h, generator=generator), torch.randn(3 * h, RANK, generator=generator)
    name = "lora_unet_joint_blocks_1_context_block_attn_qkv"
    fresh = _fresh(tiny, alpha=RANK)  # the network's own scale 1; the file's alpha 2 / rank 4 = 0.5
    export.load_into({f"{name}.lora_down.weight": down, f"{name}.lora_up.weight": up, f"{name}.alpha": torch.tensor(2.0)},
                     denoiser_of(fresh), strict=True)
    layers = lora_layers(denoiser_of(fresh))
    for i, proj in enumerate(("add_q_proj", "add_k_proj", "add_v_proj")):
        layer = layers[f"transformer_blocks.1.attn.{proj}"]
        torch.testing.assert_close(layer.get_delta_weight(ADAPTER), 0.5 * up[i * h:(i + 1) * h] @ down)


def test_what_cannot_be_read_is_named(tiny, trained):
    model, _ = trained
    lora = export.kohya_state_dict(denoiser_of(model), model.text_encoders)
    wider = _fresh(tiny, rank=8)
    with pytest.raises(LoraFormatError, match="set network.rank"):
        export.load_into(lora, denoiser_of(wider), wider.text_encoders)
    name = "lora_unet_joint_blocks_0_x_block_attn_qkv"
    broken = dict(lora)
    broken[f"{name}.lora_up.weight"] = torch.ones_like(broken[f"{name}.lora_up.weight"])
    with pytest.raises(LoraFormatError, match="not block-diagonal"):
        export.load_into(broken, denoiser_of(_fresh(tiny)), [])
    stray = {"lora_unet_context_embedder.lora_down.weight": torch.zeros(RANK, 2304),
             "lora_unet_context_embedder.lora_up.weight": torch.zeros(192, RANK)}
    with pytest.raises(LoraFormatError, match="1 of 1 LoRA modules match no layer trained here"):
        export.load_into(stray, denoiser_of(_fresh(tiny)), [])
    skipped: list[str] = []
    assert export.load_into(stray, denoiser_of(_fresh(tiny)), [], strict=False, skipped=skipped) == 0
    assert skipped == ["lora_unet_context_embedder"]


@pytest.mark.parametrize(("folder", "depth", "modules"), [("transformer_large", 38, 377), ("transformer_medium", 24, 263)])
def test_full_size_names_and_fused_shapes_on_meta(folder, depth, modules):
    """Modules per block of kohya's full set: x stream qkv, proj, fc1, fc2, adaLN and the same for the context
    stream = 10, the last block's pre-only context stream 2 (qkv, adaLN) → 7; Large 37·10 + 7 = 377; Medium
    23·10 + 7 = 237 + attn2's qkv and proj in its 13 dual blocks = 263. Every name is one ComfyUI's key map holds."""
    from diffusers import SD3Transformer2DModel
    from peft import LoraConfig

    config = json.loads((CONFIGS / folder / "config.json").read_text(encoding="utf-8"))
    with torch.device("meta"):
        transformer = SD3Transformer2DModel.from_config(config)
    base = {k: v for k, v in transformer.state_dict().items()}
    transformer.add_adapter(LoraConfig(r=RANK, lora_alpha=RANK, target_modules=list(network.DENOISER_TARGETS["attention_ff_proj"])))
    sd = export.denoiser_state_dict(transformer)
    names = {k.rsplit(".", 2)[0] if k.endswith(".weight") else k.rsplit(".", 1)[0] for k in sd}
    assert len(names) == modules and len(sd) == 3 * modules
    h, last = 64 * depth, depth - 1
    assert sd["lora_unet_joint_blocks_0_x_block_attn_qkv.lora_up.weight"].shape == (3 * h, 3 * RANK)
    assert sd["lora_unet_joint_blocks_0_context_block_attn_qkv.lora_down.weight"].shape == (3 * RANK, h)
    assert sd["lora_unet_joint_blocks_0_x_block_mlp_fc2.lora_down.weight"].shape == (RANK, 4 * h)
    assert sd[f"lora_unet_joint_blocks_{last}_context_block_adaLN_modulation_1.lora_up.weight"].shape == (2 * h, RANK)
    assert f"lora_unet_joint_blocks_{last}_context_block_mlp_fc1.lora_up.weight" not in sd
    dual = config["dual_attention_layers"]
    assert {int(n.split("_")[4]) for n in names if "attn2" in n} == set(dual)
    assert sd["lora_unet_joint_blocks_0_x_block_adaLN_modulation_1.lora_up.weight"].shape == ((9 if dual else 6) * h, RANK)
    key_map = comfy.unet_key_map(list(comfy.original_weights(base, depth)), depth)
    assert names - set(key_map) == set()


def test_the_seams_continue_from_lora_reads_a_file_and_lists_what_it_skips(tiny, trained, tmp_path):
    from safetensors.torch import save_file

    from guitrainer.engine.families.registry import family

    model, _ = trained
    lora = export.kohya_state_dict(denoiser_of(model), model.text_encoders)
    lora["lora_unet_context_embedder.lora_down.weight"] = torch.zeros(RANK, 2304)
    lora["lora_unet_context_embedder.lora_up.weight"] = torch.zeros(192, RANK)
    path = tmp_path / "continue.safetensors"
    save_file(lora, str(path))
    fresh = _fresh(tiny)
    skipped: list[str] = []
    cfg = config_with(network__target_modules="attention_ff_proj").network
    set_count = family("sd35").load_lora_file(path, cfg, denoiser_of(fresh), fresh.text_encoders, skipped)
    assert skipped == ["lora_unet_context_embedder"]
    assert set_count == len([k for k in lora if k.endswith(".lora_down.weight")]) - 1
    with pytest.raises(LoraFormatError, match="set network.type to 'lora'"):
        family("sd35").load_lora_file(path, config_with(network__type="loha").network, denoiser_of(fresh), [], [])
