"""The Model page's VAE row (offscreen): it shows model.vae, says what the VAE is, blocks Train on a broken one,
and the SDXL fp16 advice's "Use suggested" fills it in."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import fake_device
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QLineEdit
from safetensors.numpy import save_file

from guitrainer.core.memory import estimate
from guitrainer.ui.binding import ConfigBinding, bound_editors
from guitrainer.ui.model.page import ModelPage

FIX_REPO_DIR = "models--madebyollin--sdxl-vae-fp16-fix"


def vae_folder(folder: Path, *, force_upcast: bool) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "_class_name": "AutoencoderKL", "latent_channels": 4, "down_block_types": ["DownEncoderBlock2D"] * 4,
        "force_upcast": force_upcast,
    }))
    save_file({"decoder.conv_in.weight": np.zeros((8, 4, 3, 3), np.float16)},
              str(folder / "diffusion_pytorch_model.safetensors"))
    return folder


@pytest.fixture
def hub_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "hf_home"
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def _page(qtbot, tmp_path, binding: ConfigBinding) -> ModelPage:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    page = ModelPage(binding, settings=settings, probe=lambda: fake_device("t4"), auto_probe=False)
    qtbot.addWidget(page)
    page.resize(1000, 1150)
    return page


def _sdxl_fp16() -> ConfigBinding:
    binding = ConfigBinding()
    for path, value in (("model.family", "sdxl"), ("precision.training", "fp16"), ("dataset.resolution", 1024),
                        ("precision.cache_latents", False)):
        binding.set(path, value)
    return binding


def test_the_model_page_shows_the_vae_setting_and_what_it_is(qtbot, tmp_path, hub_home):
    binding = ConfigBinding()
    page = _page(qtbot, tmp_path, binding)
    page.show()
    edit = bound_editors(page)["model.vae"]
    assert isinstance(edit, QLineEdit) and edit.isVisible() and edit.text() == ""
    assert "madebyollin/sdxl-vae-fp16-fix" in edit.toolTip()
    assert any(lab.text() == "VAE" and lab.buddy() is edit for lab in page.findChildren(QLabel))
    status = page.vae_picker.status
    assert status.text() == "The base model's own VAE."
    fixed = vae_folder(tmp_path / "my_vae", force_upcast=False)
    qtbot.keyClicks(edit, str(fixed))  # typed, as a person would
    assert binding.get("model.vae") == str(fixed) and "fp16-safe" in status.text()


def test_a_vae_that_cannot_be_used_blocks_train_until_cleared(qtbot, tmp_path, hub_home):
    binding = ConfigBinding()
    page = _page(qtbot, tmp_path, binding)
    assert not page.has_errors()
    with qtbot.waitSignal(page.errors_changed) as blocker:
        binding.set("model.vae", str(tmp_path / "nowhere"))
    assert blocker.args == [True] and "was not found" in page.error_text()
    assert "was not found" in page.vae_picker.status.text()
    with qtbot.waitSignal(page.errors_changed) as blocker:  # still wrong, another message: told again
        binding.set("model.vae", str(tmp_path / "elsewhere"))
    assert blocker.args == [True] and "elsewhere" in page.error_text() and "nowhere" not in page.error_text()
    with qtbot.waitSignal(page.errors_changed) as blocker:
        qtbot.mouseClick(page.vae_picker.clear_button, Qt.MouseButton.LeftButton)
    assert blocker.args == [False] and binding.get("model.vae") == ""


def test_the_folder_button_sets_the_chosen_folder(qtbot, tmp_path, hub_home, monkeypatch):
    fixed = vae_folder(tmp_path / "picked", force_upcast=False)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(fixed))
    binding = ConfigBinding()
    page = _page(qtbot, tmp_path, binding)
    qtbot.mouseClick(page.vae_picker.folder_button, Qt.MouseButton.LeftButton)
    assert binding.get("model.vae") == str(fixed) and bound_editors(page)["model.vae"].text() == str(fixed)


def test_use_suggested_on_the_sdxl_vae_advice_fills_in_the_fixed_vae(qtbot, tmp_path, hub_home):
    repo = hub_home / "hub" / FIX_REPO_DIR
    vae_folder(repo / "snapshots" / "0123abcd", force_upcast=False)
    binding = _sdxl_fp16()
    page = _page(qtbot, tmp_path, binding)
    page.show()
    page.precision_picker.set_device(fake_device("t4"))
    before = estimate.estimate(binding.config)
    (row,) = [r for r in page.precision_picker.advice_rows() if r.advice.code == "sdxl_vae_fp32"]
    assert row.button is not None and row.button.text() == "Use suggested"
    qtbot.mouseClick(row.button, Qt.MouseButton.LeftButton)
    fix = "madebyollin/sdxl-vae-fp16-fix"  # its hub id: loaded from the cache
    assert binding.get("model.vae") == fix
    assert bound_editors(page)["model.vae"].text() == fix and "fp16-safe" in page.vae_picker.status.text()
    codes = [r.advice.code for r in page.precision_picker.advice_rows()]
    assert "sdxl_vae_fp16_safe" in codes and "sdxl_vae_fp32" not in codes
    after = estimate.estimate(binding.config)
    assert after.part("vae").label == "VAE (fp16)" and after.total < before.total


def test_without_the_fixed_vae_the_advice_offers_the_download_command(qtbot, tmp_path, hub_home):
    page = _page(qtbot, tmp_path, _sdxl_fp16())
    page.precision_picker.set_device(fake_device("t4"))
    (row,) = [r for r in page.precision_picker.advice_rows() if r.advice.code == "sdxl_vae_fp32"]
    assert row.button is not None and row.button.text() == "Copy command"
    row.set_expanded(True)  # a long note shows its first sentence until "More…"
    assert "hf download madebyollin/sdxl-vae-fp16-fix" in row.label.text()
