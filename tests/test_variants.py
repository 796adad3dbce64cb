"""Network variants (LoCon, LoHa, LoKr, DoRA): the exported file, read by an independent re-implementation of
the clients' loaders (tests/helpers/lycoris_reader.py), gives the in-memory model's weights."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import lycoris_reader
from safetensors.torch import load_file
from tiny_models import build_tiny

from guitrainer.config import NetworkConfig
from guitrainer.core.model.lora_format import CONV_UNET_TARGETS, TEXT_ENCODER_MLP_TARGETS
from guitrainer.engine import export
from guitrainer.engine.network import variants

TYPES = ("locon", "loha", "lokr", "dora")
#: bf16 / fp16 round each stored value to 2**-8 / 2**-11 relative; a merged weight's error is a few of those
EPS = {"fp32": 2.0**-23, "fp16": 2.0**-11, "bf16": 2.0**-8}


def _load(folder: Path, sdxl: bool) -> tuple[torch.nn.Module, list[torch.nn.Module]]:
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    unet = UNet2DConditionModel.from_pretrained(folder / "unet")
    tes = [CLIPTextModel.from_pretrained(folder / "text_encoder")]
    if sdxl:
        tes.append(CLIPTextModelWithProjection.from_pretrained(folder / "text_encoder_2"))
    return unet.eval(), [te.eval() for te in tes]


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, tuple[torch.nn.Module, list[torch.nn.Module]]]:
    out = {}
    for family in ("sd15", "sdxl"):
        folder = build_tiny(tmp_path_factory.mktemp(family), family)
        out[family] = _load(folder, family == "sdxl")
    return out


def _network(kind: str) -> NetworkConfig:
    # alpha != rank and conv alpha != conv rank, so a reader that drops either scale fails
    return NetworkConfig(rank=4, alpha=2.0, conv_rank=2, conv_alpha=3.0, type=kind, lokr_factor=4)


def _trained(base, network: NetworkConfig, seed: int = 0):
    unet, tes = copy.deepcopy(base[0]), copy.deepcopy(base[1])
    variants.inject_unet(unet, network)
    for te in tes:
        variants.inject_text_encoder(te, network)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for model in (unet, *tes):
            for name, p in model.named_parameters():
                if name.endswith(variants.DORA_PARAM):
                    p.mul_(1 + 0.2 * torch.randn(p.shape, generator=gen))
                elif any(k in name for k in variants.TRAINABLE_MARKERS):
                    p.copy_(0.2 * torch.randn(p.shape, generator=gen))
    return unet, tes


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_file_read_by_the_clients_rules_gives_the_trained_weights(bases, tmp_path, family, kind, precision):
    base_unet, base_tes = bases[family]
    unet, tes = _trained(bases[family], _network(kind))
    path = tmp_path / "v.safetensors"
    result = export.export_lora(path, unet, tes, save_precision=precision, on_fp16_overflow="raise")
    assert result.save_precision == precision
    sd = load_file(str(path))
    merged, consumed = lycoris_reader.merged_weights(sd, base_unet, base_tes)
    assert consumed == set(sd), f"keys no client reads: {sorted(set(sd) - consumed)[:5]}"

    layers = {**{("u", n): m for n, m in variants.adapter_layers(unet).items()}}
    for i, te in enumerate(tes):
        layers.update({(f"t{i}", n): m for n, m in variants.adapter_layers(te).items()})
    models = {"u": base_unet, **{f"t{i}": te for i, te in enumerate(base_tes)}}
    assert len(merged) == len(layers)  # every trained layer is in the file, nothing else
    convs = 0
    for (which, name), layer in layers.items():
        clean = models[which].get_submodule(name)
        weight = clean.weight.detach().float()
        delta = variants.effective_delta(layer)
        err = float((merged[clean] - (weight + delta)).abs().max())
        # observed: at most 1.6 eps of the save dtype (one rounding of each factor); 8 eps leaves room
        bound = 8 * EPS[precision] * (float(weight.abs().max()) + float(delta.abs().max())) + 1e-7
        assert float(delta.abs().max()) > 1e-3, name  # the layer really changes the weight
        assert err <= bound, f"{name}: {err:.3g} > {bound:.3g}"
        convs += variants.is_conv_kernel(clean)
    assert convs > 0  # the 3x3 convolutions are trained and exported


@pytest.mark.slow
def test_a_wrong_alpha_in_the_file_fails_the_comparison(bases, tmp_path):
    """The check can fail: doubling every alpha (or dora_scale) moves the merged weights."""
    unet, tes = _trained(bases["sd15"], _network("loha"))
    path = tmp_path / "v.safetensors"
    export.export_lora(path, unet, tes, save_precision="fp32")
    sd = load_file(str(path))
    bad = {k: (v * 2 if k.endswith(".alpha") else v) for k, v in sd.items()}
    merged, _ = lycoris_reader.merged_weights(bad, *bases["sd15"])
    name, layer = next(iter(variants.adapter_layers(unet).items()))
    clean = bases["sd15"][0].get_submodule(name)
    expected = clean.weight.detach().float() + variants.effective_delta(layer)
    assert float((merged[clean] - expected).abs().max()) > 1e-3


@pytest.mark.slow
def test_targets_and_metadata_per_type(bases, tmp_path):
    unet, tes = _trained(bases["sd15"], _network("dora"))
    unet_paths = set(variants.adapter_layers(unet))
    assert any(p.endswith("resnets.0.conv1") for p in unet_paths)
    assert any(p.endswith("downsamplers.0.conv") for p in unet_paths)
    assert any(p.endswith("upsamplers.0.conv") for p in unet_paths)
    assert any(p.endswith("mlp.fc1") for p in variants.adapter_layers(tes[0]))
    assert set(CONV_UNET_TARGETS) and set(TEXT_ENCODER_MLP_TARGETS) == {"fc1", "fc2"}
    path = tmp_path / "d.safetensors"
    export.export_lora(path, unet, tes, save_precision="fp16", metadata={"ss_network_module": "networks.lora"})
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        dora = [k for k in f.keys() if k.endswith("dora_scale")]  # noqa: SIM118 - safe_open has no __iter__
        conv_down = f.get_tensor("lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight")
    assert meta["ss_network_module"] == "lycoris.kohya"
    args = json.loads(meta["ss_network_args"])
    assert args == {"algo": "lora", "conv_dim": "2", "conv_alpha": "3", "dora_wd": "True", "wd_on_output": "False"}
    assert dora and tuple(conv_down.shape) == (2, 32, 3, 3)  # [conv rank, in, kh, kw]
    # plain LoRA keeps its targets: attention only, no convolutions, no text-encoder MLP
    plain_unet, plain_tes = copy.deepcopy(bases["sd15"][0]), copy.deepcopy(bases["sd15"][1])
    variants.inject_unet(plain_unet, replace(_network("lora")))
    variants.inject_text_encoder(plain_tes[0], _network("lora"))
    assert not any(variants.is_conv_kernel(m.get_base_layer()) for m in variants.adapter_layers(plain_unet).values())
    assert not any(p.endswith(("fc1", "fc2")) for p in variants.adapter_layers(plain_tes[0]))


def test_diffusers_format_refuses_variants_with_the_field_named():
    from guitrainer.config import TrainingConfig

    cfg = TrainingConfig()
    cfg.network.type = "loha"
    cfg.output.format = "diffusers"
    from guitrainer.config.checks import check_all

    errors = [e.field for e in check_all(cfg)]
    assert "output.format" in errors
    cfg.network.type = "lora"
    assert "output.format" not in [e.field for e in check_all(cfg)]


@pytest.mark.slow
def test_dora_layers_compute_the_weight_the_clients_merge(bases):
    """The forward pass of a DoRA Linear and 3x3 Conv equals the plain op with W + effective delta."""
    import torch.nn.functional as F

    unet, _ = _trained(bases["sd15"], _network("dora"))
    layers = variants.adapter_layers(unet)
    linear = next(m for m in layers.values() if isinstance(m.get_base_layer(), torch.nn.Linear))
    conv = next(m for m in layers.values() if variants.is_conv_kernel(m.get_base_layer()))
    with torch.no_grad():
        x = torch.randn(2, 5, linear.get_base_layer().in_features)
        base = linear.get_base_layer()
        want = F.linear(x, base.weight + variants.effective_delta(linear), base.bias)
        assert torch.allclose(linear(x), want, atol=1e-5)
        assert torch.allclose(linear(x=x), want, atol=1e-5)  # called with a keyword, too
        c = conv.get_base_layer()
        x = torch.randn(1, c.in_channels, 8, 8)
        want = F.conv2d(x, c.weight + variants.effective_delta(conv), c.bias, c.stride, c.padding)
        assert torch.allclose(conv(x), want, atol=1e-5)
        assert float(variants.effective_delta(conv).abs().max()) > 1e-2


@pytest.mark.slow
def test_a_plain_lora_file_continues_a_dora_network_as_the_same_weights(bases, tmp_path):
    from guitrainer.engine.network import lycoris_keys

    lora_unet, lora_tes = _trained(bases["sd15"], _network("locon"), seed=1)
    sd = lycoris_keys.variant_state_dict(lora_unet, lora_tes)
    dora_unet, dora_tes = _trained(bases["sd15"], _network("dora"), seed=2)
    skipped: list[str] = []
    count = lycoris_keys.load_variant_file(sd, dora_unet, dora_tes, skipped=skipped)
    assert count == len(variants.adapter_layers(dora_unet)) + len(variants.adapter_layers(dora_tes[0])) and not skipped
    for name, layer in variants.adapter_layers(dora_unet).items():
        want = variants.effective_delta(variants.adapter_layers(lora_unet)[name])
        assert torch.allclose(variants.effective_delta(layer), want, atol=1e-5), name


@pytest.mark.slow
@pytest.mark.parametrize(("file_kind", "net", "words"), [
    ("loha", _network("lokr"), "set network.type to loha"),
    ("lokr", replace(_network("lokr"), rank=8), "network.rank"),
    ("loha", replace(_network("loha"), conv_rank=3), "conv_rank"),
])
def test_continuing_from_another_type_or_rank_is_refused_naming_the_setting(bases, file_kind, net, words):
    from guitrainer.engine.network import lycoris_keys
    from guitrainer.engine.network.lora import LoraFormatError

    sd = lycoris_keys.variant_state_dict(*_trained(bases["sd15"], _network(file_kind)))
    unet, tes = _trained(bases["sd15"], net)
    with pytest.raises(LoraFormatError, match=words):
        lycoris_keys.load_variant_file(sd, unet, tes)


def test_dropout_kinds_belong_to_their_types():
    from guitrainer.config import TrainingConfig
    from guitrainer.config.checks import check_all

    cfg = TrainingConfig()
    cfg.network.type, cfg.network.dropout = "loha", 0.1
    assert "network.dropout" in [e.field for e in check_all(cfg)]
    cfg.network.dropout, cfg.network.rank_dropout = 0.0, 0.1
    assert not [e for e in check_all(cfg) if e.field.startswith("network.")]
    cfg.network.type = "locon"
    assert "network.rank_dropout" in [e.field for e in check_all(cfg)]
    config = variants._peft_config(replace(_network("lokr"), rank_dropout=0.2, module_dropout=0.3), {})
    assert (config.rank_dropout, config.module_dropout) == (0.2, 0.3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", TYPES)
def test_an_sdxl_file_continues_in_kohyas_spelling_and_in_the_diffusers_one(bases, kind):
    """SDXL files name UNet layers as kohya does (input_blocks_...); continuing reads them, and the diffusers
    spelling our files had before, into the same layers with the same weights."""
    from guitrainer.engine.network import lycoris_keys
    from guitrainer.engine.network.kohya_names import UnetNames
    from guitrainer.engine.network.lora import kohya_module_name

    src_unet, src_tes = _trained(bases["sdxl"], _network(kind), seed=3)
    sd = lycoris_keys.variant_state_dict(src_unet, src_tes)
    unet_modules = {k.partition(".")[0] for k in sd if k.startswith("lora_unet_")}
    assert unet_modules and all(m.startswith(("lora_unet_input_blocks_", "lora_unet_middle_block_",
                                              "lora_unet_output_blocks_")) for m in unet_modules)
    names = UnetNames(src_unet)
    original_to_diffusers = {names.name(p): kohya_module_name("lora_unet", p) for p in variants.adapter_layers(src_unet)}
    respelled = {}
    for key, value in sd.items():
        module, _, part = key.partition(".")
        respelled[f"{original_to_diffusers.get(module, module)}.{part}"] = value
    assert any(k.startswith("lora_unet_down_blocks_") for k in respelled)
    for file in (sd, respelled):
        unet, tes = _trained(bases["sdxl"], _network(kind), seed=4)
        skipped: list[str] = []
        count = lycoris_keys.load_variant_file(file, unet, tes, skipped=skipped)
        layers = len(variants.adapter_layers(unet)) + sum(len(variants.adapter_layers(te)) for te in tes)
        assert count == layers and not skipped
        for name, layer in variants.adapter_layers(unet).items():
            want = variants.effective_delta(variants.adapter_layers(src_unet)[name])
            assert torch.allclose(variants.effective_delta(layer), want, atol=1e-5), name
