"""ModelPage and ModelPicker (offscreen): background device probe, model detection, drops, recents."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers import fake_device
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QLabel
from safetensors.numpy import save_file

from guitrainer.core.device import hardware
from guitrainer.ui.binding import ConfigBinding, bound_editors
from guitrainer.ui.model.model_picker import MAX_RECENT, RECENT_KEY, ModelPicker
from guitrainer.ui.model.page import ModelPage
from guitrainer.ui.model.precision_picker import DETECTING

SD15 = {
    "model.diffusion_model.input_blocks.0.0.weight": (320, 4, 3, 3),
    "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight": (16, 8),
}
SDXL = {
    "model.diffusion_model.input_blocks.0.0.weight": (320, 4, 3, 3),
    "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight": (24, 8),
}
LORA = {"lora_unet_x.lora_down.weight": (4, 8), "lora_unet_x.lora_up.weight": (8, 4)}


def _ckpt(path, keys):
    save_file({k: np.zeros(s, dtype=np.float16) for k, s in keys.items()}, str(path))
    return path


@pytest.fixture
def settings(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def _page(qtbot, settings, binding=None, **kw) -> ModelPage:
    page = ModelPage(binding or ConfigBinding(), settings=settings, **kw)
    qtbot.addWidget(page)
    page.resize(1000, 1150)
    return page


def test_real_probe_runs_in_the_background_and_shows_cpu_facts(qtbot, settings, artifacts_dir):
    seen: list[str] = []

    def real_probe():
        seen.append(threading.current_thread().name)
        return hardware.probe()

    page = _page(qtbot, settings, probe=real_probe)
    assert page.precision_picker.device() is None
    assert page.precision_picker.status_label.text() == DETECTING
    with qtbot.waitSignal(page.device_detected, timeout=60_000) as blocker:
        page.show()
    device = blocker.args[0]
    assert seen == ["guitrainer-device-probe"]  # not the GUI thread
    assert device.kind == "cpu" and page.precision_picker.device() is device
    assert not page.precision_picker.status_label.isVisible()
    texts = [lab.text() for lab in page.precision_picker.device_box.findChildren(type(page.precision_picker.status_label))]
    assert any(t.startswith("CPU: ") for t in texts)
    assert not page.has_errors() and page.error_text() == ""
    rows = page.precision_picker.advice_rows()
    assert rows and all(r.advice.level != "error" for r in rows)
    assert any(r.advice.code == "fp16_on_cpu" for r in rows)  # the default fp16 on a CPU
    qtbot.wait(20)
    assert page.grab().save(str(artifacts_dir / "model_page.png"))


def test_probe_failure_is_shown_not_swallowed(qtbot, settings):
    def broken():
        raise RuntimeError("driver on fire")

    page = _page(qtbot, settings, probe=broken, auto_probe=False)
    assert page.start_probe() and not page.start_probe()  # once
    qtbot.waitUntil(lambda: "driver on fire" in page.precision_picker.status_label.text(), timeout=5000)
    assert page.precision_picker.device() is None


def test_page_errors_follow_model_and_precision(qtbot, settings, tmp_path):
    page = _page(qtbot, settings, probe=lambda: fake_device("t4"), auto_probe=False)
    page.start_probe()
    qtbot.waitUntil(lambda: page.precision_picker.device() is not None, timeout=5000)
    with qtbot.waitSignal(page.errors_changed) as blocker:
        page.binding.set("precision.training", "bf16")
    assert blocker.args == [True] and "Tesla T4" in page.error_text()
    page.binding.set("precision.training", "fp16")
    assert not page.has_errors()
    with qtbot.waitSignal(page.errors_changed):
        page.model_picker.choose(str(_ckpt(tmp_path / "a_lora.safetensors", LORA)))
    assert page.has_errors() and "is a LoRA" in page.error_text()
    editors = bound_editors(page)
    for path in ("model.base", "model.family", "model.init_lora", "precision.gradient_checkpointing",
                 "precision.cache_latents", "precision.cache_text_encoder_outputs"):
        assert path in editors, path


def test_picker_detects_family_and_sets_it(qtbot, settings, tmp_path):
    binding = ConfigBinding()
    picker = ModelPicker(binding, settings=settings)
    qtbot.addWidget(picker)
    xl = _ckpt(tmp_path / "xl.safetensors", SDXL)
    picker.edit.setText(str(xl))
    picker.edit.editingFinished.emit()
    assert binding.get("model.base") == str(xl) and binding.get("model.family") == "sdxl"
    assert picker.family_badge.text() == "SDXL" and "SDXL checkpoint" in picker.message_label.text()
    lora = _ckpt(tmp_path / "l.safetensors", LORA)
    picker.choose(str(lora))
    assert binding.get("model.family") == "sdxl"  # a rejected file leaves the family alone
    assert picker.family_badge.text() == "unsupported" and "not a base model" in picker.message_label.text()
    qtbot.mouseClick(picker.demo_button, Qt.MouseButton.LeftButton)
    assert (binding.get("model.base"), binding.get("model.family")) == ("demo", "demo")
    picker.choose("stabilityai/stable-diffusion-xl-base-1.0")
    assert binding.get("model.family") == "sdxl" and picker.detection().kind == "hub_id"
    picker.choose(str(tmp_path / "missing.safetensors"))
    assert "does not exist" in picker.message_label.text()
    assert picker.family_badge.text() == "not found"  # not "unsupported"


def test_preset_load_shows_detection_without_changing_family(qtbot, settings, tmp_path):
    binding = ConfigBinding()
    picker = ModelPicker(binding, settings=settings)
    qtbot.addWidget(picker)
    cfg = binding.config.copy()
    cfg.set("model.base", str(_ckpt(tmp_path / "sd.safetensors", SD15)))
    cfg.set("model.family", "auto")
    binding.replace(cfg)
    assert picker.edit.text() == cfg.model.base and picker.detection().family == "sd15"
    assert binding.get("model.family") == "auto" and picker.family_mismatch() == ""
    binding.set("model.family", "sdxl")  # contradicts the file: said, not silently changed
    assert "looks like SD 1.5" in picker.message_label.text() and picker.property("detection_level") == "warning"
    picker.family_editor.setCurrentIndex(picker.family_editor.findData("sd15"))
    assert binding.get("model.family") == "sd15" and picker.family_mismatch() == ""


def test_drop_a_file_and_a_folder(qtbot, settings, tmp_path):
    binding = ConfigBinding()
    picker = ModelPicker(binding, settings=settings)
    qtbot.addWidget(picker)
    picker.show()
    sd = _ckpt(tmp_path / "sd15.safetensors", SD15)

    def drop(path) -> QDropEvent:
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(path))])
        enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                                Qt.KeyboardModifier.NoModifier)
        picker.edit.dragEnterEvent(enter)
        ev = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                        Qt.KeyboardModifier.NoModifier)
        picker.edit.dropEvent(ev)
        return enter, ev

    enter, ev = drop(sd)
    assert enter.isAccepted() and ev.isAccepted()
    assert binding.get("model.base") == str(sd) and binding.get("model.family") == "sd15"
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model_index.json").write_text('{"_class_name": "StableDiffusionXLPipeline"}')
    (folder / "unet").mkdir()
    (folder / "unet" / "config.json").write_text('{"in_channels": 4}')
    drop(folder / "model_index.json")  # dropping the index means its folder
    assert binding.get("model.base") == str(folder) and binding.get("model.family") == "sdxl"
    txt = tmp_path / "notes.txt"
    txt.write_text("hi")
    enter, ev = drop(txt)
    assert not enter.isAccepted() and not ev.isAccepted()
    assert binding.get("model.base") == str(folder)


def test_browse_buttons(qtbot, settings, tmp_path, monkeypatch):
    binding = ConfigBinding()
    picker = ModelPicker(binding, settings=settings)
    qtbot.addWidget(picker)
    sd = _ckpt(tmp_path / "pick.safetensors", SD15)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(lambda *a, **k: ([str(sd)], "")))
    qtbot.mouseClick(picker.file_button, Qt.MouseButton.LeftButton)
    assert binding.get("model.base") == str(sd)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: ""))  # cancelled
    qtbot.mouseClick(picker.folder_button, Qt.MouseButton.LeftButton)
    assert binding.get("model.base") == str(sd)


def test_recent_models_are_remembered(qtbot, settings, tmp_path):
    binding = ConfigBinding()
    picker = ModelPicker(binding, settings=settings)
    qtbot.addWidget(picker)
    files = [_ckpt(tmp_path / f"m{i}.safetensors", SD15) for i in range(MAX_RECENT + 2)]
    for f in files:
        picker.choose(str(f))
    picker.choose(str(files[3]))  # used again: moves to the front
    picker.choose("demo")  # the demo is not a "recent model"
    recent = picker.recent_models()
    assert len(recent) == MAX_RECENT and recent[0] == str(files[3]) and recent[1] == str(files[-1])
    assert "demo" not in recent and recent.count(str(files[3])) == 1
    settings.sync()
    again = ModelPicker(ConfigBinding(), settings=QSettings(settings.fileName(), QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    assert again.recent_models() == recent
    actions = again.recent_menu.actions()
    assert [a.text() for a in actions] == recent
    actions[2].trigger()
    assert again.binding.get("model.base") == recent[2]
    assert settings.value(RECENT_KEY)


def test_page_does_not_import_torch_while_opening():
    """The page is built and shown, events run, and torch is still not loaded (the probe waits)."""
    code = (
        "import sys, time\n"
        "from PySide6.QtWidgets import QApplication, QMainWindow\n"
        "app = QApplication([])\n"
        "from guitrainer.ui.binding import ConfigBinding\n"
        "from guitrainer.ui.model.page import ModelPage, PROBE_DELAY_MS\n"
        "w = QMainWindow(); page = ModelPage(ConfigBinding()); w.setCentralWidget(page)\n"
        "w.show(); t = time.perf_counter()\n"
        "while time.perf_counter() - t < PROBE_DELAY_MS / 1000 * 0.5: app.processEvents()\n"
        "print('torch' in sys.modules, page.probe_running())\n"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False False", (out.stdout, time.perf_counter() - t0)


def _two_gpu_page(qtbot, settings, binding=None) -> ModelPage:
    page = _page(qtbot, settings, binding, probe=lambda: fake_device("rtx3060", "rtx4090"), auto_probe=False)
    with qtbot.waitSignal(page.device_detected, timeout=5000):
        page.start_probe()
    return page


def test_gpu_selector_writes_precision_gpu_index(qtbot, settings):
    page = _two_gpu_page(qtbot, settings)
    picker, binding = page.precision_picker, page.binding
    combo = bound_editors(page)["precision.gpu_index"]
    assert combo is picker.device_combo and not combo.isHidden() and combo.count() == 2
    assert binding.get("precision.gpu_index") == -1 and combo.currentIndex() == 0  # automatic: the first GPU
    assert picker.device().gpu.name == "NVIDIA GeForce RTX 3060"
    with qtbot.waitSignal(picker.device_changed) as blocker:
        combo.setCurrentIndex(combo.findData(1))
    assert binding.get("precision.gpu_index") == 1
    assert blocker.args[0].gpu.name == "NVIDIA GeForce RTX 4090" and picker.device() is blocker.args[0]
    facts = {lab.objectName(): lab.text() for lab in picker.device_box.findChildren(QLabel)}
    assert facts["fact_device"] == "NVIDIA GeForce RTX 4090" and facts["fact_memory"].startswith("24.0 GB")
    combo.setCurrentIndex(0)
    assert binding.get("precision.gpu_index") == 0 and picker.device().gpu.index == 0
    assert binding.config.to_toml().count("gpu_index = 0") == 1  # what a saved preset / CLI config carries


def test_preset_load_selects_its_gpu_and_presets_without_it_are_automatic(qtbot, settings):
    from guitrainer.config import TrainingConfig, apply_overlay

    page = _two_gpu_page(qtbot, settings)
    picker, binding, combo = page.precision_picker, page.binding, page.precision_picker.device_combo
    second = apply_overlay(TrainingConfig(), {"precision": {"gpu_index": 1, "training": "bf16"}})
    with qtbot.waitSignal(picker.device_changed) as blocker:
        binding.replace(second)
    assert combo.currentIndex() == 1 and blocker.args[0].gpu.index == 1 and not page.has_errors()
    with qtbot.waitSignal(picker.device_changed) as blocker:
        binding.replace(apply_overlay(TrainingConfig(), {"network": {"rank": 8}}))  # no gpu_index: automatic
    assert binding.get("precision.gpu_index") == -1 and combo.currentIndex() == 0 and blocker.args[0].gpu.index == 0
    with qtbot.assertNotEmitted(picker.device_changed):
        binding.replace(apply_overlay(TrainingConfig(), {"network": {"rank": 4}}))  # same GPU: no signal


def test_a_preset_naming_a_missing_gpu_blocks_start_until_fixed(qtbot, settings):
    from guitrainer.config import TrainingConfig, apply_overlay

    page = _two_gpu_page(qtbot, settings)
    picker, binding = page.precision_picker, page.binding
    with qtbot.waitSignal(page.errors_changed) as blocker:
        binding.replace(apply_overlay(TrainingConfig(), {"precision": {"gpu_index": 2}}))
    assert blocker.args == [True] and picker.device_combo.currentIndex() == -1  # no GPU 2 to show
    assert "GPU 2 was chosen but this machine has 2 GPUs (0: NVIDIA GeForce RTX 3060, 1: NVIDIA GeForce RTX 4090)" in (
        page.error_text()
    )
    (row,) = [r for r in picker.advice_rows() if r.advice.code == "gpu_missing"]
    with qtbot.waitSignal(page.errors_changed) as blocker:
        qtbot.mouseClick(row.button, Qt.MouseButton.LeftButton)  # "Use suggested": automatic
    assert blocker.args == [False] and binding.get("precision.gpu_index") == -1
    assert picker.device_combo.currentIndex() == 0


def test_probe_result_carries_the_configs_gpu(qtbot, settings):
    """A preset loaded before the probe finishes: the device reported (VRAM meter) is the chosen GPU."""
    binding = ConfigBinding()
    binding.set("precision.gpu_index", 1)
    page = _page(qtbot, settings, binding, probe=lambda: fake_device("rtx3060", "rtx4090"), auto_probe=False)
    with qtbot.waitSignal(page.device_detected, timeout=5000) as blocker:
        page.start_probe()
    assert blocker.args[0].gpu.name == "NVIDIA GeForce RTX 4090" and len(blocker.args[0].gpus) == 2
    assert page.precision_picker.device() is blocker.args[0]
    assert page.precision_picker.device_combo.currentIndex() == 1
    cpu_page = _page(qtbot, settings, ConfigBinding(), probe=lambda: fake_device("cpu"), auto_probe=False)
    with qtbot.waitSignal(cpu_page.device_detected, timeout=5000) as blocker:
        cpu_page.start_probe()
    assert blocker.args[0].kind == "cpu" and cpu_page.precision_picker.device_combo.isHidden()


def test_an_offline_hub_id_is_no_green_check(qtbot, settings, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    binding = ConfigBinding()
    picker = ModelPicker(binding, settings=settings)
    qtbot.addWidget(picker)
    picker.choose("stabilityai/stable-diffusion-xl-base-1.0")
    assert picker.property("detection_level") == "warning"
    assert "No network" in picker.message_label.text() and "choose a model file or folder" in picker.message_label.text()


def test_fp8_frozen_weights_are_offered_under_advanced_and_halve_the_weights_estimate(qtbot, settings):
    """Issue 17: the page offers fp8 storage of the frozen weights (and bf16 LoRA weights) with their caveat,
    and the estimate follows: picked with the keyboard in the combo box, as a person would."""
    from PySide6.QtWidgets import QComboBox, QToolButton

    from guitrainer.core.memory import estimate

    binding = ConfigBinding()
    binding.set("model.family", "sd15")
    page = _page(qtbot, settings, binding)
    page.show()
    toggle = next(b for b in page.memory_form.findChildren(QToolButton) if "advanced" in b.text().lower())
    qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton)
    combo = bound_editors(page)["precision.base_weights"]
    assert isinstance(combo, QComboBox) and combo.isVisible()
    assert "half" in combo.toolTip() and "quality" in combo.toolTip()  # the saving and the caveat
    assert isinstance(bound_editors(page)["precision.lora_weights"], QComboBox)
    before = {p.key: p.bytes for p in estimate.estimate(binding.config).parts}
    combo.setFocus()
    qtbot.keyClick(combo, Qt.Key.Key_Down)  # "auto" -> "fp8"
    assert binding.get("precision.base_weights") == "fp8"
    after = {p.key: p.bytes for p in estimate.estimate(binding.config).parts}
    assert 0.45 < after["unet"] / before["unet"] < 0.55  # fp16 base (2 bytes) -> fp8 (1 byte); training is fp16


def test_the_base_weights_combo_lists_int8_and_nf4_and_the_estimate_follows(qtbot, settings):
    """Issue 30: the quantised formats appear in the combo through their choice labels; nf4 picked with the
    keyboard shrinks Flux's transformer part to about a quarter."""
    from PySide6.QtWidgets import QToolButton

    from guitrainer.config.precision_choices import BASE_WEIGHT_CHOICES
    from guitrainer.core.memory import estimate

    binding = ConfigBinding()
    binding.set("model.family", "flux1")
    binding.set("precision.training", "bf16")
    page = _page(qtbot, settings, binding)
    page.show()
    toggle = next(b for b in page.memory_form.findChildren(QToolButton) if "advanced" in b.text().lower())
    qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton)
    combo = bound_editors(page)["precision.base_weights"]
    labels = {c.value: c.label for c in BASE_WEIGHT_CHOICES}
    assert [combo.itemText(i) for i in range(combo.count())] == [labels[v] for v in ("auto", "fp8", "int8", "nf4")]
    before = estimate.estimate(binding.config).get("unet")
    combo.setFocus()
    for _ in range(3):
        qtbot.keyClick(combo, Qt.Key.Key_Down)  # "auto" -> "fp8" -> "int8" -> "nf4"
    assert binding.get("precision.base_weights") == "nf4"
    assert 0.25 < estimate.estimate(binding.config).get("unet") / before < 0.28  # 0.52 of 2 bytes, 99 % Linear


def test_after_a_measurement_no_advice_label_or_log_line_recommends_what_was_measured_slower(
        qtbot, settings, tmp_path, monkeypatch):
    """Issue 27 item 6 (DESIGN §5: a measurement on this device outranks every rule, in every place that advises).

    The device is a Xeon with AMX training an SD 1.5 model, where the rules pick bf16 AMP ([cpu] in
    tests/test_precision.py); the measurement is issue 27's, on such a Xeon: fp32 0.354 s/step, fp16 AMP 0.372,
    bf16 AMP 0.558. Every place is driven as the user meets it: the radio buttons clicked, the notes beside them,
    the advice cards expanded, the device table, the VRAM meter's hints, the start check's log lines.
    """
    import re

    from PySide6.QtWidgets import QPushButton, QRadioButton

    from guitrainer.core.checks.start import check_start
    from guitrainer.core.device import environment
    from guitrainer.core.memory import hints
    from guitrainer.core.precision.lab import Candidate, CandidateResult, LabReport, device_key
    from guitrainer.core.precision.measurements import MeasurementStore
    from guitrainer.ui.model.vram_meter import VramMeter

    monkeypatch.setenv("GUITRAINER_HOME", str(tmp_path / "home"))  # the user's store, read by every place
    device = fake_device("cpu_amx")
    binding = ConfigBinding()
    binding.set("model.base", str(_ckpt(tmp_path / "sd15.safetensors", SD15)))
    binding.set("model.family", "sd15")
    binding.set("dataset.resolution", 512)
    binding.set("precision.training", "fp32")
    page = _page(qtbot, settings, binding, probe=lambda: device, auto_probe=False)
    picker = page.precision_picker
    page.show()
    page.start_probe()
    qtbot.waitUntil(lambda: picker.device() is not None, timeout=10_000)
    notes = picker.training_group.notes
    # before: the rules recommend bf16 AMP here, and the fp32 card says so
    assert notes["bf16"].text() == "recommended here"
    assert [a.suggestion for a in picker.advice() if a.topic == "precision.training"] == [{"precision.training": "bf16"}]

    def ran(training: str, seconds: float) -> CandidateResult:
        return CandidateResult(Candidate(training), "ran", seconds_per_step=seconds, images_per_second=2 / seconds,
                               step_seconds=(seconds,) * 3, losses=(1.0,) * 4, eval_loss=1.0, loss_drift=0.0,
                               loss_drift_relative=0.0)

    report = LabReport(device_key(device), device.name, "sd15", 512, 2, 3, 1,
                       (ran("fp32", 0.354), ran("fp16", 0.372), ran("bf16", 0.558)), "2026-12-01T15:00:00+00:00", 9.0)
    MeasurementStore().put(report)
    picker.measurements_changed()  # what the lab window's `measured` signal calls

    # the notes beside the choices: fp32 recommended, the others with what was measured (0.558 / 0.354 = 1.58,
    # written 1.6x; 0.372 / 0.354 = 1.05, a gap under 10 % written with two decimals)
    assert notes["fp32"].text() == "recommended here (measured)"
    assert notes["bf16"].text() == "measured 1.6x slower" and notes["fp16"].text() == "measured 1.05x slower"
    # the device table: what AMX really is, and that the measurement says otherwise
    facts = {lab.objectName(): lab.text() for lab in picker.device_box.findChildren(QLabel)}
    amx = facts["fact_amx_(bf16_matrix_tiles)"]
    assert "bf16 matmuls in hardware" in amx and "faster than fp32" not in amx
    assert "measured here bf16 AMP was slower (0.558 against 0.354 s/step for fp32)" in amx
    assert "fp32, measured 2026-12-01" in picker.measured_label.text()

    slower = ("fp16", "bf16")
    praise = re.compile(r"(fp16 AMP|bf16 AMP)[^.;:]*\b(faster|better choice)\b")
    for training in ("fp32", "fp16", "bf16"):
        button = picker.training_group.findChild(QRadioButton, f"precision_training_{training}")
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert binding.config.precision.training == training
        cards = picker.advice_rows()
        for row in cards:
            row.set_expanded(True)
        texts = [row.label.text() for row in cards]
        suggested = {a.suggestion.get("precision.training") for a in picker.advice()} - {None}
        assert suggested <= {"fp32"}, (training, suggested)
        assert not [t for t in texts if praise.search(t)], texts
        assert not [n.text() for v, n in notes.items() if v in slower and "recommended" in n.text()]
        # the start check's lines, which the Training page logs when the run starts
        cfg = binding.config.copy()
        lines = check_start(cfg, device).notes + check_start(cfg, device).errors
        assert not [line for line in lines if re.search(r"use (fp16|bf16) AMP", line) or praise.search(line)], lines
        if training == "fp32":  # the rule the measurement contradicted says so
            assert any("This CPU has AMX (bf16 matrix tiles), but measured here fp32 was fastest: 0.354 s/step "
                       "against 0.558 for bf16 AMP" in t for t in texts), texts
        else:
            assert suggested == {"fp32"}
    # the VRAM meter's hints: a half format is offered for its memory, the faster one measured, with its cost
    binding.set("precision.training", "fp32")
    meter = VramMeter(binding)
    qtbot.addWidget(meter)
    meter.set_device(None, device.name, info=device)
    meter.refresh()
    labels = [b.text() for b in meter.findChildren(QPushButton)]  # "Check precisely" and the hints
    precision_hints = [h.label for h in hints.hints(binding.config, device=device) if "precision.training" in h.changes]
    assert precision_hints == ["fp16 AMP (measured 1.05x slower)"]
    assert any(t.startswith("fp16 AMP (measured 1.05x slower)") for t in labels), labels
    assert not [t for t in labels if "bf16" in t]
    # Help ▸ Environment's precision row
    (row,) = [i for i in environment.check(device, {}) if i.label == "Precision"]
    assert row.value.startswith("best here: fp32 for sd15 at 512 px (measured 2026-12-01)")
