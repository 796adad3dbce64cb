"""PrecisionPicker (offscreen): bound radios, device facts, inline advice, "Use suggested", device selector."""

from __future__ import annotations

import pytest
from helpers import fake_device
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton

from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.model.precision_picker import DETECTING, AdviceRow, PrecisionPicker


@pytest.fixture
def binding():
    return ConfigBinding()


def _picker(qtbot, binding, device=None) -> PrecisionPicker:
    w = PrecisionPicker(binding, device)
    qtbot.addWidget(w)
    w.resize(900, 700)
    w.show()
    return w


def _rows(w: PrecisionPicker, level: str | None = None) -> list[AdviceRow]:
    return [r for r in w.advice_rows() if level is None or r.advice.level == level]


def test_bf16_on_turing_shows_error_and_use_suggested_fixes_it(qtbot, binding):
    w = _picker(qtbot, binding, fake_device("t4"))
    assert binding.get("precision.training") == "fp16" and not w.has_errors()
    with qtbot.waitSignal(w.errors_changed) as blocker:
        qtbot.mouseClick(w.training_group.buttons["bf16"], Qt.MouseButton.LeftButton)
    assert blocker.args == [True]
    assert binding.get("precision.training") == "bf16"
    assert w.has_errors() and "Tesla T4" in w.error_text() and "7.5" in w.error_text()
    (row,) = _rows(w, "error")
    assert "Suggested:</b> use fp16 AMP" in row.label.text()
    assert row.button is not None and row.button.text() == "Use suggested"
    assert w.training_group.notes["bf16"].text() == "not supported here"
    assert w.training_group.notes["fp16"].text() == "recommended here"

    with qtbot.waitSignal(w.errors_changed) as blocker:
        qtbot.mouseClick(row.button, Qt.MouseButton.LeftButton)
    assert blocker.args == [False]
    assert binding.get("precision.training") == "fp16"
    assert w.training_group.buttons["fp16"].isChecked()
    assert not w.has_errors() and w.error_text() == "" and not _rows(w, "error")


def test_config_change_elsewhere_updates_radios_and_advice(qtbot, binding):
    w = _picker(qtbot, binding, fake_device("rtx3060"))
    binding.set("precision.training", "fp32")
    assert w.training_group.buttons["fp32"].isChecked()
    assert [r.advice.code for r in _rows(w)] == ["fp32_slow"]
    binding.set("precision.save", "bf16")
    assert w.save_group.buttons["bf16"].isChecked()
    qtbot.mouseClick(w.save_group.buttons["fp32"], Qt.MouseButton.LeftButton)
    assert binding.get("precision.save") == "fp32"
    cfg = binding.config.copy()
    cfg.set("precision.training", "bf16")
    binding.replace(cfg)
    assert w.training_group.buttons["bf16"].isChecked() and not _rows(w)


def test_set_device_updates_facts_and_advice(qtbot, binding):
    w = _picker(qtbot, binding)
    assert w.device() is None and w.status_label.text() == DETECTING and w.status_label.isVisible()
    assert not w.advice_rows() and not w.has_errors()
    binding.set("precision.training", "bf16")
    with qtbot.waitSignal(w.errors_changed):
        w.set_device(fake_device("gtx1080"))
    assert not w.status_label.isVisible()
    facts = {lab.objectName(): lab.text() for lab in w.device_box.findChildren(QLabel) if lab.objectName().startswith("fact_")}
    assert facts["fact_device"] == "NVIDIA GeForce GTX 1080"
    assert facts["fact_compute_capability"].startswith("6.1")
    assert facts["fact_memory"].startswith("8.0 GB total")
    assert facts["fact_bf16_native"] == "no"
    assert "CUDA" in facts["fact_bitsandbytes"]
    assert w.has_errors()
    with qtbot.waitSignal(w.errors_changed) as blocker:
        w.set_device(fake_device("rtx4090"))
    assert blocker.args == [False] and not w.advice_rows()


def test_device_selector_only_with_several_gpus(qtbot, binding):
    w = _picker(qtbot, binding, fake_device("rtx4090"))
    assert not w.device_combo.isVisible()
    binding.set("precision.training", "bf16")
    w.set_device(fake_device("rtx4090", "t4"))
    assert w.device_combo.isVisible() and w.device_combo.count() == 2
    assert "RTX 4090" in w.device_combo.itemText(0) and "T4" in w.device_combo.itemText(1)
    assert not w.has_errors()
    with qtbot.waitSignals([w.device_changed, w.errors_changed]):
        w.device_combo.setCurrentIndex(1)
    assert w.device().gpu.name == "Tesla T4" and w.has_errors()
    w.set_device(fake_device("cpu"))
    assert not w.device_combo.isVisible()


def test_install_hint_is_copyable(qtbot, binding):
    w = _picker(qtbot, binding, fake_device("rtx5090_cu126"))
    (row,) = [r for r in _rows(w, "error") if r.advice.code == "torch_arch_missing"]
    assert row.button is not None and row.button.objectName() == "copy_suggestion"
    qtbot.mouseClick(row.button, Qt.MouseButton.LeftButton)
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text().endswith('"torch==2.13.0+cu130" --index-url https://download.pytorch.org/whl/cu130')
    assert not row.findChildren(QPushButton, "use_suggested")


def test_screenshot_with_a_warning(qtbot, binding, artifacts_dir):
    binding.set("optimizer.name", "PagedAdamW8bit")
    w = _picker(qtbot, binding, fake_device("gtx1660", "rtx3060"))
    binding.set("precision.training", "fp16")
    assert [r.advice.level for r in _rows(w)] == ["warning"]  # the GTX 16xx fp16 caveat
    w.resize(920, max(w.sizeHint().height(), 400))
    qtbot.wait(20)
    path = artifacts_dir / "precision_picker.png"
    assert w.grab().save(str(path))
    assert path.stat().st_size > 10_000


def test_a_choice_with_a_caveat_says_it_beside_the_choice(qtbot, binding):
    """Issue 15: "see the note" pointed at a note only shown once fp16 was chosen; now the caveat itself shows."""
    from guitrainer.config import precision_choices
    from guitrainer.core.precision import advisor

    w = _picker(qtbot, binding, fake_device("gtx1660"))  # Turing without tensor cores: fp16 has a caveat
    binding.set("precision.training", "fp32")
    warned = [c.value for c in precision_choices.TRAINING_CHOICES if advisor.training_choice_level(w.device(), c.value) == "warning"]
    assert warned == ["fp16"]
    for value in warned:
        note = w.training_group.notes[value]
        assert note.text() and note.text() != "see the note" and note.isVisibleTo(w)
        assert "Turing" in note.toolTip() and "NaN" in note.text()  # the gist beside, the whole caveat on hover


def test_a_collapsed_note_ends_on_a_sentence_or_an_ellipsis_never_a_colon():
    from guitrainer.ui.model.precision_picker import COLLAPSE_OVER, first_sentence

    colon = "fp8 weights need gradient checkpointing to save memory: without it each layer's widened copy is kept."
    long = colon + " More words follow here to make it long enough."
    assert first_sentence(long) == "fp8 weights need gradient checkpointing to save memory…"
    sentence = "Keeping SDXL's VAE in fp32 costs about 1.4 GB. " + "More text " * 20
    assert first_sentence(sentence) == "Keeping SDXL's VAE in fp32 costs about 1.4 GB."
    words = "SDXL's VAE stays in fp32 under fp16, costing about 160 MB more at 64 px on every step, since " * 3
    short = first_sentence(words)
    assert short.endswith("…") and len(short) <= COLLAPSE_OVER + 1 and "160 MB" in short
    assert first_sentence("Short.") == "Short."
