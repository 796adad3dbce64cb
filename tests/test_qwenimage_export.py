"""Qwen-Image's LoRA files. At full size on ``meta``: a reader written from ComfyUI's rules consumes every key of both
layouts (``lora_unet_`` + diffusers' names with ``_``, and ``diffusion_model.`` + diffusers' names), and diffusers'
own Qwen-Image converter takes both, giving back our LoRA. Continue from LoRA reads both back exactly; Verify checks
both on a tiny model and fails a broken file."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_qwenimage
from helpers.random_lora import random_lora

from guitrainer.engine.families.qwenimage import FAMILY, client_keys, export, network
from guitrainer.engine.network.lora import ADAPTER, inject_lora, lora_layers, lora_parameters
from guitrainer.engine.verify import comfy_rules

pytestmark = pytest.mark.slow
R = 2


def _full_on_meta() -> torch.nn.Module:
    from diffusers import QwenImageTransformer2DModel

    from guitrainer.engine.families.qwenimage.spec import _config

    with torch.device("meta"):
        return QwenImageTransformer2DModel.from_config(_config("transformer"))


def test_full_size_files_of_both_layouts_are_read_whole_by_comfyui_and_diffusers():
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_qwen_lora_to_diffusers
    from peft import LoraConfig

    h, m = 3072, 12288
    full = _full_on_meta()
    full.add_adapter(LoraConfig(r=R, lora_alpha=float(R), target_modules=list(network.TARGETS["attention_ff_proj"])))
    random_lora(full, 0, on_meta=True)
    ours = lora_layers(full)
    assert len(ours) == 60 * 14  # 8 attention, 4 MLP, 2 modulation Linears per block
    kohya = export.kohya_state_dict(full)
    shapes = {k: tuple(v.shape) for k, v in kohya.items()}
    assert shapes["lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight"] == (R, h)
    assert shapes["lora_unet_transformer_blocks_59_attn_to_add_out.lora_up.weight"] == (h, R)
    assert shapes["lora_unet_transformer_blocks_3_img_mlp_net_2.lora_down.weight"] == (R, m)
    assert shapes["lora_unet_transformer_blocks_0_txt_mod_1.lora_up.weight"] == (6 * h, R)
    diffusers_file = export.diffusers_state_dict(full)
    assert len(kohya) == len(diffusers_file) == 3 * len(ours)

    # ComfyUI: its model has diffusers' names; both files' names reach every patched weight
    plain = _full_on_meta()
    table = client_keys.denoiser_map(plain)
    key_map = comfy_rules.denoiser_key_map(client_keys.LAYOUT, table, dict(plain.named_parameters()))
    weights = dict(plain.state_dict())
    for sd in (kohya, diffusers_file):
        loaded = comfy_rules.load_lora(sd, key_map)
        assert loaded.not_loaded == [], loaded.not_loaded[:5]
        assert len(loaded.patches) == len(ours)
        for target, patch in loaded.patches.items():
            assert (patch.up.shape[0], patch.down.shape[1]) == tuple(weights[target.key].shape), target

    for sd in (kohya, diffusers_file):  # the alpha (= rank here) folds in as 1: the weights come back exactly
        converted = _convert_non_diffusers_qwen_lora_to_diffusers(dict(sd))
        assert len(converted) == 2 * len(ours)
        for name, layer in ours.items():
            a, b = converted[f"transformer.{name}.lora_A.weight"], converted[f"transformer.{name}.lora_B.weight"]
            assert torch.equal(a, layer.lora_A[ADAPTER].weight) and torch.equal(b, layer.lora_B[ADAPTER].weight), name


@pytest.fixture(scope="module")
def tiny():
    return tiny_qwenimage.build(seed=2)


def _trained(tiny, seed: int, targets: str = "attention_ff_proj") -> torch.nn.Module:
    transformer = copy.deepcopy(tiny.transformer)
    inject_lora(transformer, 4, 8.0, 0.0, network.TARGETS[targets])
    random_lora(transformer, seed)
    return transformer


@pytest.mark.parametrize("layout", ["kohya", "diffusers"])
def test_continue_from_lora_reads_both_layouts_back_exactly(tiny, tmp_path, layout):
    from helpers import config_with
    from safetensors.torch import save_file

    trained = _trained(tiny, 1)
    sd = export.kohya_state_dict(trained) if layout == "kohya" else export.diffusers_state_dict(trained)
    path = tmp_path / "q_lora.safetensors"
    save_file(sd, str(path))
    fresh = _trained(tiny, 9)
    skipped: list[str] = []
    net = config_with(network__rank=4, network__alpha=8.0, network__type="lora").network
    done = FAMILY.load_lora_file(path, net, fresh, [], skipped)
    assert skipped == [] and done == len(lora_layers(trained)) == 2 * 14
    for name, layer in lora_layers(trained).items():
        torch.testing.assert_close(lora_layers(fresh)[name].get_delta_weight(ADAPTER), layer.get_delta_weight(ADAPTER),
                                   rtol=0, atol=1e-6, msg=name)


def test_a_lycoris_network_is_refused_for_continue_from_lora(tiny, tmp_path):
    from helpers import config_with
    from safetensors.torch import save_file

    from guitrainer.engine.network.lora import LoraFormatError

    path = tmp_path / "q_lora.safetensors"
    save_file(export.diffusers_state_dict(_trained(tiny, 1)), str(path))
    net = config_with(network__rank=4, network__type="loha").network
    with pytest.raises(LoraFormatError, match="Qwen-Image LoRAs are plain LoRA"):
        FAMILY.load_lora_file(path, net, _trained(tiny, 2), [], [])


@pytest.mark.parametrize("fmt", ["kohya", "diffusers"])
def test_verify_checks_both_layouts_against_the_base_and_fails_a_broken_file(tiny, tmp_path, fmt):
    from safetensors.torch import save_file

    from guitrainer.engine import export as X
    from guitrainer.engine.network.lora import read_lora
    from guitrainer.engine.verify import verify_lora

    torch.set_num_threads(1)
    folder = tiny_qwenimage.save_diffusers(tiny, tmp_path / "qwenimage")
    m = FAMILY.load_folder(folder)
    inject_lora(m.denoiser, 4, 4.0, 0.0, network.TARGETS["attention_ff_proj"])
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora_parameters(m.denoiser):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    path = tmp_path / f"q_{fmt}.safetensors"
    X.export_lora(path, m.denoiser, [], save_precision="fp16", family="qwenimage", fmt=fmt,
                  metadata={"ss_network_dim": "4", "ss_network_alpha": "4"})
    base = FAMILY.load_folder(folder)
    result = verify_lora(path, base)
    assert result.ok, result.message
    tensors, meta = read_lora(path)
    tensors = dict(tensors)
    key = next(k for k in tensors if k.endswith(".alpha") and "img_mlp" in k)
    tensors[key] = tensors[key] * 2
    broken = tmp_path / "broken.safetensors"
    save_file(tensors, str(broken), metadata=meta)
    result = verify_lora(broken, base)
    assert not result.ok, result.message
