"""The start check warns before a run whose system-RAM peak (core/memory/system_ram.py) is more than the computer
has, naming what to lower; it counts the images the folders hold for the caches."""

from __future__ import annotations

from pathlib import Path

from helpers import fake_device
from PIL import Image

from guitrainer.base.units import GiB
from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core.checks.start import check_start
from guitrainer.core.memory import system_ram


def config(tmp_path: Path, **precision: object) -> TrainingConfig:
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    for i in range(3):
        Image.new("RGB", (64, 64), (80 * i, 120, 200)).save(folder / f"{i}.png")
    cfg = TrainingConfig()
    cfg.model.base = "someone/some-sdxl-model"
    cfg.model.family = "sdxl"
    cfg.output.folder = str(tmp_path / "out")
    cfg.dataset.folders = [DatasetFolder(path=str(folder), repeats=1)]
    cfg.precision.training = "bf16"
    cfg.precision.gradient_checkpointing = True
    for key, value in precision.items():
        setattr(cfg.precision, key, value)
    return cfg


def ram_lines(check) -> list[str]:
    return [c for c in check.confirm if "system RAM" in c]


def test_pinned_blocks_over_the_machines_ram_ask_first_and_name_the_fixes(tmp_path):
    """SDXL with every block in RAM: ~5 GB of pinned bf16 blocks make training need over 6 GB (and the fp32 load
    far more): both phases are named, each with its fixes."""
    cfg = config(tmp_path, offload_blocks=1.0)
    device = fake_device("rtx3060")
    ram = system_ram.estimate_ram(cfg, None, device, images=3, machine_total=6 * GiB)
    assert ram.loading > ram.training > 6 * GiB
    lines = ram_lines(check_start(cfg, device, machine_ram=6 * GiB))
    assert len(lines) == 1
    assert "while the base model loads" in lines[0] and "while training" in lines[0]
    assert "keep fewer blocks in system RAM" in lines[0] and "now 100%" in lines[0] and "fp8" in lines[0]
    between = (ram.training + ram.loading) // 2  # only the load is over: no word of the blocks
    line = ram_lines(check_start(cfg, device, machine_ram=between))[0]
    assert "while training" not in line and "blocks" not in line
    assert ram_lines(check_start(cfg, device, machine_ram=256 * GiB)) == []


def test_a_loading_peak_over_the_machines_ram_says_so(tmp_path):
    cfg = config(tmp_path)
    cfg.model.base = str(tmp_path / "sd_xl_base_1.0.safetensors")  # missing: an error too, the RAM line still comes
    line = ram_lines(check_start(cfg, fake_device("rtx3060"), machine_ram=8 * GiB))[0]
    assert "while the base model loads" in line and "diffusers folder rather than one checkpoint file" in line


def test_the_images_in_the_folders_are_counted_for_the_caches(tmp_path, monkeypatch):
    seen: list[int | None] = []
    real = system_ram.estimate_ram

    def spy(*args, **kw):
        seen.append(kw.get("images"))
        return real(*args, **kw)

    monkeypatch.setattr(system_ram, "estimate_ram", spy)
    check_start(config(tmp_path), fake_device("rtx3060"), machine_ram=256 * GiB)
    assert seen == [3]
