"""model.vae without torch: what a folder or file holds, validation messages, the estimator's VAE part, the
SDXL fp16 advice and its one-click fix, resume warnings (core only; fast)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import config_with, fake_device
from safetensors.numpy import save_file

from guitrainer.base import units
from guitrainer.core.checks.inputs import check_inputs
from guitrainer.core.checks.start import check_start
from guitrainer.core.memory import estimate, specs
from guitrainer.core.model import vae_choice
from guitrainer.core.precision.advisor import advise
from guitrainer.core.runs import state as run_state

SDXL_VAE_CONFIG = {
    "_class_name": "AutoencoderKL",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "latent_channels": 4,
    "scaling_factor": 0.13025,
}


def vae_folder(folder: Path, *, force_upcast: bool | None, latent_channels: int = 4, weights: bool = True,
               scaling_factor: float = 0.13025) -> Path:
    """A diffusers VAE folder on paper: its config.json and a (tiny, fake) weights file."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict(SDXL_VAE_CONFIG, latent_channels=latent_channels, scaling_factor=scaling_factor)
    if force_upcast is not None:
        cfg["force_upcast"] = force_upcast
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    if weights:
        save_file({"decoder.conv_in.weight": np.zeros((8, latent_channels, 3, 3), np.float16)},
                  str(folder / vae_choice.VAE_WEIGHTS))
    return folder


def vae_file(path: Path, latent_channels: int = 4, prefix: str = "") -> Path:
    """A single-file VAE's tensor table (ldm layout), zeros."""
    save_file({
        f"{prefix}encoder.conv_in.weight": np.zeros((8, 3, 3, 3), np.float16),
        f"{prefix}encoder.down.0.block.0.conv1.weight": np.zeros((8, 8, 3, 3), np.float16),
        f"{prefix}decoder.conv_in.weight": np.zeros((8, latent_channels, 3, 3), np.float16),
    }, str(path))
    return path


@pytest.fixture
def hub_home(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face home of this test's own (HF_HOME; HF_HUB_CACHE unset)."""
    home = tmp_path / "hf_home"
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def hub_snapshot(home: Path, repo_id: str, *, force_upcast: bool | None) -> Path:
    """A downloaded snapshot in the hub cache's own layout: models--owner--name/snapshots/<commit>/ + refs/main."""
    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    return vae_folder(repo / "snapshots" / "abc123", force_upcast=force_upcast)


def sdxl_fp16(**sets: object):
    """SDXL, fp16 AMP, 1024 px, latents not cached (the VAE encodes every step); ``sets`` override any of it."""
    settings: dict[str, object] = dict(precision__training="fp16", model__family="sdxl", dataset__resolution=1024,
                                       precision__cache_latents=False, precision__gradient_checkpointing=True)
    return config_with(**{**settings, **sets})


# --------------------------------------------------------------------------- what a value names


def test_a_folder_says_whether_it_runs_in_fp16_from_its_own_config(tmp_path):
    fixed = vae_folder(tmp_path / "whatever_name", force_upcast=False)
    original = vae_folder(tmp_path / "sdxl-vae-fp16-fix", force_upcast=True)  # the name says fixed; config does not
    silent = vae_folder(tmp_path / "no_flag", force_upcast=None)  # diffusers' default: upcast
    assert vae_choice.describe_vae(str(fixed)).fp16_safe
    assert not vae_choice.describe_vae(str(original)).fp16_safe
    assert not vae_choice.describe_vae(str(silent)).fp16_safe
    assert vae_choice.describe_vae("").kind == "base"


def test_a_full_model_folder_is_read_through_its_vae_subfolder(tmp_path):
    vae_folder(tmp_path / "model" / "vae", force_upcast=False)
    facts = vae_choice.describe_vae(str(tmp_path / "model"))
    assert facts.path == str(tmp_path / "model" / "vae") and facts.fp16_safe and not facts.problem


def test_a_single_file_has_its_latent_channels_from_its_header(tmp_path):
    facts = vae_choice.describe_vae(str(vae_file(tmp_path / "vae.safetensors", latent_channels=16)))
    assert facts.kind == "file" and facts.latent_channels == 16 and facts.force_upcast is None
    cut_out = vae_choice.describe_vae(str(vae_file(tmp_path / "cut.safetensors", prefix="first_stage_model.")))
    assert cut_out.latent_channels == 4 and not cut_out.problem


# --------------------------------------------------------------------------- validation


def test_a_missing_vae_blocks_start_and_check_naming_it(tmp_path):
    cfg = config_with(model__vae=str(tmp_path / "nowhere"))
    start = check_start(cfg, fake_device("t4"))
    assert any("nowhere" in e and "was not found" in e and "clear the setting" in e for e in start.errors)
    report = check_inputs(cfg, captions=False)
    assert any(e.startswith("model.vae:") and "nowhere" in e for e in report.errors)


def test_a_folder_without_a_vae_config_is_named_with_what_it_should_hold(tmp_path):
    (tmp_path / "empty").mkdir()
    problem = vae_choice.vae_problem(config_with(model__vae=str(tmp_path / "empty")))
    assert "holds no VAE config.json" in problem and "diffusion_pytorch_model.safetensors" in problem


def test_a_config_without_weights_is_an_incomplete_download(tmp_path):
    folder = vae_folder(tmp_path / "half", force_upcast=False, weights=False)
    assert "incomplete download" in vae_choice.vae_problem(config_with(model__vae=str(folder)))


def test_a_whole_checkpoint_is_not_a_vae(tmp_path):
    ckpt = tmp_path / "sdxl.safetensors"
    save_file({"model.diffusion_model.input_blocks.0.0.weight": np.zeros((4, 4, 3, 3), np.float16)}, str(ckpt))
    assert "whole model checkpoint" in vae_choice.vae_problem(config_with(model__vae=str(ckpt)))
    other = tmp_path / "lora.safetensors"
    save_file({"lora_unet_x.lora_down.weight": np.zeros((4, 8), np.float16)}, str(other))
    assert "is not a VAE" in vae_choice.vae_problem(config_with(model__vae=str(other)))


def test_latent_channels_must_match_the_unet_an_sd15_vae_on_sdxl_is_warned_about(tmp_path):
    """A 16-channel VAE (SD3 / Flux kind) cannot feed a 4-channel UNet; an SD 1.5 VAE has SDXL's shapes, so it
    runs, but its latents have another scale (0.18215 against SDXL's 0.13025): a warning, not a refusal."""
    sixteen = vae_folder(tmp_path / "flux_vae", force_upcast=False, latent_channels=16)
    problem = vae_choice.vae_problem(config_with(model__family="sdxl", model__vae=str(sixteen)))
    assert "16-channel latents" in problem and "takes 4" in problem
    sd15 = vae_folder(tmp_path / "sd15_vae", force_upcast=None, scaling_factor=0.18215)
    cfg = config_with(model__family="sdxl", model__vae=str(sd15))
    assert vae_choice.vae_problem(cfg) == ""
    warning = vae_choice.vae_warning(cfg)
    assert "0.18215 (SD 1.5's)" in warning and "0.13025" in warning and "Choose a VAE made for this base" in warning
    assert vae_choice.vae_summary(cfg)[0] == "warning"
    check = check_start(cfg, fake_device())
    assert any("0.18215" in n for n in check.notes) and not any("0.18215" in e for e in check.errors)
    same = vae_folder(tmp_path / "sdxl_vae", force_upcast=False)
    assert vae_choice.vae_warning(config_with(model__family="sdxl", model__vae=str(same))) == ""


def test_the_config_refuses_a_pickle_vae_by_its_value():
    errors = config_with(model__vae="/models/vae.ckpt").errors()
    assert [e.field for e in errors] == ["model.vae"] and ".safetensors version" in errors[0].message
    assert config_with(model__vae="").errors() == []


# --------------------------------------------------------------------------- the estimator


def test_the_estimators_vae_part_drops_for_sdxl_fp16_with_an_fp16_safe_vae(tmp_path):
    spec = specs.spec_of("sdxl")
    original = estimate.estimate(sdxl_fp16())
    fixed_cfg = sdxl_fp16(model__vae=str(vae_folder(tmp_path / "fix", force_upcast=False)))
    fixed = estimate.estimate(fixed_cfg)
    # the weights: 4 bytes a parameter in fp32, 2 in fp16 (each rounded up to 512-byte blocks)
    assert original.part("vae").label == "VAE (fp32)" and fixed.part("vae").label == "VAE (fp16)"
    assert abs((original.get("vae") - fixed.get("vae")) - 2 * spec.vae) <= 1024
    # the encoder's activations at 1024 px halve too: the whole run needs more than the weights' saving less
    assert original.total - fixed.total > 2 * spec.vae
    assert estimate.sdxl_vae_fp32_cost(fixed_cfg) == 0 and estimate.sdxl_vae_fp32_cost(sdxl_fp16()) == original.total - fixed.total


def test_the_vae_part_stays_where_fp16_safety_does_not_apply(tmp_path):
    fix = str(vae_folder(tmp_path / "fix", force_upcast=False))
    upcast = str(vae_folder(tmp_path / "orig", force_upcast=True))
    assert estimate.estimate(sdxl_fp16(model__vae=upcast)).get("vae") == estimate.estimate(sdxl_fp16()).get("vae")
    # bf16 and SD 1.5 never kept the VAE in fp32: another VAE changes nothing there
    for cfg in (dict(precision__training="bf16"), dict(model__family="sd15")):
        with_fix = estimate.estimate(sdxl_fp16(model__vae=fix, **cfg))
        assert with_fix.get("vae") == estimate.estimate(sdxl_fp16(**cfg)).get("vae")


def test_a_base_folder_whose_own_vae_is_fp16_safe_counts_as_such(tmp_path):
    base = tmp_path / "sdxl_finetune"
    vae_folder(base / "vae", force_upcast=False)
    assert estimate.estimate(sdxl_fp16(model__base=str(base))).part("vae").label == "VAE (fp16)"


# --------------------------------------------------------------------------- the advice and its fix


def _vae_advice(cfg):
    return [a for a in advise(fake_device("t4"), cfg) if a.topic == "model.vae"]


def test_the_advice_offers_the_fixed_vae_found_in_the_hub_cache_and_its_fix_sets_model_vae(hub_home):
    hub_snapshot(hub_home, vae_choice.FP16_FIX_REPO, force_upcast=False)
    cfg = sdxl_fp16()
    (a,) = _vae_advice(cfg)
    # named by its hub id: read from the cache offline, and still right after a new snapshot or a cache clean-up
    assert a.code == "sdxl_vae_fp32" and a.suggestion == {"model.vae": vae_choice.FP16_FIX_REPO}
    assert units.format_bytes(estimate.sdxl_vae_fp32_cost(cfg)) in a.message
    for path, value in a.suggestion.items():  # what "Use suggested" does
        cfg.set(path, value)
    (after,) = _vae_advice(cfg)
    assert after.code == "sdxl_vae_fp16_safe" and not after.suggestion and "no extra memory" in after.message
    assert estimate.sdxl_vae_fp32_cost(cfg) == 0


def test_the_fixed_vaes_hub_id_counts_as_fp16_safe_before_it_is_downloaded(hub_home):
    """Its published config says force_upcast = false: the estimate and the advice agree with what the engine
    will do once it has downloaded it, and say it is downloaded at the start."""
    cfg = sdxl_fp16(model__vae=vae_choice.FP16_FIX_REPO)
    assert vae_choice.vae_fp16_safe(cfg) and estimate.sdxl_vae_fp32_cost(cfg) == 0
    (a,) = _vae_advice(cfg)
    assert a.code == "sdxl_vae_fp16_safe" and "downloaded when training starts" in a.message
    assert "Downloaded when training starts" in vae_choice.vae_summary(cfg)[1]
    assert not vae_choice.vae_fp16_safe(sdxl_fp16(model__vae="someone/other-vae"))  # unknown until downloaded


def test_looking_for_the_fixed_vae_is_cached_until_the_folders_change(hub_home, tmp_path, monkeypatch):
    models = tmp_path / "models"
    base = models / "sdxl.safetensors"
    models.mkdir()
    base.write_bytes(b"not read")
    for i in range(5):
        vae_folder(models / f"vae_{i}", force_upcast=True)
    cfg = sdxl_fp16(model__base=str(base))
    looked: list[Path] = []
    real = vae_choice._fp16_safe_folder
    monkeypatch.setattr(vae_choice, "_fp16_safe_folder", lambda f: looked.append(f) or real(f))
    assert vae_choice.find_fp16_safe_vae(cfg) is None
    first = len(looked)
    assert first >= 5
    for _ in range(10):  # what each settings change asks again
        assert vae_choice.find_fp16_safe_vae(cfg) is None
    assert len(looked) == first
    fix = vae_folder(models / "new_fix", force_upcast=False)  # a new folder changes the parent's mtime
    assert vae_choice.find_fp16_safe_vae(cfg) == str(fix)


def test_a_snapshot_whose_config_still_upcasts_is_not_offered(hub_home):
    hub_snapshot(hub_home, vae_choice.FP16_FIX_REPO, force_upcast=True)
    (a,) = _vae_advice(sdxl_fp16())
    assert a.suggestion == {}


def test_a_fixed_vae_beside_the_base_model_is_offered(hub_home, tmp_path):
    models = tmp_path / "models"
    base = models / "sdxl.safetensors"
    models.mkdir()
    base.write_bytes(b"not read")
    vae_folder(models / "other_model_vae", force_upcast=True)
    fix = vae_folder(models / "zz_my_vae", force_upcast=False)
    (a,) = _vae_advice(sdxl_fp16(model__base=str(base)))
    assert a.suggestion == {"model.vae": str(fix)}


def test_without_the_fixed_vae_the_advice_says_what_to_download(hub_home):
    (a,) = _vae_advice(sdxl_fp16())
    assert a.suggestion == {} and a.suggestion_text == vae_choice.FP16_FIX_DOWNLOAD
    assert "madebyollin/sdxl-vae-fp16-fix" in a.suggestion_text and "next to the base model" in a.message


def test_no_vae_advice_outside_sdxl_fp16(hub_home):
    assert _vae_advice(sdxl_fp16(precision__training="bf16")) == []
    assert _vae_advice(sdxl_fp16(model__family="sd15")) == []


# --------------------------------------------------------------------------- resume


def test_another_vae_warns_on_resume_but_does_not_block(tmp_path):
    saved = config_with(model__vae="")
    now = config_with(model__vae="/models/sdxl-vae-fp16-fix")
    info = {"config": saved.to_dict()}
    assert run_state.resume_mismatches(info, now) == []
    assert run_state.resume_differences(info, now) == [("model.vae", "", "/models/sdxl-vae-fp16-fix")]
    assert run_state.resume_differences(info, saved) == []
    assert run_state.shown_value("model.vae", "") == "the base model's own VAE"
    spelled = config_with(model__vae="/models/sdxl-vae-fp16-fix/")
    assert run_state.resume_differences({"config": now.to_dict()}, spelled) == []  # the same folder
    assert run_state.resume_differences({"config": now.to_dict()}, config_with(model__vae="/models/other")) != []


def test_a_file_that_is_not_safetensors_is_named_in_plain_words_with_a_way_out(tmp_path):
    fake = tmp_path / "fake.safetensors"
    fake.write_text("just some text that was renamed\n" * 40)
    level, text = vae_choice.vae_summary(config_with(model__vae=str(fake)))
    assert level == "error" and "fake.safetensors" in text and "another kind of file renamed" in text
    assert "clear the setting" in text and ".." not in text and "bytes" not in text


def test_a_vae_that_makes_latents_of_another_size_is_refused(tmp_path):
    """SD / SDXL VAEs have 4 encoder blocks: 3 halvings, one latent per 8x8 pixels; a 1-block VAE makes one per
    pixel, so the UNet would train on 64x more latents (75x slower steps in a tester's run)."""
    one_block = vae_folder(tmp_path / "tiny_vae", force_upcast=False)
    cfg_json = json.loads((one_block / "config.json").read_text())
    cfg_json["block_out_channels"] = [32]
    (one_block / "config.json").write_text(json.dumps(cfg_json))
    problem = vae_choice.vae_problem(config_with(model__family="sdxl", model__vae=str(one_block)))
    assert "one latent per 1x1 pixels" in problem and "one per 8x8" in problem
    four = vae_folder(tmp_path / "sdxl_vae", force_upcast=False)
    assert vae_choice.vae_problem(config_with(model__family="sdxl", model__vae=str(four))) == ""
