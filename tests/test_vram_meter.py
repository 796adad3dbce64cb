"""VramMeter widget: live updates, hint buttons, colours, the precise check, and a screenshot."""

from __future__ import annotations

import sys

import pytest

from guitrainer.base import units
from guitrainer.config import TrainingConfig
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.model.vram_meter import VramMeter


def make(qtbot, **values: object) -> tuple[ConfigBinding, VramMeter]:
    c = TrainingConfig()
    for path, value in values.items():
        c.set(path.replace("__", "."), value)
    binding = ConfigBinding(c)
    meter = VramMeter(binding)
    qtbot.addWidget(meter)
    meter.resize(760, 80)
    meter.show()
    return binding, meter


def test_updates_on_config_change(qtbot) -> None:
    binding, meter = make(qtbot, model__family="sd15")
    before = meter.breakdown.total
    shown_before = meter.total_label.text()
    with qtbot.waitSignal(meter.estimate_updated, timeout=1000):
        binding.set("schedule.batch_size", 4)
    assert meter.breakdown.total > before
    assert meter.total_label.text() != shown_before
    with qtbot.waitSignal(meter.estimate_updated, timeout=1000):
        binding.replace(TrainingConfig())
    assert meter.breakdown.family == "demo"


def test_hint_button_changes_config(qtbot) -> None:
    binding, meter = make(qtbot, model__family="sdxl", schedule__batch_size=2)
    meter.set_device(8 * units.GiB, "Test GPU 8 GB")
    qtbot.waitUntil(lambda: meter.breakdown.device_total == 8 * units.GiB, timeout=1000)
    buttons = meter.hint_buttons()
    assert buttons, "a config that does not fit should offer hints"
    gc = next(b for b in buttons if b.text().startswith("Gradient checkpointing"))
    assert "GB" in gc.text() or "MB" in gc.text()
    total = meter.breakdown.total
    with qtbot.waitSignal(meter.estimate_updated, timeout=1000):
        gc.click()
    assert binding.get("precision.gradient_checkpointing") is True
    assert meter.breakdown.total < total


def test_colour_levels(qtbot, artifacts_dir) -> None:
    binding, meter = make(qtbot, model__family="sdxl", precision__training="fp32", schedule__batch_size=2)
    meter.set_device(12 * units.GiB, "RTX 3060 12 GB")
    qtbot.waitUntil(lambda: meter.breakdown.device_total is not None, timeout=1000)
    assert meter.breakdown.total > 12 * units.GiB
    assert meter.level == "over" and meter.level_color.name() == "#d03030"
    meter.grab().save(str(artifacts_dir / "vram_meter.png"))
    binding.set("precision.training", "fp16")
    binding.set("schedule.batch_size", 1)
    binding.set("precision.gradient_checkpointing", True)
    binding.set("optimizer.name", "AdamW8bit")
    qtbot.waitUntil(lambda: meter.level == "ok", timeout=1000)
    meter.grab().save(str(artifacts_dir / "vram_meter_fits.png"))
    meter.set_device(None, "CPU")
    qtbot.waitUntil(lambda: meter.level == "unknown", timeout=1000)
    assert "system RAM" in meter.status_label.text()
    meter.grab().save(str(artifacts_dir / "vram_meter_cpu.png"))


@pytest.mark.slow
def test_check_precisely_runs_in_background(qtbot) -> None:
    binding, meter = make(qtbot, model__family="demo", dataset__resolution=64,
                          precision__cache_text_encoder_outputs=True)
    with qtbot.waitSignal(meter.measurement_finished, timeout=60000) as blocker:
        meter.check_button.click()
        assert not meter.check_button.isEnabled()  # the GUI returned at once; busy indicator is up
    assert blocker.args[0].peak > 0
    status = meter.status_label.text()
    assert status.startswith("Measured") and "replaces the estimate" in status
    assert "measured" in meter.total_label.text() and "estimated" not in meter.total_label.text()  # one number
    assert "Estimated before measuring" in meter.status_label.toolTip()
    assert meter.check_button.isEnabled()


def test_widget_module_does_not_import_torch() -> None:
    import subprocess

    code = "import sys, guitrainer.ui.model.vram_meter; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={"QT_QPA_PLATFORM": "offscreen", "PATH": ""})


def test_probed_device_filters_hints_and_cpu_status(qtbot) -> None:
    from helpers import fake_device

    binding, meter = make(qtbot, model__family="sdxl", precision__training="fp32", optimizer__name="AdamW")
    gpu = fake_device("rtx3060", bitsandbytes=False)
    meter.set_device(gpu.total_memory, gpu.name, info=gpu)
    qtbot.waitUntil(lambda: meter.breakdown.device_total == gpu.total_memory, timeout=1000)
    texts = [b.text() for b in meter.hint_buttons()]
    assert any(t.startswith("bf16 AMP") for t in texts), texts  # Ampere: bf16, as the picker suggests
    assert not any(t.startswith(("AdamW8bit", "fp16 AMP")) for t in texts), texts  # no bitsandbytes here
    cpu = fake_device("cpu")
    meter.set_device(None, cpu.name, info=cpu)
    qtbot.waitUntil(lambda: meter.status_label.text().startswith("CPU training"), timeout=1000)
    assert meter.breakdown.device_total is None and meter.level == "unknown"
    assert "System RAM while loading the base model: about" in meter.total_label.toolTip()


def test_every_part_has_a_tooltip_on_hover_and_a_legend_entry(qtbot) -> None:
    """Issue 15 #4: a real QHelpEvent over each part shows its tooltip (the handler used to raise)."""
    from helpers import fake_device
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    binding, meter = make(qtbot, model__family="sd15")
    gpu = fake_device("rtx3060")
    meter.set_device(gpu.total_memory, gpu.name, info=gpu)
    meter.resize(1300, 90)
    qtbot.waitUntil(lambda: meter.breakdown.device_total == gpu.total_memory, timeout=1000)
    qtbot.waitExposed(meter)
    segments = meter.bar.segments()
    assert len(segments) >= 5
    legend = meter.legend.text()
    for rect, part in segments:
        assert part.label in legend and units.format_bytes(part.bytes) in legend  # visible without hovering
        if rect.width() < 2:
            continue
        pos = rect.center().toPoint()
        event = QHelpEvent(QEvent.Type.ToolTip, pos, meter.bar.mapToGlobal(pos))
        QApplication.sendEvent(meter.bar, event)
        qtbot.waitUntil(lambda: QToolTip.isVisible(), timeout=1000)
        assert part.label in QToolTip.text() and units.format_bytes(part.bytes) in QToolTip.text()
    outside = QPoint(meter.bar.width() - 2, 5)  # the empty end of the bar: no tooltip
    QApplication.sendEvent(meter.bar, QHelpEvent(QEvent.Type.ToolTip, outside, meter.bar.mapToGlobal(outside)))
    assert "your GPU" in legend


def test_gpu_only_parts_only_on_a_cuda_gpu_and_a_preset_marks_its_card(qtbot) -> None:
    """Issue 27 #8: no "CUDA context" or "Allocator slack" on a CPU, nor in the first seconds before the probe."""
    from helpers import fake_device

    binding, meter = make(qtbot, model__family="demo")
    gpu_only = {"cuda_context", "slack"}
    assert not gpu_only & {p.key for p in meter.bar.parts}  # not known yet: left out, and said
    assert "not known yet" in meter.status_label.text() and "CUDA context" not in meter.legend.text()
    gpu = fake_device("rtx3060")
    meter.set_device(gpu.total_memory, gpu.name, info=gpu)
    qtbot.waitUntil(lambda: gpu_only <= {p.key for p in meter.bar.parts}, timeout=1000)
    assert "CUDA context" in meter.legend.text() and "Allocator slack" in meter.legend.text()
    cpu = fake_device("cpu")
    meter.set_device(None, cpu.name, info=cpu)
    qtbot.waitUntil(lambda: not gpu_only & {p.key for p in meter.bar.parts}, timeout=1000)
    assert "CUDA context" not in meter.legend.text() and "Allocator slack" not in meter.legend.text()
    assert meter.status_label.text().startswith("CPU training uses system RAM")
    meter.device_unknown("torch could not be imported")
    qtbot.waitUntil(lambda: "could not be checked (torch could not be imported)" in meter.status_label.text(), timeout=1000)
    meter.set_target("SD 1.5 character — 6 GB")
    qtbot.waitUntil(lambda: meter.bar.target == 6 * units.GiB, timeout=1000)
    assert "6.0 GB card the preset is made for" in meter.legend.text()
    meter.set_target("Demo — tiny built-in model (CPU, about a minute)")
    qtbot.waitUntil(lambda: meter.bar.target is None, timeout=1000)


def test_fix_buttons_never_suggest_what_the_precision_panel_advises_against(qtbot) -> None:
    from helpers import fake_device

    from guitrainer.core.precision import advisor
    from guitrainer.ui.model.vram_meter import advised_against

    binding, meter = make(qtbot, model__family="sdxl", precision__training="fp32", optimizer__name="AdamW")
    gpu = fake_device("gtx1080")  # Pascal: the picker warns against fp16 there
    meter.set_device(gpu.total_memory, gpu.name, info=gpu)
    qtbot.waitUntil(lambda: meter.breakdown.device_total == gpu.total_memory, timeout=1000)
    cfg = binding.config
    for btn in meter.hint_buttons():
        changes = dict(item.split(" = ", 1) for item in btn.toolTip().removeprefix("Apply: ").split(", "))
        assert not any(v in ("fp16", "AdamW8bit") and advised_against(gpu, cfg, {k: v}) for k, v in changes.items())
    # the filter itself: a change that brings a new warning is advised against, one that does not is not
    warned = {a.code for a in advisor.advise(gpu, cfg) if a.level != "info"}
    fp16 = cfg.copy()
    fp16.set("precision.training", "fp16")
    new = {a.code for a in advisor.advise(gpu, fp16) if a.level != "info"} - warned
    assert advised_against(gpu, cfg, {"precision.training": "fp16"}) == bool(new)
    assert not advised_against(gpu, cfg, {"schedule.batch_size": 1})


def test_a_failed_check_shows_its_message_and_hands_the_details_on(qtbot, monkeypatch) -> None:
    import guitrainer.engine.memory as memory  # the face the VRAM meter calls

    def broken(_cfg):
        raise RuntimeError("Adafactor has no state to measure")

    monkeypatch.setattr(memory, "measure_training_step", broken)
    binding, meter = make(qtbot, model__family="demo", dataset__resolution=64)
    with qtbot.waitSignal(meter.measurement_failed, timeout=30000) as blocker:
        meter.check_button.click()
    message, details = blocker.args
    assert message == "Adafactor has no state to measure" and "Traceback" in details
    text = meter.status_label.text()
    assert "Adafactor has no state to measure" in text and "Log" in text
    assert "Traceback" not in meter.status_label.toolTip() and meter.check_button.isEnabled()


def test_check_precisely_on_a_cpu_says_what_the_measurement_counts(qtbot, monkeypatch) -> None:
    """Issue 27 #8: "586 MB measured against 0.1 GB estimated" came from a CUDA context added on a CPU; now the two
    numbers are alike and the difference is explained."""
    from types import SimpleNamespace

    from helpers import fake_device

    import guitrainer.engine.memory as memory

    binding, meter = make(qtbot, model__family="demo")
    cpu = fake_device("cpu")
    meter.set_device(None, cpu.name, info=cpu)
    qtbot.waitUntil(lambda: estimate_is_for_cpu(meter), timeout=1000)
    est = meter.breakdown.total
    step = SimpleNamespace(peak=int(est * 0.9), static=3 * units.MiB, method="fake", notes=["fake tensors on CPU"])
    monkeypatch.setattr(memory, "measure_training_step", lambda _cfg: step)
    with qtbot.waitSignal(meter.measurement_finished, timeout=30000):
        meter.check_button.click()
    assert meter.bar.measured == step.peak  # nothing added: no CUDA context on a CPU
    status, tip = meter.status_label.text(), meter.status_label.toolTip()
    assert "10% less than estimated" in status and units.format_bytes(est) in status
    assert "every tensor of a simulated step" in tip and "no CUDA context or allocator slack" in tip
    assert "Python, torch and the app" in tip


def estimate_is_for_cpu(meter: VramMeter) -> bool:
    return meter.breakdown is not None and meter.breakdown.part("cuda_context") is None and meter.breakdown.part("slack") is None
