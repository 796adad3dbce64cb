"""The VRAM meter's system-RAM figure ("RAM 14.2 / 32.0 GB" beside the bar) and the parts of block offload."""

from __future__ import annotations

from helpers import fake_device

from guitrainer.base import units
from guitrainer.config import TrainingConfig
from guitrainer.core.memory import system_ram
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.model.vram_meter import VramMeter


def meter_for(qtbot, **values: object) -> tuple[ConfigBinding, VramMeter]:
    c = TrainingConfig()
    for path, value in {"model.family": "sdxl", "precision.training": "bf16",
                        "precision.gradient_checkpointing": True, **values}.items():
        c.set(path, value)
    binding = ConfigBinding(c)
    meter = VramMeter(binding)
    qtbot.addWidget(meter)
    meter.resize(900, 80)
    meter.show()
    gpu = fake_device("rtx3060")
    meter.set_device(gpu.total_memory, gpu.name, info=gpu)
    qtbot.waitUntil(lambda: meter.breakdown is not None and meter.breakdown.device_total == gpu.total_memory)
    return binding, meter


def test_the_ram_line_shows_the_peak_against_this_computers_ram(qtbot):
    _binding, meter = meter_for(qtbot)
    ram = meter.ram
    assert ram is not None and ram.machine_total == system_ram.machine_ram()
    text = meter.ram_label.text()
    assert f"{ram.peak / units.GiB:.1f}</b> / {ram.machine_total / units.GiB:.1f} GB" in text and "RAM" in text
    assert "System RAM:" in meter.ram_label.toolTip() and "Loading the base model" in meter.ram_label.toolTip()


def test_blocks_in_ram_move_from_the_bar_to_the_ram_line(qtbot):
    binding, meter = meter_for(qtbot)
    unet, training = meter.breakdown.get("unet"), meter.ram.training
    binding.set("precision.offload_blocks", 0.5)
    qtbot.waitUntil(lambda: meter.breakdown.get("offload_stream") > 0)
    pinned = meter.ram.get("pinned_blocks")
    assert pinned > 0 and meter.ram.training - training == pinned
    assert abs(unet - meter.breakdown.get("unet") - pinned) < 512  # bf16: the same bytes (the GPU rounds to 512)
    assert "Blocks streamed from RAM" in meter.legend.text()
    assert "Blocks kept in system RAM" in meter.ram_label.toolTip()
