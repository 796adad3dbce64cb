"""The Output page's Verify for network variants (issue 21 #4): LoCon through diffusers, LoHa / LoKr / DoRA by
the clients' merge rules against the trained model, with the clients that read each type named."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tiny_models import build_tiny

from guitrainer.config import NetworkConfig
from guitrainer.engine import export
from guitrainer.engine.network import variants
from guitrainer.engine.verify import verify_lora

pytestmark = pytest.mark.slow  # every test here builds tiny models and trains or loads LoRA files on them


@pytest.fixture(scope="module")
def sd15(tmp_path_factory) -> tuple[Path, SimpleNamespace]:
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel

    folder = build_tiny(tmp_path_factory.mktemp("sd15"), "sd15")
    unet = UNet2DConditionModel.from_pretrained(folder / "unet")
    te = CLIPTextModel.from_pretrained(folder / "text_encoder")
    return folder, SimpleNamespace(denoiser=unet, text_encoders=[te])


def _trained(base: SimpleNamespace, kind: str) -> SimpleNamespace:
    unet, te = copy.deepcopy(base.denoiser), copy.deepcopy(base.text_encoders[0])
    net = NetworkConfig(type=kind, rank=4, alpha=2.0, conv_rank=2, conv_alpha=3.0)
    variants.inject_unet(unet, net)
    variants.inject_text_encoder(te, net)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for model in (unet, te):
            for name, p in model.named_parameters():
                if name.endswith(variants.DORA_PARAM):
                    p.mul_(1 + 0.2 * torch.randn(p.shape, generator=gen))
                elif any(k in name for k in variants.TRAINABLE_MARKERS):
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return SimpleNamespace(denoiser=unet, text_encoders=[te])


@pytest.mark.parametrize("kind", ["loha", "lokr", "dora"])
def test_lycoris_files_verify_against_the_trained_model_and_a_wrong_one_fails(sd15, tmp_path, kind):
    folder, base = sd15
    trained = _trained(base, kind)
    path = tmp_path / "v.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision="bf16")
    result = verify_lora(path, str(folder), reference=trained)
    assert result.ok, result.message
    assert not result.keys_unused and result.lora_effect > 0
    readers = {v.reader: v for v in result.readers}
    assert readers["comfyui"].as_trained and "ComfyUI / Forge: reads it as trained" in result.message
    assert "diffusers: " in result.message and "LyCORIS" in result.message
    other = _trained(base, kind)
    with torch.no_grad():
        for p in variants.trainable_parameters(other.denoiser):
            p.mul_(1.5)
    assert not verify_lora(path, str(folder), reference=other).ok


def test_dora_says_diffusers_does_not_read_it_as_trained(sd15, tmp_path):
    folder, base = sd15
    trained = _trained(base, "dora")
    path = tmp_path / "d.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision="fp32")
    result = verify_lora(path, str(folder))
    assert result.ok, result.message  # every key read by the clients' rules, the merge changes the output
    assert "diffusers: loads it, outputs up to" in result.message and "drops dora_scale" in result.message
    readers = {v.reader: v for v in result.readers}
    assert readers["comfyui"].as_trained and readers["a1111"].as_trained
    assert not readers["lycoris"].as_trained and "its loader stops" in readers["lycoris"].words
    assert not readers["kohya"].as_trained and readers["kohya"].worst > 0.1  # a plain LoRA there


@pytest.fixture(scope="module")
def sdxl(tmp_path_factory) -> tuple[Path, SimpleNamespace]:
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    folder = build_tiny(tmp_path_factory.mktemp("sdxl"), "sdxl")
    unet = UNet2DConditionModel.from_pretrained(folder / "unet")
    tes = [CLIPTextModel.from_pretrained(folder / "text_encoder"),
           CLIPTextModelWithProjection.from_pretrained(folder / "text_encoder_2")]
    return folder, SimpleNamespace(denoiser=unet, text_encoders=tes)


def _trained_all(base: SimpleNamespace, kind: str) -> SimpleNamespace:
    first = _trained(SimpleNamespace(denoiser=base.denoiser, text_encoders=base.text_encoders[:1]), kind)
    tes = list(first.text_encoders)
    for te in base.text_encoders[1:]:
        te = copy.deepcopy(te)
        variants.inject_text_encoder(te, NetworkConfig(type=kind, rank=4, alpha=2.0, conv_rank=2, conv_alpha=3.0))
        with torch.no_grad():
            for p in variants.trainable_parameters(te):
                p.copy_(0.1 * torch.randn(p.shape))
        tes.append(te)
    return SimpleNamespace(denoiser=first.denoiser, text_encoders=tes)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_locon_is_read_by_diffusers_and_matches_the_trained_model(request, tmp_path, family, precision):
    folder, base = request.getfixturevalue(family)
    trained = _trained_all(base, "locon")
    path = tmp_path / "c.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision=precision)
    result = verify_lora(path, str(folder), reference=trained)
    assert result.ok and result.message.startswith("diffusers reads this file: every key used"), result.message
    assert result.max_abs_diff_te is not None and result.lora_effect > 0


@pytest.mark.parametrize("kind", ["loha", "lokr", "dora"])
@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_without_the_trained_model_the_clients_merge_is_compared_with_the_network_rebuilt_from_the_file(
    request, tmp_path, family, kind
):
    """The Output page's Verify (no trained model at hand) rebuilds the network from the file and compares."""
    folder, base = request.getfixturevalue(family)
    trained = _trained_all(base, kind)
    path = tmp_path / "r.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision="fp16")
    result = verify_lora(path, str(folder))
    assert result.ok, result.message
    assert result.reference == "our loader", result.message
    assert "matches the network as trained, rebuilt from the file" in result.message
    assert result.max_abs_diff_te is not None and result.lora_effect > 0
    # the rebuilt network is the trained one: same outputs as the trained model within fp16 rounding
    assert verify_lora(path, str(folder), reference=trained).ok


def test_a_merge_rule_that_reads_the_file_otherwise_than_training_fails(sd15, tmp_path, monkeypatch):
    """The comparison has teeth: a client rule that drops the alpha / rank scale no longer matches."""
    from guitrainer.engine.network import client_merge

    folder, base = sd15
    trained = _trained(base, "loha")
    path = tmp_path / "s.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision="fp32")
    rule = client_merge.module_weight

    def unscaled(parts, weight, reader="comfyui"):
        return rule({**parts, "alpha": torch.tensor(float(parts["hada_w1_b"].shape[0]))}, weight, reader)

    monkeypatch.setattr(client_merge, "module_weight", unscaled)
    result = verify_lora(path, str(folder))
    assert not result.ok and "differs from the network as trained" in result.message


def _edited(path: Path, out: Path, edit) -> Path:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    sd = load_file(str(path))
    edit(sd)
    save_file(sd, str(out), metadata=meta)
    return out


@pytest.mark.parametrize("kind", ["loha", "dora"])
def test_an_alpha_edited_in_the_file_fails_against_the_files_own_metadata(sd15, tmp_path, kind):
    """Both readers take the file's alpha, so doubling it is caught by the network alpha the metadata states."""
    folder, base = sd15
    trained = _trained(base, kind)
    path = tmp_path / "a.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision="fp16")
    assert verify_lora(path, str(folder)).ok

    def double(sd):
        for key in [k for k in sd if k.endswith(".alpha")][:3]:
            sd[key] = sd[key] * 2

    result = verify_lora(_edited(path, tmp_path / "b.safetensors", double), str(folder))
    assert not result.ok
    assert "3 modules have another alpha than the file's metadata states (ss_network_alpha = 2" in result.message


@pytest.mark.parametrize(("edit", "words"), [
    (lambda sd, m: sd.update({f"{m}.hada_t1": torch.zeros(2, 2, 3, 3), f"{m}.hada_t2": torch.zeros(2, 2, 3, 3)}),
     "a Tucker core (LoHa use_tucker)"),
    (lambda sd, m: sd.update({f"{m}.dora_scale": torch.ones(3, 1)}),  # per output channel is read now (row layout)
     "a dora_scale of shape (3, 1), neither per input nor per output channel"),
    (lambda sd, m: sd.pop(f"{m}.hada_w2_b"), "an unknown layout"),
])
def test_layouts_other_trainers_write_are_named_not_checked_and_never_crash(sd15, tmp_path, edit, words):
    folder, base = sd15
    trained = _trained(base, "loha")
    path = tmp_path / "l.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision="fp32")
    module = next(k.partition(".")[0] for k in _read(path) if k.startswith("lora_unet_") and k.endswith(".hada_w1_a"))
    result = verify_lora(_edited(path, tmp_path / "o.safetensors", lambda sd: edit(sd, module)), str(folder))
    assert not result.ok and "1 modules were not checked" in result.message and words in result.message
    assert result.reference == "none" and "Not compared with the network as trained" in result.message


def test_a_loha_file_with_a_dora_scale_is_not_compared_falsely(sd15, tmp_path):
    """LyCORIS writes dora_scale beside LoHa too (weight_decompose); the rebuilt LoHa has no place for it, so the
    comparison is left out rather than reported as a difference."""
    folder, base = sd15
    trained = _trained(base, "loha")
    path = tmp_path / "h.safetensors"
    export.export_lora(path, trained.denoiser, trained.text_encoders, save_precision="fp32")

    def add_scale(sd):
        for key in [k for k in sd if k.endswith(".hada_w1_b")]:
            module = key.partition(".")[0]
            width = base_width(base, module)
            sd[f"{module}.dora_scale"] = torch.full((1, width), 2.0)

    result = verify_lora(_edited(path, tmp_path / "hd.safetensors", add_scale), str(folder))
    assert "differs from" not in result.message and result.reference == "none"
    assert "which a loha network here has no place for" in result.message


def _read(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def base_width(base: SimpleNamespace, module: str) -> int:
    """The input width of the base layer a kohya module name means."""
    from guitrainer.engine.network import lora

    targets = lora.kohya_targets(base.denoiser, base.text_encoders, lambda m: {
        n: x for n, x in m.named_modules() if isinstance(x, torch.nn.Linear | torch.nn.Conv2d)})
    return targets[module].weight.shape[1]
