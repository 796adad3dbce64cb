"""Z-Image's LoRA files. At full size on ``meta``: a reader written from ComfyUI's rules consumes every key of both
layouts (kohya's original names, fused qkv; and diffusion_model. + diffusers names), and diffusers' own Z-Image
converter takes the diffusers layout, giving back our split LoRA. Continue from LoRA reads both back exactly; Verify
checks both on a tiny model (the diffusers layout also through ZImagePipeline.load_lora_weights) and fails a broken
file."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_zimage
from helpers.random_lora import random_lora

from guitrainer.engine.families.zimage import FAMILY, client_keys, convert, export, network
from guitrainer.engine.network.lora import ADAPTER, inject_lora, lora_layers, lora_parameters
from guitrainer.engine.verify import comfy_rules

pytestmark = pytest.mark.slow
R = 2


def _full_on_meta() -> torch.nn.Module:
    from diffusers import ZImageTransformer2DModel

    with torch.device("meta"):
        return ZImageTransformer2DModel()


def test_full_size_files_of_both_layouts_are_read_whole_by_comfyui_and_diffusers():
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_z_image_lora_to_diffusers
    from peft import LoraConfig

    h, m = 3840, 10240
    full = _full_on_meta()
    full.add_adapter(LoraConfig(r=R, lora_alpha=float(R), target_modules=list(network.TARGETS["attention_ff_proj"])))
    random_lora(full, 0, on_meta=True)
    ours = lora_layers(full)
    assert len(ours) == 32 * 8 + 2 * 7  # layers + noise refiners: q k v out w1 w2 w3 mod; context refiners: no mod
    kohya = export.kohya_state_dict(full)
    shapes = {k: tuple(v.shape) for k, v in kohya.items()}
    assert shapes["lora_unet_layers_0_attention_qkv.lora_down.weight"] == (3 * R, h)
    assert shapes["lora_unet_layers_29_attention_qkv.lora_up.weight"] == (3 * h, 3 * R)
    assert shapes["lora_unet_noise_refiner_1_feed_forward_w2.lora_down.weight"] == (R, m)
    assert shapes["lora_unet_layers_0_adaLN_modulation_0.lora_up.weight"] == (4 * h, R)
    diffusers_file = export.diffusers_state_dict(full)
    assert len(diffusers_file) == 3 * len(ours)

    # ComfyUI: its model is the original layout (fused qkv); kohya's names name its weights, diffusers' names reach
    # them through z_image_to_diffusers (Verify's reader, which shares nothing with the writer but the file)
    plain = _full_on_meta()
    table = client_keys.denoiser_map(plain)
    key_map = comfy_rules.denoiser_key_map(client_keys.LAYOUT, table, dict(plain.named_parameters()))
    original = convert.diffusers_to_original(plain.state_dict())
    for sd in (kohya, diffusers_file):
        loaded = comfy_rules.load_lora(sd, key_map)
        assert loaded.not_loaded == [], loaded.not_loaded[:5]
        for target, patch in loaded.patches.items():
            rows = target.rows[1] if target.rows else original[target.key].shape[0]
            assert (patch.up.shape[0], patch.down.shape[1]) == (rows, original[target.key].shape[1]), target
    assert len(comfy_rules.load_lora(kohya, key_map).patches) == 32 * 6 + 2 * 5  # qkv, out, w1-3, mod / refiners

    converted = _convert_non_diffusers_z_image_lora_to_diffusers(dict(diffusers_file))
    for name, layer in ours.items():  # the alpha (= rank here) folds in as 1: the weights come back exactly
        a, b = converted[f"transformer.{name}.lora_A.weight"], converted[f"transformer.{name}.lora_B.weight"]
        assert torch.equal(a, layer.lora_A[ADAPTER].weight) and torch.equal(b, layer.lora_B[ADAPTER].weight), name


@pytest.fixture(scope="module")
def tiny():
    return tiny_zimage.build(seed=2)


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
    path = tmp_path / "z_lora.safetensors"
    save_file(sd, str(path))
    fresh = _trained(tiny, 9)
    skipped: list[str] = []
    net = config_with(network__rank=4, network__alpha=8.0, network__type="lora").network
    done = FAMILY.load_lora_file(path, net, fresh, [], skipped)
    assert skipped == [] and done == (4 * 5 + 3 if layout == "kohya" else len(lora_layers(trained)))
    for name, layer in lora_layers(trained).items():
        torch.testing.assert_close(lora_layers(fresh)[name].get_delta_weight(ADAPTER), layer.get_delta_weight(ADAPTER),
                                   rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize("fmt", ["kohya", "diffusers"])
def test_verify_checks_both_layouts_against_the_base_and_fails_a_broken_file(tiny, tmp_path, fmt):
    from safetensors.torch import save_file

    from guitrainer.engine import export as X
    from guitrainer.engine.network.lora import read_lora
    from guitrainer.engine.verify import verify_lora

    torch.set_num_threads(1)
    folder = tiny_zimage.save_diffusers(tiny, tmp_path / "zimage")
    m = FAMILY.load_folder(folder)
    inject_lora(m.denoiser, 4, 4.0, 0.0, network.TARGETS["attention_ff_proj"])
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora_parameters(m.denoiser):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    path = tmp_path / f"z_{fmt}.safetensors"
    X.export_lora(path, m.denoiser, [], save_precision="fp16", family="zimage", fmt=fmt,
                  metadata={"ss_network_dim": "4", "ss_network_alpha": "4"})
    base = FAMILY.load_folder(folder)
    result = verify_lora(path, base)
    assert result.ok, result.message
    tensors, meta = read_lora(path)
    tensors = dict(tensors)
    key = next(k for k in tensors if k.endswith(".alpha") and "feed_forward_w2" in k.replace(".", "_"))
    tensors[key] = tensors[key] * 2
    broken = tmp_path / "broken.safetensors"
    save_file(tensors, str(broken), metadata=meta)
    result = verify_lora(broken, base)
    assert not result.ok, result.message
