"""Fit to card in a real window: the Flux.1 dev — 8 GB preset chosen in the tool bar, the meter's button clicked
with the real pointer, a card picked in the dialog's list, the changes read, Apply clicked; a screenshot of the
dialog in artifacts/screenshots/fit_dialog.png."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QDialog, QLabel, QPushButton, QTableWidget
from xinput import ModalAnswerer, choose_in_combo, click_discard, open_page, wait_for

from guitrainer.ui.model.vram_meter import VramMeter


def test_fit_to_card_for_sdxl_and_a_ram_limited_flux_with_the_real_pointer(main_window, xin, artifacts_dir):
    choose_in_combo(xin, main_window.findChild(QComboBox, "preset_combo"), "SDXL — 6 GB")
    open_page(main_window, xin, "Model & Precision")
    meter = main_window.findChild(VramMeter)
    wait_for(lambda: meter.breakdown is not None, 10, "the first VRAM estimate")
    xin.click(meter.fit_button)
    wait_for(lambda: meter.fit_dialog is not None and meter.fit_dialog.isVisible(), 10, "the Fit dialog")
    dialog: QDialog = meter.fit_dialog
    card = dialog.findChild(QComboBox, "fit_card")
    assert card.currentText() == "A card of 6 GB"  # no GPU here: the preset's card
    choose_in_combo(xin, card, "A card of 8 GB")
    summary = dialog.findChild(QLabel, "fit_summary")
    table = dialog.findChild(QTableWidget, "fit_changes")
    wait_for(lambda: summary.text().startswith("Fits 8.0 GB"), 10, lambda: f"the 8 GB answer ({summary.text()!r})")
    changes = {table.item(r, 0).text(): table.item(r, 2).text() for r in range(table.rowCount())}
    assert changes and all(table.item(r, 3).text() for r in range(table.rowCount())), changes  # each says why
    xin.click(dialog.findChild(QPushButton, "fit_apply"))
    wait_for(lambda: meter.fit_dialog is None, 10, "the dialog to close")
    assert main_window.binding.config.precision.base_weights == "auto"  # 8 GB has room without fp8

    # Flux.1 dev on this test's 32 GB computer: the card fits, the RAM does not; the settings are shown to plan with
    answerer = ModalAnswerer(xin, click_discard)  # "Load another preset?": the applied changes are discarded
    try:
        choose_in_combo(xin, main_window.findChild(QComboBox, "preset_combo"), "Flux.1 dev — 8 GB")
        wait_for(lambda: main_window.binding.config.model.family == "flux1", 10, "the Flux preset")
    finally:
        answerer.stop()
    assert [d.title for d in answerer.seen] == ["Load another preset?"]
    xin.activate(main_window)  # the question box closed: the window is the active one again, as a person's next click finds it
    xin.click(meter.fit_button)
    wait_for(lambda: meter.fit_dialog is not None and meter.fit_dialog.isVisible(), 10, "the Fit dialog")
    dialog = meter.fit_dialog
    card = dialog.findChild(QComboBox, "fit_card")
    assert card.currentText() == "A card of 8 GB"
    choose_in_combo(xin, card, "A card of 12 GB")  # at 8 GB the preset is the choice already: nothing to change
    summary = dialog.findChild(QLabel, "fit_summary")
    estimate = dialog.findChild(QLabel, "fit_estimate")
    wait_for(lambda: "12.0 GB exist" in summary.text(), 10, lambda: f"the RAM answer ({summary.text()!r})")
    assert "this computer has 32.0 GB" in summary.text(), summary.text()
    assert "least" not in estimate.text() and "system RAM" in estimate.text(), estimate.text()
    assert dialog.findChild(QTableWidget, "fit_changes").rowCount() > 0
    (artifacts_dir / "screenshots").mkdir(parents=True, exist_ok=True)
    dialog.grab().save(str(artifacts_dir / "screenshots" / "fit_dialog.png"))
    dialog.reject()
