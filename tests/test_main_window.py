"""The app shell: opens offscreen, every page bound to the config, presets fill widgets."""

from __future__ import annotations

import pytest
from helpers import fake_device
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QLineEdit, QPlainTextEdit, QSpinBox

from guitrainer.config.presets import DEMO_PRESET, PresetStore
from guitrainer.ui.binding import bound_editors
from guitrainer.ui.window.main_window import MainWindow


def _poke(editor, value):
    if isinstance(editor, QSpinBox | QDoubleSpinBox):
        editor.setValue(value)
    elif isinstance(editor, QCheckBox):
        editor.setChecked(value)
    elif isinstance(editor, QComboBox):
        editor.setCurrentIndex(editor.findData(value))
    elif isinstance(editor, QLineEdit):
        editor.setText(value)
        editor.editingFinished.emit()
    elif isinstance(editor, QPlainTextEdit):
        editor.setPlainText(value)


def test_every_page_has_bound_widgets(window):
    """Each page shows its part of the config as real widgets bound to config fields."""
    wanted = {
        window.dataset_page: ["dataset.resolution", "dataset.caption_extension"],
        window.model_page: ["model.base", "precision.gradient_checkpointing"],
        window.training_page: ["network.rank", "optimizer.lr", "schedule.batch_size"],
        window.output_page: ["output.folder", "output.name"],
    }
    for page, fields in wanted.items():
        editors = bound_editors(page)
        for f in fields:
            assert f in editors, f"{type(page).__name__} lacks {f}"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("network.rank", 48),
        ("optimizer.lr", 0.0002),
        ("schedule.batch_size", 3),
        ("precision.gradient_checkpointing", True),
        ("output.name", "my_new_lora"),
        ("dataset.resolution", 768),
    ],
)
def test_widget_change_updates_config(window, path, value):
    editor = bound_editors(window)[path]
    _poke(editor, value)
    assert window.binding.get(path) == pytest.approx(value) if isinstance(value, float) else window.binding.get(path) == value
    assert "•" in window.windowTitle()


def test_loading_a_preset_updates_widgets(window):
    editors = bound_editors(window)
    window.load_preset("SDXL quality — 24 GB")
    assert editors["network.rank"].value() == 64
    assert editors["schedule.batch_size"].value() == 4
    assert editors["model.base"].text() == "stabilityai/stable-diffusion-xl-base-1.0"
    window.load_preset(DEMO_PRESET)
    assert editors["network.rank"].value() == 16
    assert window.binding.config.precision.gradient_checkpointing is False  # not in the demo file: not SDXL's True
    assert "•" not in window.windowTitle()


def test_preset_combo_loads_and_save_as_roundtrip(window, qtbot, monkeypatch):
    combo = window.preset_combo
    idx = combo.findData("SD 1.5 style — 8 GB")
    combo.setCurrentIndex(idx)
    combo.activated.emit(idx)
    assert window.binding.config.network.rank == 32
    window.binding.set("network.rank", 24)
    from PySide6.QtWidgets import QInputDialog

    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("Mine", True)))
    window.preset_files.save_preset_as()
    assert window.current_preset == "Mine"
    assert combo.findData("Mine") >= 0
    window.load_preset("SD 1.5 style — 8 GB")
    window.load_preset("Mine")
    assert window.binding.config.network.rank == 24


def test_deleting_a_preset_asks_first(window, monkeypatch):
    """File > Delete preset asks through the message helper (patched here: the box is the helper's business)."""
    from PySide6.QtWidgets import QInputDialog

    from guitrainer.ui.widgets import messages

    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("Mine", True)))
    window.preset_files.save_preset_as()
    asked: list[str] = []
    monkeypatch.setattr(messages, "question", lambda _parent, _title, text, *a, **k: asked.append(text) or "no")
    window.preset_files.delete_preset()
    assert "Mine" in window.store.presets and window.current_preset == "Mine"
    assert asked == ["Delete your preset “Mine”?"]
    monkeypatch.setattr(messages, "question", lambda *a, **k: "yes")
    window.preset_files.delete_preset()
    assert "Mine" not in window.store.presets and window.current_preset == ""
    assert window.preset_combo.findData("Mine") == -1


def test_last_preset_and_geometry_remembered(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    store = PresetStore(user_dir=tmp_path / "p")
    w = MainWindow(store=store, settings=settings)
    qtbot.addWidget(w)
    w.load_preset("SD 1.5 character — 6 GB")
    w.resize(1000, 700)
    w.close()
    w2 = MainWindow(store=store, settings=settings)
    qtbot.addWidget(w2)
    assert w2.current_preset == "SD 1.5 character — 6 GB"
    assert w2.binding.config.precision.gradient_checkpointing is True


def test_opening_a_malformed_file_shows_message_and_keeps_running(window, tmp_path, qtbot):
    bad = tmp_path / "bad.toml"
    bad.write_text("[schedule]\nepochs = 0\n", encoding="utf-8")
    before = window.binding.config.copy()
    assert window.preset_files.open_file(str(bad)) is False
    boxes = [b for b in window.findChildren(object) if getattr(b, "objectName", lambda: "")() == "error_box"]
    assert boxes and "schedule.epochs" in boxes[-1].text() and "line 2" in boxes[-1].text()
    assert window.binding.config == before


def test_drop_of_toml_on_window_opens_it(window, tmp_path, qtbot):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[network]\nrank = 7\n", encoding="utf-8")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(cfg))])
    ev = QDropEvent(QPointF(QPoint(50, 50)), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.dropEvent(ev)
    qtbot.waitUntil(lambda: window.binding.config.network.rank == 7, timeout=2000)


def test_window_screenshot(window, artifacts_dir, qtbot):
    window.resize(1180, 780)
    window.nav.setCurrentRow(2)
    qtbot.wait(50)
    path = artifacts_dir / "main_window.png"
    assert window.grab().save(str(path))
    assert path.stat().st_size > 10_000


def test_second_launch_hands_files_to_running_instance(qtbot, tmp_path):
    from guitrainer.ui.window.single_instance import InstanceServer, send_to_running

    name = f"guitrainer-test-{tmp_path.name}"
    server = InstanceServer(name)
    assert server.listening
    with qtbot.waitSignal(server.files_received, timeout=3000) as blocker:
        assert send_to_running(name, ["/x/preset.toml"])
    assert blocker.args == [["/x/preset.toml"]]
    assert send_to_running(f"{name}-nobody", []) is False


def test_vram_meter_follows_detected_device(window, qtbot):
    window.load_preset("SDXL quality — 24 GB")
    window.model_page.device_detected.emit(fake_device("rtx3060"))  # as when the probe finishes
    qtbot.waitUntil(lambda: window.vram_meter.level == "over", timeout=3000)  # 24 GB preset on a 12 GB card
    window.model_page.device_detected.emit(fake_device("h100"))
    qtbot.waitUntil(lambda: window.vram_meter.level == "ok", timeout=3000)


def test_fp16_overflow_warning_reaches_output_page(window):
    from guitrainer.engine.export import FP16_WARNING_TAG

    window.binding.set("precision.save", "fp16")
    window.training_page._on_warning(f"{FP16_WARNING_TAG} lora_unet_x.lora_up.weight exceeds ±65504.")
    assert window.output_page._advice_row.isVisibleTo(window.output_page)
    window.output_page.advice_button.click()
    assert window.binding.config.precision.save == "bf16"


def test_error_advice_disables_train_with_the_reason(window, qtbot):
    window.nav.setCurrentRow(2)
    qtbot.wait(20)
    train = window.training_page.train_button
    assert train.isEnabled()
    window.model_page.precision_picker.set_device(fake_device("t4"))  # compute capability 7.5
    window.binding.set("precision.training", "bf16")
    qtbot.waitUntil(lambda: not train.isEnabled(), timeout=2000)
    assert "bf16" in train.toolTip()
    window.binding.set("precision.training", "fp16")
    qtbot.waitUntil(train.isEnabled, timeout=2000)
    assert "Fix this first" not in train.toolTip()


def test_a_failed_precise_check_writes_its_details_to_the_log(window, qtbot, monkeypatch):
    """Issue 15 #5 (UI): the meter says what failed; the Log on the Training page has the traceback."""
    import guitrainer.engine.memory as memory  # the face the VRAM meter calls

    def broken(_cfg):
        raise ValueError("Adafactor state cannot be measured")

    monkeypatch.setattr(memory, "measure_training_step", broken)
    meter = window.vram_meter
    with qtbot.waitSignal(meter.measurement_failed, timeout=30000):
        qtbot.mouseClick(meter.check_button, Qt.MouseButton.LeftButton)
    assert "Adafactor state cannot be measured" in meter.status_label.text() and "Log" in meter.status_label.text()
    log_text = window.training_page.log_panel.text()
    assert "Check precisely failed: Adafactor state cannot be measured" in log_text and "Traceback" in log_text
