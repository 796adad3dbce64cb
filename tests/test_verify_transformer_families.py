"""Verify for Flux and SD 3.5: a file merged by ComfyUI's rules (guitrainer's reader of them) must give the trained
model — right after training, and from the file alone (against the network rebuilt from it) —, SD 3.5's
diffusers-layout file must also load in diffusers' own loader, and a broken file fails naming the module.

Tiny models (2 + 2 Flux blocks of width 64, 3 MMDiT blocks of width 192 with a dual-attention and a pre-only block),
a random LoRA on every layer kohya trains and both text encoders' attention + MLP, or a few real training steps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import demo_cfg, tiny_flux
from helpers.tiny_sd35 import build_tiny_sd35
from PIL import Image
from safetensors.torch import save_file

from guitrainer.config import NetworkConfig
from guitrainer.engine import export as X
from guitrainer.engine.families import registry
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network import lora
from guitrainer.engine.trainer import Trainer
from guitrainer.engine.verify import verify_lora

pytestmark = pytest.mark.slow
RANK = 4


@dataclass
class Case:
    """One family's tiny base model (a folder), a model with a random LoRA, and the modules the broken files break."""

    family: str
    base: Path
    model: LoadedModel
    alpha: float
    width: int  # the rows of one q / k / v slice of a fused module
    fused: str  # a fused qkv module
    linear: str  # a plain module
    alpha_of: str  # the module whose alpha a broken file doubles
    sliced: str  # a fused module a broken file drops the last slice of
    slices: int  # how many slices that module has


def _random_lora(model: LoadedModel, family: str, alpha: float, seed: int) -> None:
    """A LoRA as the trainer injects one (kohya's full set, both CLIPs' attention + MLP), every factor random."""
    fam = registry.family(family)
    network = NetworkConfig(rank=RANK, alpha=alpha, target_modules="attention_ff_proj", train_text_encoder=True)
    lora.inject_lora(model.denoiser, RANK, alpha, 0.0, fam.denoiser_targets(network))
    encoders = [model.text_encoders[i] for i in fam.trainable_text_encoders(model)]
    for te in encoders:
        lora.inject_text_encoder_lora(te, RANK, alpha, 0.0, fam.text_encoder_targets(model, model.text_encoders.index(te), network))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in (model.denoiser, *encoders):
            for p in lora.lora_parameters(module):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


@pytest.fixture(scope="module")
def flux(tmp_path_factory) -> Case:
    folder = tiny_flux.save_diffusers(tiny_flux.build(seed=7), tmp_path_factory.mktemp("flux") / "flux")
    model = registry.family("flux1").load_folder(folder)
    _random_lora(model, "flux1", 8.0, seed=1)
    return Case("flux1", folder, model, 8.0, tiny_flux.HIDDEN, "lora_unet_double_blocks_0_img_attn_qkv",
                "lora_unet_double_blocks_1_img_mlp_0", "lora_unet_single_blocks_0_linear1",
                "lora_unet_single_blocks_1_linear1", 4)


@pytest.fixture(scope="module")
def sd35(tmp_path_factory) -> Case:
    tiny = build_tiny_sd35(tmp_path_factory.mktemp("sd35"))
    model = registry.family("sd35").load_folder(tiny.folder)
    _random_lora(model, "sd35", 2.0, seed=2)
    # the last block's context modulation: its halves are swapped between the layouts (ComfyUI's swap_scale_shift)
    return Case("sd35", tiny.folder, model, 2.0, 192, "lora_unet_joint_blocks_1_x_block_attn_qkv",
                "lora_unet_joint_blocks_0_x_block_mlp_fc1", "lora_unet_joint_blocks_2_context_block_adaLN_modulation_1",
                "lora_unet_joint_blocks_0_x_block_attn2_qkv", 3)


@pytest.fixture(params=["flux1", "sd35"])
def case(request) -> Case:
    return request.getfixturevalue({"flux1": "flux", "sd35": "sd35"}[request.param])


def _export(case: Case, path: Path, fmt: str = "kohya", precision: str = "fp32") -> Path:
    fam = registry.family(case.family)
    encoders = [case.model.text_encoders[i] for i in fam.trainable_text_encoders(case.model)]
    meta = {"ss_network_dim": str(RANK), "ss_network_alpha": f"{case.alpha:g}"}
    X.export_lora(path, case.model.denoiser, encoders, fmt=fmt, save_precision=precision, family=case.family, metadata=meta)
    return path


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_our_file_merges_to_the_trained_model_by_comfyuis_rules(case, tmp_path, precision):
    path = _export(case, tmp_path / "lora.safetensors", precision=precision)
    tensors, _ = lora.read_lora(path)
    trained = verify_lora(path, str(case.base), reference=case.model)
    assert trained.ok, trained.message
    assert trained.reference == "trained model" and trained.save_precision == precision
    assert trained.keys_total == len(tensors) and trained.keys_unused == ()
    assert trained.lora_effect > 1e-3 and trained.lora_effect_te > 1e-3, trained  # the file really changes both
    assert trained.max_abs_diff_te is not None and trained.max_abs_diff_unet <= trained.tolerance
    if precision == "fp32":
        assert trained.max_abs_diff_unet < 1e-5 and trained.max_abs_diff_te < 1e-4, trained
    assert "ComfyUI's rules read every key; each merged weight equals the trained model's" in trained.message

    alone = verify_lora(path, str(case.base))
    assert alone.ok and alone.reference == "our loader", alone.message
    assert alone.max_abs_diff_unet < 1e-5, alone  # both readers apply the same (rounded) numbers
    assert "the network rebuilt from the file" in alone.message


def test_the_verdict_names_what_each_program_makes_of_the_file(flux, sd35, tmp_path):
    flux_says = verify_lora(_export(flux, tmp_path / "flux.safetensors"), str(flux.base)).message
    assert "ComfyUI and Forge" in flux_says and "guitrainer's reader of ComfyUI's rules" in flux_says
    assert "create_network_from_weights" in flux_says and "3072-wide" in flux_says
    sd35_says = verify_lora(_export(sd35, tmp_path / "sd35.safetensors"), str(sd35.base)).message
    assert "networks/lora_sd3.py" in sd35_says and "reads nothing of kohya's layout" in sd35_says


def test_sd35s_diffusers_layout_file_loads_in_diffusers_own_loader_too(sd35, tmp_path):
    path = _export(sd35, tmp_path / "sd35_lora" / "pytorch_lora_weights.safetensors", fmt="diffusers")
    tensors, _ = lora.read_lora(path)
    assert tensors and all(k.startswith(("transformer.", "text_encoder.", "text_encoder_2.")) for k in tensors)
    for reference in (sd35.model, None):
        result = verify_lora(path.parent, str(sd35.base), reference=reference)  # the folder, as the user picks it
        assert result.ok, result.message
        assert "diffusers' load_lora_weights reads every module; its outputs match" in result.message
        assert result.keys_unused == () and result.max_abs_diff_unet < 1e-5


def test_a_diffusers_loader_that_leaves_modules_out_fails(sd35, tmp_path):
    """A diffusers-layout file whose CLIP-G keys name a component the pipeline lacks: ComfyUI does not read them
    either, and diffusers' loader leaves them out; both are said."""
    path = _export(sd35, tmp_path / "d" / "pytorch_lora_weights.safetensors", fmt="diffusers")
    tensors, meta = lora.read_lora(path)
    broken = {k.replace("text_encoder_2.", "text_encoder_9.", 1): v for k, v in tensors.items()}
    save_file(broken, str(path), metadata=meta)
    result = verify_lora(path, str(sd35.base))
    assert not result.ok
    assert "keys are not read by ComfyUI's rules (e.g. text_encoder_9." in result.message, result.message


# --------------------------------------------------------------------------- broken files


def _swap_q_and_k(sd: dict[str, torch.Tensor], case: Case) -> str:
    up = sd[f"{case.fused}.lora_up.weight"].clone()
    w = case.width
    up[:w], up[w:2 * w] = sd[f"{case.fused}.lora_up.weight"][w:2 * w], sd[f"{case.fused}.lora_up.weight"][:w]
    sd[f"{case.fused}.lora_up.weight"] = up
    return case.fused


def _double_alpha(sd: dict[str, torch.Tensor], case: Case) -> str:
    sd[f"{case.alpha_of}.alpha"] = sd[f"{case.alpha_of}.alpha"] * 2
    return case.alpha_of


def _rename(sd: dict[str, torch.Tensor], case: Case) -> str:
    renamed = case.linear[:-1] + "9"
    for part in ("lora_down.weight", "lora_up.weight", "alpha"):
        sd[f"{renamed}.{part}"] = sd.pop(f"{case.linear}.{part}")
    return renamed


def _drop_last_slice(sd: dict[str, torch.Tensor], case: Case) -> str:
    up = sd[f"{case.sliced}.lora_up.weight"]
    sd[f"{case.sliced}.lora_up.weight"] = up[: case.width * (case.slices - 1)].clone()
    return case.sliced


BREAKERS = {"rows swapped": _swap_q_and_k, "alpha doubled": _double_alpha, "key renamed": _rename,
            "slice missing": _drop_last_slice}


@pytest.mark.parametrize("against", ["trained model", "file alone"])
@pytest.mark.parametrize("broken", list(BREAKERS))
def test_a_broken_file_fails_naming_the_module(case, tmp_path, broken, against):
    path = _export(case, tmp_path / "lora.safetensors")
    tensors, meta = lora.read_lora(path)
    tensors = dict(tensors)
    module = BREAKERS[broken](tensors, case)
    save_file(tensors, str(path), metadata=meta)
    result = verify_lora(path, str(case.base), reference=case.model if against == "trained model" else None)
    assert not result.ok, result.message
    assert module in result.message, result.message


def test_words_of_each_failure(flux, tmp_path):
    """What the user reads for each broken Flux file, from the file alone."""
    path = _export(flux, tmp_path / "lora.safetensors")
    clean, meta = lora.read_lora(path)

    def verdict(breaker) -> str:
        tensors = dict(clean)
        breaker(tensors, flux)
        save_file(tensors, str(path), metadata=meta)
        return verify_lora(path, str(flux.base)).message

    assert "cannot rebuild it from this file (lora_unet_double_blocks_0_img_attn_qkv: rank 12 is 3 x 4 but the up " \
           "weight is not block-diagonal" in verdict(_swap_q_and_k)
    assert ("1 module has another alpha than the file's metadata states (ss_network_alpha = 8 at ss_network_dim = 4), "
            "e.g. lora_unet_single_blocks_0_linear1 (alpha 64, rank 16)") in verdict(_double_alpha)
    assert "3 keys are not read by ComfyUI's rules (e.g. lora_unet_double_blocks_1_img_mlp_9.alpha)" in verdict(_rename)
    assert ("1 module cannot be merged (e.g. lora_unet_single_blocks_1_linear1: its up @ down (192 x 64) does not "
            "fit single_blocks.1.linear1.weight (448, 64))") in verdict(_drop_last_slice)


def test_against_the_trained_model_the_module_that_merges_wrong_is_named(flux, tmp_path):
    path = _export(flux, tmp_path / "lora.safetensors")
    tensors, meta = lora.read_lora(path)
    tensors = dict(tensors)
    _swap_q_and_k(tensors, flux)
    save_file(tensors, str(path), metadata=meta)
    message = verify_lora(path, str(flux.base), reference=flux.model).message
    assert ("2 layers merge to another weight than the trained model's (e.g. lora_unet_double_blocks_0_img_attn_qkv "
            "(transformer_blocks.0.attn.to_") in message, message
    assert "the merged model's outputs differ from the trained model" in message


def test_a_plain_sd_files_verify_is_unchanged(tmp_path):
    """The UNet families still go through diffusers' loader (the dispatch asks the family)."""
    from guitrainer.config import ModelConfig
    from guitrainer.engine.models.loading import load_base_model

    m = load_base_model(ModelConfig(base="demo"))
    lora.inject_unet_lora(m.denoiser, RANK, 8.0)
    with torch.no_grad():
        for p in lora.lora_parameters(m.denoiser):
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.1)
    path = tmp_path / "demo.safetensors"
    X.export_lora(path, m.denoiser, save_precision="fp32", alpha=8.0, family="demo")
    result = verify_lora(path, "demo")
    assert result.ok and result.message.startswith("diffusers reads this file"), result.message


# --------------------------------------------------------------------------- right after training


def _images(folder: Path) -> Path:
    folder.mkdir()
    for i in range(2):
        Image.new("RGB", (64, 64), (90 * i, 200 - 60 * i, 90)).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a photo of a red circle {i}")
    return folder


@pytest.mark.parametrize(("family", "fmt"), [("flux1", "kohya"), ("sd35", "kohya"), ("sd35", "diffusers")])
def test_a_file_the_trainer_wrote_verifies_right_after_training_and_from_the_file(request, tmp_path, family, fmt):
    torch.set_num_threads(1)
    case: Case = request.getfixturevalue({"flux1": "flux", "sd35": "sd35"}[family])
    cfg = demo_cfg(
        tmp_path / "out", model__base=str(case.base), model__family="auto", dataset__folders=[str(_images(tmp_path / "data"))],
        dataset__resolution=64, schedule__max_steps=2, schedule__batch_size=1, network__rank=RANK, network__alpha=8.0,
        network__target_modules="attention_ff_proj", network__train_text_encoder=True, optimizer__lr=1e-2,
        sampling__every_n_steps=0, precision__save="bf16", output__format=fmt,
    )
    trainer = Trainer(cfg)
    summary = trainer.run()
    assert summary.status == "finished", summary.message
    if fmt == "diffusers":  # the LoRA is a folder holding pytorch_lora_weights.safetensors, as diffusers writes it
        assert (Path(summary.lora_path) / "pytorch_lora_weights.safetensors").is_file()
    right_after = verify_lora(summary.lora_path, cfg, reference=trainer.session.model)
    assert right_after.ok and right_after.reference == "trained model", right_after.message
    assert right_after.save_precision == "bf16" and right_after.lora_effect > 0
    if fmt == "diffusers":
        assert "diffusers' load_lora_weights reads every module; its outputs match the trained model" in right_after.message
    from_file = verify_lora(summary.lora_path, cfg)
    assert from_file.ok and from_file.reference == "our loader", from_file.message
    assert from_file.keys_unused == ()
