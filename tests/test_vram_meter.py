"""VramMeter widget: live updates, hint buttons, colours, the precise check, and a screenshot."""

from __future__ import annotations

import sys

from guitrainer.config import TrainingConfig
from guitrainer.core import vram
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.vram_meter import VramMeter


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
    meter.set_device(8 * vram.GiB, "Test GPU 8 GB")
    qtbot.waitUntil(lambda: meter.breakdown.device_total == 8 * vram.GiB, timeout=1000)
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
    meter.set_device(12 * vram.GiB, "RTX 3060 12 GB")
    qtbot.waitUntil(lambda: meter.breakdown.device_total is not None, timeout=1000)
    assert meter.breakdown.total > 12 * vram.GiB
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


def test_check_precisely_runs_in_background(qtbot) -> None:
    binding, meter = make(qtbot, model__family="demo", dataset__resolution=64,
                          precision__cache_text_encoder_outputs=True)
    with qtbot.waitSignal(meter.measurement_finished, timeout=60000) as blocker:
        meter.check_button.click()
        assert not meter.check_button.isEnabled()  # the GUI returned at once; busy indicator is up
    assert blocker.args[0].peak > 0
    assert "estimated" in meter.status_label.text()
    assert meter.check_button.isEnabled()


def test_widget_module_does_not_import_torch() -> None:
    import subprocess

    code = "import sys, guitrainer.ui.vram_meter; assert 'torch' not in sys.modules"
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
