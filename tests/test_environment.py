"""First-run environment check: facts and fixes for fake machines and this real one."""

from __future__ import annotations

import dataclasses

from guitrainer.core import environment, hardware


def _levels(items):
    return {i.label: i.level for i in items}


def test_cpu_only_machine_says_training_is_slow(tmp_path):
    dev = hardware.fake_device("cpu")
    items = environment.check(dev, {"output": tmp_path})
    gpu = next(i for i in items if i.label == "GPU")
    assert gpu.level == "warning" and "CPU" in gpu.fix and "Demo" in gpu.fix


def test_cpu_torch_with_nvidia_driver_gives_install_command(tmp_path):
    dev = dataclasses.replace(hardware.fake_device("cpu"), nvidia_gpu_unused=True)
    items = environment.check(dev, {"output": tmp_path})
    torch_row = next(i for i in items if i.label == "PyTorch")
    assert torch_row.level == "error"
    assert "CPU-only" in torch_row.fix and "download.pytorch.org/whl/cu" in torch_row.fix


def test_card_missing_from_torch_build_is_an_error(tmp_path):
    ok = environment.check(hardware.fake_device("rtx5090"), {})
    assert environment.worst(ok) in ("ok", "info")
    bad_dev = hardware.fake_device("rtx5090_no_sm120")
    bad = environment.check(bad_dev, {})
    row = next(i for i in bad if i.label.startswith("GPU"))
    assert row.level == "error" and "sm_120" in row.fix


def test_small_card_and_low_disk_warn(tmp_path, monkeypatch):
    items = environment.check(hardware.fake_device("gtx1660"), {})
    assert next(i for i in items if i.label.startswith("GPU")).level == "warning"
    monkeypatch.setattr(environment, "free_disk", lambda p: 1024**3)
    items = environment.check(hardware.fake_device("rtx3060"), {"output": tmp_path})
    disk = next(i for i in items if i.label == "Free disk (output)")
    assert disk.level == "warning" and "1.0 GB" in disk.value


def test_missing_bitsandbytes_on_gpu_warns():
    dev = hardware.fake_device("rtx3060", bitsandbytes=False)
    row = next(i for i in environment.check(dev, {}) if i.label == "bitsandbytes")
    assert row.level == "warning" and "AdamW" in row.fix


def test_free_disk_of_missing_folder_uses_parent(tmp_path):
    assert environment.free_disk(tmp_path / "not" / "yet") == environment.free_disk(tmp_path)


def test_environment_dialog_on_this_machine(qtbot, tmp_path):
    from guitrainer.ui.environment_dialog import EnvironmentDialog

    dlg = EnvironmentDialog({"output": tmp_path}, first_run=True)
    qtbot.addWidget(dlg)
    with qtbot.waitSignal(dlg.checked, timeout=60000):
        dlg.show()
    labels = [dlg.table.item(r, 0).text() for r in range(dlg.table.rowCount())]
    assert "PyTorch" in labels and "bitsandbytes" in labels and "Free disk (output)" in labels
    assert "torch" in dlg.report_text().lower()
