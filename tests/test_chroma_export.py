"""Chroma's LoRA file: kohya's names in BFL's layout. A reader written from ComfyUI's rules (Chroma is a Flux there)
consumes every key of a full-size file on ``meta``, diffusers' Flux LoRA converter (ChromaPipeline's) takes it at
full size; Continue from LoRA reads it back exactly; Verify checks a tiny model's file against the base model and
fails a broken one."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers import comfy_reader, tiny_chroma
from helpers.random_lora import random_lora

from guitrainer.base.paths import resources_dir
from guitrainer.engine.families.chroma import FAMILY, convert, export, network
from guitrainer.engine.network.lora import ADAPTER, inject_lora, lora_layers, lora_parameters

pytestmark = pytest.mark.slow
R = 2


def _full_on_meta() -> torch.nn.Module:
    from diffusers import ChromaTransformer2DModel

    cfg = json.loads((resources_dir() / "models" / "chroma" / "transformer" / "config.json").read_text())
    with torch.device("meta"):
        return ChromaTransformer2DModel.from_config(cfg)


def test_full_size_files_have_kohyas_names_and_comfyui_and_diffusers_take_them():
    """Full-size Chroma1-HD on meta, a rank-2 LoRA on every block Linear materialised on the CPU."""
    from diffusers.loaders import FluxLoraLoaderMixin
    from peft import LoraConfig

    h, m = 3072, 12288
    full = _full_on_meta()
    full.add_adapter(LoraConfig(r=R, lora_alpha=float(R), target_modules=list(network.TARGETS["attention_ff"])))
    random_lora(full, 0, on_meta=True)
    sd = export.kohya_state_dict(full)
    # 19 double blocks x 8 modules + 38 single blocks x 2, three tensors each; no modulation modules
    assert len(sd) == 3 * (19 * 8 + 38 * 2)
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    assert shapes["lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight"] == (3 * R, h)
    assert shapes["lora_unet_double_blocks_18_txt_attn_qkv.lora_up.weight"] == (3 * h, 3 * R)
    assert shapes["lora_unet_single_blocks_37_linear1.lora_up.weight"] == (3 * h + m, 4 * R)
    assert shapes["lora_unet_single_blocks_0_linear2.lora_down.weight"] == (R, h + m)
    assert not any("_mod_" in k or "modulation" in k for k in sd)

    # ComfyUI: every key consumed, every patch the shape of the weight it patches
    bfl = {f"diffusion_model.{k}": v for k, v in convert.diffusers_to_bfl(_full_on_meta().state_dict()).items()}
    loaded = comfy_reader.load_lora(sd, comfy_reader.model_lora_keys(list(bfl)))
    assert loaded.not_loaded == [] and len(loaded.patches) == 19 * 8 + 38 * 2
    for key, patch in loaded.patches.items():
        assert (patch.up.shape[0], patch.down.shape[1]) == tuple(bfl[key].shape), key

    # diffusers (ChromaPipeline's FluxLoraLoaderMixin): at full size its converter gives back our split LoRA
    converted = FluxLoraLoaderMixin.lora_state_dict(dict(sd))
    converted = converted[0] if isinstance(converted, tuple) else converted
    ours = lora_layers(full)
    assert len(converted) == 2 * len(ours)
    for name, layer in ours.items():
        a, b = converted[f"transformer.{name}.lora_A.weight"], converted[f"transformer.{name}.lora_B.weight"]
        assert torch.equal(a, layer.lora_A[ADAPTER].weight) and torch.equal(b, layer.lora_B[ADAPTER].weight), name


@pytest.fixture(scope="module")
def tiny():
    return tiny_chroma.build(seed=2)


def _trained(tiny, seed: int, targets: str = "attention_ff") -> torch.nn.Module:
    transformer = copy.deepcopy(tiny.transformer)
    inject_lora(transformer, 4, 4.0, 0.0, network.TARGETS[targets])
    random_lora(transformer, seed)
    return transformer


def test_continue_from_lora_reads_our_file_back_exactly(tiny, tmp_path):
    from helpers import config_with
    from safetensors.torch import save_file

    trained = _trained(tiny, 1)
    path = tmp_path / "chroma_lora.safetensors"
    save_file(export.kohya_state_dict(trained), str(path))
    fresh = _trained(tiny, 9)
    skipped: list[str] = []
    net = config_with(network__rank=4, network__alpha=4.0, network__type="lora").network
    assert FAMILY.load_lora_file(path, net, fresh, [], skipped) == 2 * 8 + 2 * 2 and skipped == []
    for name, layer in lora_layers(trained).items():
        torch.testing.assert_close(lora_layers(fresh)[name].get_delta_weight(ADAPTER), layer.get_delta_weight(ADAPTER),
                                   rtol=0, atol=1e-7, msg=name)


def test_verify_checks_a_tiny_file_against_its_base_and_fails_a_broken_one(tiny, tmp_path):
    from safetensors.torch import save_file

    from guitrainer.engine import export as X
    from guitrainer.engine.network.lora import read_lora
    from guitrainer.engine.verify import verify_lora

    torch.set_num_threads(1)
    folder = tiny_chroma.save_diffusers(tiny, tmp_path / "chroma")
    m = FAMILY.load_folder(folder)
    inject_lora(m.denoiser, 4, 4.0, 0.0, network.TARGETS["attention_ff"])
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora_parameters(m.denoiser):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    path = tmp_path / "chroma_style.safetensors"
    X.export_lora(path, m.denoiser, [], save_precision="fp16", family="chroma",
                  metadata={"ss_network_dim": "4", "ss_network_alpha": "4"})
    base = FAMILY.load_folder(folder)
    result = verify_lora(path, base)
    assert result.ok, result.message
    assert "ComfyUI" in result.message
    tensors, meta = read_lora(path)
    tensors = dict(tensors)
    key = "lora_unet_single_blocks_1_linear2.alpha"
    tensors[key] = tensors[key] * 2
    broken = tmp_path / "broken.safetensors"
    save_file(tensors, str(broken), metadata=meta)
    result = verify_lora(broken, base)
    assert not result.ok and "lora_unet_single_blocks_1_linear2" in result.message, result.message
