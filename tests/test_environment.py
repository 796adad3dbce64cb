"""First-run environment check: facts and fixes for fake machines and this real one."""

from __future__ import annotations

import dataclasses

from helpers import fake_device

from guitrainer.core.device import environment


def _levels(items):
    return {i.label: i.level for i in items}


def test_cpu_only_machine_says_training_is_slow(tmp_path):
    dev = fake_device("cpu")
    items = environment.check(dev, {"output": tmp_path})
    gpu = next(i for i in items if i.label == "GPU")
    assert gpu.level == "warning" and "CPU" in gpu.fix and "Demo" in gpu.fix


def test_cpu_torch_with_nvidia_driver_gives_install_command(tmp_path):
    dev = dataclasses.replace(fake_device("cpu"), nvidia_gpu_unused=True)
    items = environment.check(dev, {"output": tmp_path})
    torch_row = next(i for i in items if i.label == "PyTorch")
    assert torch_row.level == "error"
    assert "CPU-only" in torch_row.fix and "download.pytorch.org/whl/cu" in torch_row.fix


def test_card_missing_from_torch_build_is_an_error(tmp_path):
    ok = environment.check(fake_device("rtx5090"), {})
    assert environment.worst(ok) in ("ok", "info")
    bad_dev = fake_device("rtx5090_cu126")
    bad = environment.check(bad_dev, {})
    row = next(i for i in bad if i.label.startswith("GPU"))
    assert row.level == "error" and "sm_120" in row.fix and "torch==2.13.0+cu130" in row.fix


def test_small_card_and_low_disk_warn(tmp_path, monkeypatch):
    items = environment.check(fake_device("gtx1660"), {})
    assert next(i for i in items if i.label.startswith("GPU")).level == "warning"
    monkeypatch.setattr(environment, "free_disk", lambda p: 1024**3)
    items = environment.check(fake_device("rtx3060"), {"output": tmp_path})
    disk = next(i for i in items if i.label == "Free disk (output)")
    assert disk.level == "warning" and "1.0 GB" in disk.value


def test_missing_bitsandbytes_on_gpu_warns():
    dev = fake_device("rtx3060", bitsandbytes=False)
    row = next(i for i in environment.check(dev, {}) if i.label == "bitsandbytes")
    assert row.level == "warning" and "AdamW" in row.fix


def test_free_disk_of_missing_folder_uses_parent(tmp_path):
    assert environment.free_disk(tmp_path / "not" / "yet") == environment.free_disk(tmp_path)


def test_environment_dialog_on_this_machine(qtbot, tmp_path):
    from guitrainer.ui.window.environment_dialog import EnvironmentDialog

    dlg = EnvironmentDialog({"output": tmp_path}, first_run=True)
    qtbot.addWidget(dlg)
    with qtbot.waitSignal(dlg.checked, timeout=60000):
        dlg.show()
    labels = [dlg.table.item(r, 0).text() for r in range(dlg.table.rowCount())]
    assert "PyTorch" in labels and "bitsandbytes" in labels and "Free disk (output)" in labels
    assert "torch" in dlg.report_text().lower()


def test_environment_dialog_shows_and_clears_the_disk_cache(qtbot, tmp_path, monkeypatch, artifacts_dir):
    from guitrainer.base import paths
    from guitrainer.ui.window.environment_dialog import EnvironmentDialog

    cache = tmp_path / "cache"
    monkeypatch.setattr(paths, "cache_dir", lambda: cache)
    for kind, size in (("latents", 3 * 1024**2), ("text", 1024**2), ("thumbs", 2048)):
        f = cache / kind / "ab" / "entry.safetensors"
        f.parent.mkdir(parents=True)
        f.write_bytes(b"\0" * size)
    dlg = EnvironmentDialog({"output": tmp_path})
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitUntil(lambda: dlg.clear_cache_button.isEnabled(), timeout=10_000)
    text = dlg.cache_label.text()
    assert text.startswith("Disk cache: 4 MB") and "latents 3 MB" in text and "text embeddings 1 MB" in text
    assert str(cache) in text
    dlg.grab().save(str(artifacts_dir / "environment_dialog.png"))
    dlg.clear_cache(confirm=False)
    qtbot.waitUntil(lambda: dlg.cleared_text != "", timeout=10_000)
    assert dlg.cleared_text == "Removed 3 files, 4 MB."
    qtbot.waitUntil(lambda: dlg.cache_label.text().startswith("Disk cache: 0 MB"), timeout=10_000)
    assert not dlg.clear_cache_button.isEnabled()
    assert not any(cache.rglob("*.safetensors"))


def test_the_precision_facts_and_the_fixed_sdxl_vae(tmp_path, monkeypatch):
    """Ampere: bf16 in hardware and best; Turing T4: fp16 AMP (no bf16 hardware); Apple: no fp8 (MPS has no float8
    types); the fp16-fixed SDXL VAE is named where the Hugging Face cache holds it, else how to get it."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    rows = {i.label: i for i in environment.check(fake_device("rtx3060"), {})}
    assert rows["Precision"].value.startswith("best here: bf16 AMP; bf16 in hardware; fp8 base weights possible")
    t4 = {i.label: i for i in environment.check(fake_device("t4"), {})}["Precision"].value
    assert t4.startswith("best here: fp16 AMP") and "bf16 emulated" in t4
    assert "fp8 base weights not possible" in {i.label: i for i in environment.check(fake_device("m3"), {})}["Precision"].value
    vae = rows["SDXL fp16 VAE"]
    assert vae.level == "info" and "hf download madebyollin/sdxl-vae-fp16-fix" in vae.fix
    snap = tmp_path / "hf" / "hub" / "models--madebyollin--sdxl-vae-fp16-fix" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    rows = {i.label: i for i in environment.check(fake_device("rtx3060"), {})}
    assert rows["SDXL fp16 VAE"].level == "ok" and "in the Hugging Face cache" in rows["SDXL fp16 VAE"].value


def test_the_precision_row_follows_a_measurement_of_this_machine(tmp_path):
    """DESIGN §5: the lab measured fp32 fastest for the demo model on this AVX512-BF16 CPU, where the rules pick bf16
    AMP for a full-size model ([cpu] in tests/test_precision.py): the row says both, the measurement first."""
    from guitrainer.core.precision.lab import Candidate, CandidateResult, LabReport, device_key
    from guitrainer.core.precision.measurements import MeasurementStore

    dev = fake_device("cpu_bf16")
    store = MeasurementStore(tmp_path / "lab.json")
    rules_only = {i.label: i for i in environment.check(dev, {}, store)}["Precision"].value
    assert rules_only.startswith("best here: bf16 AMP for SD 1.5 / SDXL, fp32 for the demo model")

    def ran(t, s):
        return CandidateResult(Candidate(t), "ran", seconds_per_step=s, losses=(1.0,), loss_drift_relative=0.0)

    store.put(LabReport(device_key(dev), dev.name, "demo", 64, 2, 3, 1, (ran("fp32", 0.069), ran("bf16", 0.127)),
                        "2026-12-01T15:00:00+00:00"))
    measured = {i.label: i for i in environment.check(dev, {}, store)}["Precision"].value
    assert measured.startswith("best here: fp32 for demo at 64 px (measured 2026-12-01); the rules alone say bf16 AMP")
