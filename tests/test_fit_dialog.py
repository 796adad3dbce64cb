"""Fit to this card in the app (offscreen): the meter's button opens the dialog for this computer's GPU, a card
size is picked with the keyboard, the diff of settings is shown, and Apply makes the run fit by the estimator."""

from __future__ import annotations

import pytest
from helpers import fake_device
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from guitrainer.base.units import GiB, format_bytes
from guitrainer.config import TrainingConfig
from guitrainer.core.memory import system_ram
from guitrainer.core.memory.estimate import estimate
from guitrainer.core.memory.fit import Card
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.model.fit_dialog import THIS_CARD
from guitrainer.ui.model.vram_meter import VramMeter


@pytest.fixture
def meter(qtbot, monkeypatch):
    # the dialog weighs the RAM of the computer it runs on: a fixed 128 GB, so no test depends on this machine's
    monkeypatch.setattr(system_ram, "machine_ram", lambda: 128 * GiB)
    cfg = TrainingConfig()
    cfg.set("model.family", "sdxl")
    cfg.set("model.base", "stabilityai/stable-diffusion-xl-base-1.0")
    cfg.set("dataset.resolution", 1024)
    cfg.set("precision.training", "bf16")
    binding = ConfigBinding(cfg)
    meter = VramMeter(binding)
    qtbot.addWidget(meter)
    device = fake_device("rtx4090")
    meter.set_device(device.gpu.total_memory, device.name, device)
    meter.show()
    return meter


def _open(qtbot, meter):
    QTest.mouseClick(meter.fit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: meter.fit_dialog is not None and meter.fit_dialog.isVisible(), timeout=3000)
    return meter.fit_dialog


def test_fit_to_a_smaller_card_picked_with_the_keyboard_and_applied(qtbot, meter):
    dialog = _open(qtbot, meter)
    assert dialog.card.currentData() == THIS_CARD  # this computer's GPU first
    assert "4090" in dialog.card.currentText()
    dialog.card.setFocus()
    while dialog.card.currentData() != 8 * GiB:  # down the list to "A 8 GB card", as a user would
        QTest.keyClick(dialog.card, Qt.Key.Key_Down)
    assert dialog.result is not None and dialog.result.fits
    rows = [dialog.table.item(r, 0).text() for r in range(dialog.table.rowCount())]
    assert rows and "Gradient checkpointing" in rows
    assert "→" in dialog.estimate_label.text()
    before = meter.binding.config.copy()
    QTest.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: meter.fit_dialog is None, timeout=3000)
    after = meter.binding.config
    assert after != before
    assert estimate(after, device=Card(8 * GiB)).total <= 8 * GiB
    assert after.precision.gradient_checkpointing


def test_a_run_that_fits_has_nothing_to_apply_and_cancel_changes_nothing(qtbot, meter):
    meter.binding.set("precision.gradient_checkpointing", True)
    meter.binding.set("precision.cache_latents", True)
    dialog = _open(qtbot, meter)
    dialog.card.setCurrentIndex(dialog.card.findData(80 * GiB))
    assert dialog.result.fits
    before = meter.binding.config.copy()
    if not dialog.result.best.changes:
        assert not dialog.apply_button.isEnabled() and dialog.summary.text().startswith("Already fits")
    QTest.keyClick(dialog, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: meter.fit_dialog is None, timeout=3000)
    assert meter.binding.config == before


def test_nothing_fits_a_tiny_card_says_so(qtbot, meter):
    dialog = _open(qtbot, meter)
    dialog.card.setCurrentIndex(dialog.card.findData(4 * GiB))
    meter.binding.set("model.family", "flux1")
    meter.binding.set("model.base", "black-forest-labs/FLUX.1-dev")
    meter.binding.set("network.rank", 1024)  # Fit never changes the rank: ~1.6 B LoRA parameters with AdamW's state
    dialog.refresh()
    assert not dialog.result.fits
    assert dialog.summary.text().startswith("Nothing fits") and not dialog.apply_button.isEnabled()
    assert "least" in dialog.estimate_label.text()


def test_a_choice_that_needs_more_ram_than_the_computer_has_says_so(qtbot, meter, monkeypatch):
    """Flux.1 dev fits an 8 GB card (nf4, or blocks kept in RAM), but loading it (49 GB in bf16 from the hub) and the
    pinned blocks need far more RAM than 16 GB: the dialog says so with the way out, and still shows the settings
    to plan with (for another computer): the table lists them, the estimate line gives both figures, Apply works."""
    monkeypatch.setattr(system_ram, "machine_ram", lambda: 16 * GiB)
    dialog = _open(qtbot, meter)
    dialog.card.setCurrentIndex(dialog.card.findData(8 * GiB))
    meter.binding.set("model.family", "flux1")
    meter.binding.set("model.base", "black-forest-labs/FLUX.1-dev")
    dialog.refresh()
    assert not dialog.result.fits and dialog.result.ram_limited is not None
    text = dialog.summary.text()
    assert text.startswith("Settings that fit 8.0 GB exist") and "this computer has 16.0 GB" in text, text
    assert "no memory saver lowers that enough" in text and "diffusers folder" not in text
    option, need, _have = dialog.result.ram_limited
    assert dialog.table.rowCount() == len(option.changes) > 0
    assert f"system RAM {format_bytes(need)}, this computer 16.0 GB" in dialog.estimate_label.text()
    assert "least" not in dialog.estimate_label.text()  # nothing here is "over" the card
    assert dialog.apply_button.isEnabled()


def test_without_a_gpu_the_dialog_starts_from_the_presets_card(qtbot):
    """Found by a new user: the dialog always opened on "A card of 12 GB", also for an 8 GB preset on a computer
    without a GPU; it starts from the card the preset is made for."""
    cfg = TrainingConfig()
    cfg.set("model.family", "sdxl")
    cfg.set("model.base", "stabilityai/stable-diffusion-xl-base-1.0")
    meter = VramMeter(ConfigBinding(cfg))
    qtbot.addWidget(meter)
    meter.set_device(None, "CPU")
    meter.set_target("SDXL — 6 GB")
    meter.show()
    dialog = _open(qtbot, meter)
    assert dialog.card.currentData() == 6 * GiB, dialog.card.currentText()
