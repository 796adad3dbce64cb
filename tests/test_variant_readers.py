"""Which program reads which variant file (issue 27 #15): the engine's per-reader rules against test-only readers
written from each client's code (tests/helpers/client_readers.py), the DoRA layout choice, LoKr's factor in the
metadata, LyCORIS' loader on full-size SD 1.5, and the save-precision note."""

from __future__ import annotations

import copy
import json
import logging
import sys
from pathlib import Path

import pytest
import torch
from helpers import client_readers
from safetensors import safe_open
from safetensors.torch import load_file
from tiny_models import build_tiny

from guitrainer.config import NetworkConfig
from guitrainer.core.model.init_lora import init_lora_problem
from guitrainer.core.model.variant_readers import save_precision_note
from guitrainer.engine import export
from guitrainer.engine.memory import model_spec
from guitrainer.engine.network import client_merge, lycoris_keys, variants


@pytest.fixture(scope="module")
def sd15(tmp_path_factory) -> tuple[torch.nn.Module, torch.nn.Module]:
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel

    folder = build_tiny(tmp_path_factory.mktemp("sd15"), "sd15")
    return UNet2DConditionModel.from_pretrained(folder / "unet").eval(), CLIPTextModel.from_pretrained(folder / "text_encoder").eval()


def _trained(base, kind: str, layout: str = "column", factor: int = 4, scale: float = 0.2):
    unet, te = copy.deepcopy(base[0]), copy.deepcopy(base[1])
    net = NetworkConfig(type=kind, rank=4, alpha=2.0, conv_rank=2, conv_alpha=3.0, lokr_factor=factor, dora_layout=layout)
    variants.inject_unet(unet, net)
    variants.inject_text_encoder(te, net)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for model in (unet, te):
            for name, p in model.named_parameters():
                if name.endswith(variants.DORA_PARAM):
                    p.mul_(1 + 0.2 * torch.randn(p.shape, generator=gen))
                elif any(k in name for k in variants.TRAINABLE_MARKERS):
                    p.copy_(scale * torch.randn(p.shape, generator=gen))
    return unet, te


def _export(path: Path, trained, **kw):
    return export.export_lora(path, trained[0], [trained[1]], **kw)


def _layers(trained, base) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """(adapter layer, the same layer of the plain base model)."""
    out = []
    for model, plain in zip(trained, base):
        out += [(layer, plain.get_submodule(path)) for path, layer in variants.adapter_layers(model).items()]
    return out


def _rel(merged: torch.Tensor, layer: torch.nn.Module, clean: torch.nn.Module) -> float:
    delta = variants.effective_delta(layer)
    return float((merged - (clean.weight.detach().float() + delta)).norm() / delta.norm())


@pytest.mark.parametrize("layout", ["column", "row"])
def test_a_dora_layer_computes_the_weight_its_layouts_readers_merge(sd15, tmp_path, layout):
    """Row: the layer's output is W' x + b with W' = V * m / ||V||_row, what LyCORIS merges; column: what ComfyUI
    and A1111 merge. The other readers do not give it."""
    trained = _trained(sd15, "dora", layout)
    path = tmp_path / "d.safetensors"
    _export(path, trained, save_precision="fp32")
    sd = load_file(str(path))
    with safe_open(str(path), framework="pt") as f:
        args = json.loads(f.metadata()["ss_network_args"])
    assert args["wd_on_output"] == str(layout == "row")
    readers = ("lycoris",) if layout == "row" else ("comfyui", "a1111")
    merged = {r: client_readers.merged_weights(sd, sd15[0], [sd15[1]], r) for r in ("comfyui", "a1111", "lycoris")}
    for layer, clean in _layers(trained, sd15):
        weight = clean.weight
        scale = sd[next(k for k in sd if k.endswith("dora_scale"))]
        assert scale.dim() >= 2
        x = torch.randn(2, weight.shape[1], *([5, 5] if weight.dim() == 4 else []))
        with torch.no_grad():  # the layer's own forward (the hook) against the effective weight
            want = (torch.nn.functional.conv2d(x, weight + variants.effective_delta(layer), clean.bias, clean.stride, clean.padding)
                    if weight.dim() == 4 else torch.nn.functional.linear(x, weight + variants.effective_delta(layer), clean.bias))
            assert float((layer(x) - want).abs().max()) < 1e-4
        for r in readers:
            assert _rel(merged[r][clean], layer, clean) < 1e-4, (r, layout)
    worst = {r: max(_rel(merged[r][c], layer, c) for layer, c in _layers(trained, sd15)) for r in merged if r not in readers}
    assert all(w > 1e-2 for w in worst.values()), worst  # the check can fail: the other axis is another weight


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(("kind", "layout"), [("loha", "column"), ("lokr", "column"), ("dora", "column"), ("dora", "row")])
def test_the_engines_reader_rules_are_the_clients(sd15, tmp_path, kind, layout, precision):
    trained = _trained(sd15, kind, layout)
    path = tmp_path / "v.safetensors"
    _export(path, trained, save_precision=precision, on_fp16_overflow="raise")
    sd = load_file(str(path))
    for reader in client_merge.READERS:
        theirs = client_readers.merged_weights(sd, sd15[0], [sd15[1]], reader)
        for module, parts in client_merge.grouped(sd).items():
            clean = client_readers.key_map(sd15[0], [sd15[1]])[module]
            if reader == "lycoris" and client_merge.lycoris_problem(parts, clean):
                continue  # its loader stops there (test_the_real_lycoris_package_reads_as_the_engine_says)
            ours = client_merge.module_weight(parts, clean.weight.detach(), reader)
            assert torch.allclose(ours, theirs[clean], rtol=1e-5, atol=1e-6), (reader, module)


def test_a1111_loses_half_precision_loha_and_lokr_and_the_note_says_fp32(sd15, tmp_path):
    """A1111 computes LoHa in the file's dtype (and adds it to the weight in it): fp16 and bf16 files lose there
    what ComfyUI keeps; fp32 loses nothing. The Output page's note says so, and only for LoHa / LoKr."""
    trained = _trained(sd15, "loha", scale=0.05)
    errors = {}
    for precision in ("fp32", "fp16", "bf16"):
        path = tmp_path / f"{precision}.safetensors"
        result = _export(path, trained, save_precision=precision)
        sd = load_file(str(path))
        per = {}
        for r in ("comfyui", "a1111"):
            merged = client_readers.merged_weights(sd, sd15[0], [sd15[1]], r)
            per[r] = max(_rel(merged[c], layer, c) for layer, c in _layers(trained, sd15))
        errors[precision] = per
        assert any("A1111" in w for w in result.warnings) == (precision != "fp32")
    assert errors["fp32"]["a1111"] < 1e-5
    for precision in ("fp16", "bf16"):
        assert errors[precision]["a1111"] > 5 * errors[precision]["comfyui"], errors
    assert errors["bf16"]["a1111"] > errors["fp16"]["a1111"]  # bf16 is no way out in A1111
    for kind in ("loha", "lokr"):
        assert "fp32" in save_precision_note(kind, "fp16") and "fp32" in save_precision_note(kind, "bf16")
        assert save_precision_note(kind, "fp32") == ""
    assert save_precision_note("dora", "fp16") == save_precision_note("lora", "bf16") == ""


def test_a_lokr_factor_other_than_the_default_is_in_network_args(sd15, tmp_path):
    for factor, want in ((4, "4"), (-1, None)):
        path = tmp_path / f"k{factor}.safetensors"
        _export(path, _trained(sd15, "lokr", factor=factor), save_precision="fp32")
        with safe_open(str(path), framework="pt") as f:
            args = json.loads(f.metadata()["ss_network_args"])
        assert args.get("factor") == want and args["algo"] == "lokr"


def test_continue_from_refuses_a_dora_file_of_the_other_layout(sd15, tmp_path):
    for layout in ("column", "row"):
        path = tmp_path / f"{layout}.safetensors"
        _export(path, _trained(sd15, "dora", layout), save_precision="fp32")
        other = "row" if layout == "column" else "column"
        assert init_lora_problem(str(path), "dora", layout) == ""
        problem = init_lora_problem(str(path), "dora", other)
        assert f"set DoRA layout to {layout}" in problem
        unet, te = copy.deepcopy(sd15[0]), copy.deepcopy(sd15[1])
        net = NetworkConfig(type="dora", rank=4, alpha=2.0, conv_rank=2, conv_alpha=3.0, dora_layout=other)
        variants.inject_unet(unet, net)
        variants.inject_text_encoder(te, net)
        with pytest.raises(Exception, match=f"network.dora_layout to {layout}"):
            lycoris_keys.load_variant_file(load_file(str(path)), unet, [te])


def _meta_parts(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    names = ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b")
    parts = {n: getattr(layer, n)[variants.ADAPTER] for n in names if variants.ADAPTER in getattr(layer, n)}
    return {**parts, "alpha": torch.tensor(1.0)}


def test_lycoris_factor_guess_misses_one_conv_of_a_full_size_sd15_lokr():
    """Measured with LyCORIS 4.1.3's own make_module on our default full-size SD 1.5 LoKr file (README table):
    one module stops it, where its guess counts the 3x3 kernel; with an explicit factor none does."""
    for factor, want in ((-1, ["up_blocks.2.resnets.0.conv1"]), (8, [])):
        unet = model_spec.build_on_meta("sd15", "unet")
        variants.inject_unet(unet, NetworkConfig(type="lokr", lokr_factor=factor))
        stops = [path for path, layer in variants.adapter_layers(unet).items()
                 if client_merge.lycoris_problem(_meta_parts(layer), layer.get_base_layer())]
        assert stops == want


def test_the_real_lycoris_package_reads_as_the_engine_says(sd15, tmp_path):
    """Runs where the lycoris-lora package is importable (``pip install --target DIR lycoris-lora einops toml`` and
    ``PYTHONPATH=DIR``; never a dependency of the app): its loader stops on a column DoRA file, reads a row one
    as trained, and its LoHa merge multiplies by alpha / rank twice."""
    pytest.importorskip("lycoris")
    from lycoris.modules import get_module, make_module

    logging.getLogger("lycoris").setLevel(logging.ERROR)
    for kind, layout in (("dora", "row"), ("dora", "column"), ("loha", "column")):
        trained = _trained(sd15, kind, layout)
        for layer, clean in _layers(trained, sd15)[:6]:
            parts = {f"x.{k}": v for k, v in lycoris_keys.layer_tensors(layer).items()}
            plain = copy.deepcopy(clean)
            if layout == "column" and kind == "dora":
                with pytest.raises(RuntimeError):
                    make_module(*get_module(parts, "x"), "x", plain)
                continue
            module = make_module(*get_module(parts, "x"), "x", plain)
            merged = module.get_merged_weight(1.0, plain.weight.shape)[0].detach().float()
            rel = _rel(merged, layer, clean)
            if kind == "loha":  # scale = alpha / rank = 0.5 (conv 1.5) applied twice: the change comes out scaled by it
                scale = float(parts["x.alpha"]) / parts["x.hada_w1_b"].shape[0]
                assert abs(rel - abs(scale - 1)) < 1e-3, rel
            else:
                assert rel < 1e-4


if __name__ == "__main__":
    sys.exit(pytest.main([str(Path(__file__))]))
