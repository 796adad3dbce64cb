"""The Output page's Verify button on a Flux.1 file: clicked, it checks the file by ComfyUI's rules against the
Model page's base model (a tiny Flux folder) in the background and shows the verdict, naming the programs."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_flux
from PySide6.QtCore import Qt

from guitrainer.config import TrainingConfig
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.output.page import OutputPage

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def flux_folder(tmp_path_factory):
    return tiny_flux.save_diffusers(tiny_flux.build(seed=5), tmp_path_factory.mktemp("flux") / "flux")


def _flux_file(folder, path):
    """A kohya Flux file of a random LoRA on every block Linear and CLIP-L, as the trainer writes one."""
    from guitrainer.engine import export as X
    from guitrainer.engine.families.flux1 import FAMILY, network
    from guitrainer.engine.network import lora

    m = FAMILY.load_folder(folder)
    lora.inject_lora(m.denoiser, 4, 4.0, 0.0, network.TARGETS["attention_ff_proj"])
    lora.inject_text_encoder_lora(m.text_encoders[0], 4, 4.0, 0.0, network.CLIP_TARGETS)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora.lora_parameters(m.denoiser) + lora.lora_parameters(m.text_encoders[0]):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    X.export_lora(path, m.denoiser, [m.text_encoders[0]], save_precision="fp16", family="flux1",
                  metadata={"ss_network_dim": "4", "ss_network_alpha": "4"})
    return path


@pytest.fixture
def page(qtbot, tmp_path, flux_folder):
    cfg = TrainingConfig()
    cfg.output.folder = str(tmp_path / "out")
    cfg.model.base = str(flux_folder)
    cfg.model.family = "auto"  # what the Model page sets on Detect: read from the files
    p = OutputPage(ConfigBinding(cfg))
    qtbot.addWidget(p)
    p.resize(760, 1000)
    p.show()
    return p


def test_verify_button_checks_a_flux_file_by_comfyuis_rules(page, qtbot, tmp_path, flux_folder):
    torch.set_num_threads(1)
    path = _flux_file(flux_folder, tmp_path / "flux_style.safetensors")
    page.verify_path.setText(str(path))
    with qtbot.waitSignal(page.verified, timeout=240000) as sig:
        qtbot.mouseClick(page.verify_button, Qt.MouseButton.LeftButton)  # as the user clicks it
        assert not page.verify_button.isEnabled()
    result = sig.args[0]
    assert result.ok and result.reference == "our loader" and result.save_precision == "fp16", result.message
    shown = page.verify_result.text()
    assert "✔" in shown and "<b>flux_style.safetensors</b>" in shown
    assert "ComfyUI&#x27;s rules read every key" in shown  # the label shows escaped text
    assert "kohya sd-scripts reads it" in shown and "3072-wide" in shown
    assert page.verify_button.isEnabled()


def test_verify_button_shows_a_broken_flux_file_failing(page, qtbot, tmp_path, flux_folder):
    from safetensors.torch import save_file

    from guitrainer.engine.network.lora import read_lora

    torch.set_num_threads(1)
    path = _flux_file(flux_folder, tmp_path / "broken.safetensors")
    tensors, meta = read_lora(path)
    tensors = dict(tensors)
    tensors["lora_unet_double_blocks_1_txt_mod_lin.alpha"] = tensors["lora_unet_double_blocks_1_txt_mod_lin.alpha"] * 2
    save_file(tensors, str(path), metadata=meta)
    with qtbot.waitSignal(page.verified, timeout=240000) as sig:
        page.start_verify(str(path))
    assert not sig.args[0].ok
    shown = page.verify_result.text()
    assert "✘" in shown and "lora_unet_double_blocks_1_txt_mod_lin (alpha 8, rank 4)" in shown
