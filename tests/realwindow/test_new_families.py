"""Issue 32's presets in a real window: "Z-Image — 12 GB", "Chroma1-HD — 16 GB" and "Qwen-Image — 24 GB" chosen in
the tool bar with the real pointer; the Model & Precision page shows each family, the VRAM meter's estimate fits the
preset's card and says so; for Z-Image, Fit to card on an 8 GB card changes settings (each with its reason) and
Apply makes it fit; Qwen-Image's three split files dragged from another application onto the base model field go
where their tensors say (its 3-D VAE to VAE). Screenshots in artifacts/screenshots/new_families_<family>.png."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QTableWidget
from test_new_user import drag_from_another_app
from xinput import ModalAnswerer, choose_in_combo, click_discard, open_page, wait_for

from guitrainer.base.units import GiB
from guitrainer.ui.model.vram_meter import VramMeter


def _choose_preset(main_window, xin, name: str, family: str) -> None:
    answerer = ModalAnswerer(xin, click_discard)  # "Load another preset?" after the first one
    try:
        choose_in_combo(xin, main_window.findChild(QComboBox, "preset_combo"), name)
        wait_for(lambda: main_window.binding.config.model.family == family, 10, f"the {name} preset")
    finally:
        answerer.stop()
    xin.activate(main_window)


def test_the_new_families_presets_fit_their_cards_with_the_real_pointer(main_window, xin, artifacts_dir):
    shots = artifacts_dir / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    presets = (("Z-Image — 12 GB", "zimage", 12), ("Chroma1-HD — 16 GB", "chroma", 16), ("Qwen-Image — 24 GB", "qwenimage", 24))
    for name, family, card in presets:
        _choose_preset(main_window, xin, name, family)
        open_page(main_window, xin, "Model & Precision")
        meter = main_window.findChild(VramMeter)
        wait_for(lambda m=meter, f=family: m.breakdown is not None and m.breakdown.family == f, 20, f"the {family} estimate")
        assert meter.breakdown.total <= card * GiB, [(p.key, p.bytes) for p in meter.breakdown.parts]
        assert meter.level != "over", meter.total_label.text()
        main_window.grab().save(str(shots / f"new_families_{family}.png"))

    # Z-Image on an 8 GB card: Fit to card finds settings that fit and says why each changes
    _choose_preset(main_window, xin, "Z-Image — 12 GB", "zimage")
    open_page(main_window, xin, "Model & Precision")
    meter = main_window.findChild(VramMeter)
    wait_for(lambda: meter.breakdown is not None and meter.breakdown.family == "zimage", 20, "the Z-Image estimate")
    xin.click(meter.fit_button)
    wait_for(lambda: meter.fit_dialog is not None and meter.fit_dialog.isVisible(), 10, "the Fit dialog")
    dialog = meter.fit_dialog
    choose_in_combo(xin, dialog.findChild(QComboBox, "fit_card"), "A card of 8 GB")
    summary = dialog.findChild(QLabel, "fit_summary")
    wait_for(lambda: summary.text().startswith("Fits 8.0 GB"), 20, lambda: f"the 8 GB answer ({summary.text()!r})")
    table = dialog.findChild(QTableWidget, "fit_changes")
    assert table.rowCount() > 0 and all(table.item(r, 3).text() for r in range(table.rowCount()))
    dialog.grab().save(str(shots / "new_families_fit_zimage_8gb.png"))
    xin.click(dialog.findChild(QPushButton, "fit_apply"))
    wait_for(lambda: meter.fit_dialog is None, 10, "the dialog to close")
    wait_for(lambda: meter.breakdown is not None and meter.breakdown.total <= 8 * GiB, 20,
             lambda: f"the estimate after Fit ({meter.breakdown.total / GiB if meter.breakdown else None:.2f} GiB)")


def test_qwen_images_split_files_dragged_from_another_app_make_one_model(main_window, xin, artifacts_dir, tmp_path):
    from helpers import tiny_qwenimage

    files = tiny_qwenimage.save_split(tiny_qwenimage.build(seed=0), tmp_path / "qwen")
    open_page(main_window, xin, "Model & Precision")
    page = main_window.model_page
    out = drag_from_another_app(xin, page.model_picker.edit, [files["vae"], files["qwen25vl"], files["transformer"]])
    assert "DROPPED" in out, out
    binding = page.binding
    wait_for(lambda: binding.get("model.family") == "qwenimage", 10, lambda: f"the family ({binding.get('model.family')})")
    assert binding.get("model.base") == str(files["transformer"])
    assert binding.get("model.text_encoders") == [str(files["qwen25vl"])] and binding.get("model.vae") == str(files["vae"])
    wait_for(lambda: not page.has_errors(), 10, lambda: page.error_text())
    assert page.text_encoders.isVisible() and "qwen_2.5_vl" in page.text_encoders.files_label.text()
    shots = artifacts_dir / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    main_window.grab().save(str(shots / "new_families_qwenimage_split.png"))
