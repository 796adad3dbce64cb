"""Which layouts each family's LoRA is written in (``output.format``): one table, read by the config check, the
family's facts and the export. SD 3.5 writes diffusers' layout too (its diffusers loader reads nothing of kohya's);
Flux.1 does not (diffusers' Flux loader converts the kohya file), and is told so in words that name no program
falsely."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import config_with, tiny_flux
from helpers.tiny_sd35 import build_modules

from guitrainer.config.families import FAMILY_NAMES, LORA_FORMATS
from guitrainer.core.families.registry import facts


def _format_errors(**settings: object) -> list[str]:
    return [e.message for e in config_with(**settings).errors() if e.field == "output.format"]


def test_every_family_has_its_formats_and_its_facts_say_them():
    for name in FAMILY_NAMES:
        if name != "auto":
            assert LORA_FORMATS[name][0] == "kohya"
            assert facts(name).lora_formats == LORA_FORMATS[name]
    assert facts("flux1").lora_formats == ("kohya",)
    assert facts("sd35").lora_formats == ("kohya", "diffusers")


@pytest.mark.parametrize("family", ["sd15", "sdxl", "demo", "sd35"])
def test_families_that_write_diffusers_layout_accept_it(family):
    assert _format_errors(model__family=family, output__format="diffusers") == []
    assert _format_errors(model__family=family, output__format="kohya") == []


def test_flux_refuses_diffusers_layout_in_words_that_are_true():
    (message,) = _format_errors(model__family="flux1", output__format="diffusers")
    assert message == ("Flux.1 LoRAs are saved in kohya's layout (what ComfyUI, Forge and sd-scripts read), not in "
                       "diffusers' layout: set the format to kohya")
    assert _format_errors(model__family="flux1", output__format="kohya") == []
    assert _format_errors(model__family="auto", output__format="diffusers") == []  # known once the model is


def test_the_transformer_families_still_train_a_plain_lora_only():
    errors = config_with(model__family="sd35", network__type="loha").errors()
    assert [e.field for e in errors if "plain LoRA" in e.message] == ["network.type"]


def _tiny_lora(family: str, folder: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The family's tiny transformer and CLIP-L with a random LoRA on their attention."""
    from guitrainer.config import NetworkConfig
    from guitrainer.engine.families import registry
    from guitrainer.engine.network import lora

    if family == "flux1":
        tiny = tiny_flux.build(seed=2)
        denoiser, encoder = tiny.transformer, tiny.clip
    else:
        modules = build_modules(folder)
        denoiser, encoder = modules["transformer"], modules["text_encoder"]
    lora.inject_lora(denoiser, 4, 2.0, 0.0, registry.family(family).denoiser_targets(NetworkConfig(rank=4, alpha=2.0)))
    lora.inject_text_encoder_lora(encoder, 4, 2.0, 0.0, ("q_proj", "k_proj", "v_proj", "out_proj"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora.lora_parameters(denoiser) + lora.lora_parameters(encoder):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return denoiser, encoder


@pytest.mark.slow
def test_export_writes_sd35s_diffusers_layout_and_refuses_fluxs(tmp_path):
    from guitrainer.core.runs import names as run_names
    from guitrainer.engine import export as X
    from guitrainer.engine.network.lora import read_lora

    denoiser, clip_l = _tiny_lora("sd35", tmp_path / "sd35")
    out = run_names.choose(config_with(output__folder=str(tmp_path), output__name="sd3", output__format="diffusers").output).lora()
    assert out == tmp_path / "sd3" / "pytorch_lora_weights.safetensors"
    X.export_lora(out, denoiser, [clip_l], fmt="diffusers", save_precision="fp32", family="sd35")
    tensors, meta = read_lora(out)
    assert meta["format"] == "pt" and meta["ss_save_precision"] == "fp32"
    assert "transformer.transformer_blocks.0.attn.to_q.lora_A.weight" in tensors
    assert "text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight" in tensors
    assert not any("alpha" in k or "lora_down" in k for k in tensors)  # diffusers' SD 3 loader refuses alpha keys

    denoiser, clip_l = _tiny_lora("flux1", tmp_path / "flux")
    with pytest.raises(ValueError, match="Flux.1 LoRAs are saved in kohya format only"):
        X.export_lora(tmp_path / "flux.safetensors", denoiser, [clip_l], fmt="diffusers", family="flux1")
    assert not (tmp_path / "flux.safetensors").exists()
