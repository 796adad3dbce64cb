"""The precision lab's plain data, its store of measurements and its energy sources (no training here)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from guitrainer.config import TrainingConfig
from guitrainer.core.device.hardware import CpuInfo, DeviceInfo, GpuInfo, MpsInfo
from guitrainer.core.precision import advisor
from guitrainer.core.precision.lab import (
    Candidate,
    CandidateResult,
    LabReport,
    device_key,
    format_table,
)
from guitrainer.core.precision.lab_plan import plan
from guitrainer.core.precision.measurements import MeasurementStore, measured_recommendation

CPU = DeviceInfo(cpu=CpuInfo("Test CPU 9000", 8, bf16_native=False), torch_version="2.13.0")
OTHER_CPU = DeviceInfo(cpu=CpuInfo("Another CPU", 8, bf16_native=False), torch_version="2.13.0")


def _ran(training: str, s_per_step: float, drift: float = 0.0, base: str = "auto", **kw) -> CandidateResult:
    return CandidateResult(
        Candidate(training, base),
        "ran",
        seconds_per_step=s_per_step,
        images_per_second=2 / s_per_step,
        step_seconds=(s_per_step,) * 3,
        losses=(0.5,) * 4,
        peak_memory_bytes=kw.pop("memory", 1000),
        eval_loss=0.5 * (1 + drift),
        loss_drift=0.5 * drift,
        loss_drift_relative=drift,
        **kw,
    )


def report_for(device: DeviceInfo, *results: CandidateResult, resolution: int = 512, family: str = "sd15") -> LabReport:
    return LabReport(
        device_key=device_key(device),
        device_name=device.name,
        family=family,
        resolution=resolution,
        batch_size=1,
        steps=3,
        warmup_steps=1,
        results=tuple(results),
        measured_at="2026-12-01T15:00:00+00:00",
        total_seconds=30.0,
    )


def sd15_config(resolution: int = 512) -> TrainingConfig:
    cfg = TrainingConfig()
    cfg.model.family = "sd15"
    cfg.dataset.resolution = resolution
    return cfg


def test_recommendation_is_the_fastest_within_the_drift_limit():
    # fp16 is fastest (0.4 s) but its loss drifted 30 % from fp32: out. bf16 halves fp32's 1.0 s: 2x.
    r = report_for(CPU, _ran("fp32", 1.0), _ran("fp16", 0.4, 0.30, final_scale=1024.0), _ran("bf16", 0.5, 0.01))
    best = r.recommended()
    assert best is not None and best.candidate == Candidate("bf16")
    assert r.speedup(best) == pytest.approx(2.0)
    winners = r.winners()
    assert winners["seconds_per_step"] == Candidate("fp16")  # the column's winner is still marked
    assert winners["loss_drift"] == Candidate("bf16")  # fp32 is the reference, not a contender
    table = format_table(r)
    assert "bf16 AMP, measured 2026-12-01: 2.0x faster than fp32" in table
    assert "0.400 *" in table


def test_fp32_stays_when_nothing_is_faster():
    r = report_for(CPU, _ran("fp32", 0.10), _ran("bf16", 0.15, 0.001))
    best = r.recommended()
    assert best is not None and best.candidate == Candidate("fp32")
    assert "the fastest of the others, bf16 AMP, was 1.5x slower" in format_table(r)


def test_skipped_steps_rule_out_fp16():
    r = report_for(CPU, _ran("fp32", 1.0), _ran("fp16", 0.5, 0.0, skipped_steps=2, final_scale=0.5))
    assert r.recommended().candidate == Candidate("fp32")  # 2 of 4 steps skipped: over the 25 % limit


def test_round_trip_and_store_keys(tmp_path):
    store = MeasurementStore(tmp_path / "lab.json")
    r = report_for(CPU, _ran("fp32", 1.0), _ran("bf16", 0.5), CandidateResult(Candidate("fp16"), "not_run", reason="no"))
    key = store.put(r)
    assert key == f"{device_key(CPU)}::sd15::512"
    data = json.loads(Path(store.path).read_text())
    assert data["version"] == 1 and key in data["measurements"]
    assert MeasurementStore(tmp_path / "lab.json").get(device_key(CPU), "sd15", 512) == r  # survives a restart
    # a newer measurement replaces the older one; another resolution is kept beside it
    store.put(replace(r, measured_at="2026-12-02T00:00:00+00:00"))
    store.put(replace(r, resolution=768))
    assert len(store.all()) == 2
    assert store.get(device_key(CPU), "sd15", 512).measured_at.startswith("2026-12-02")
    # no half-written temp files left beside it
    assert [p.name for p in tmp_path.iterdir()] == ["lab.json"]


def test_cancelled_or_empty_reports_are_not_kept(tmp_path):
    store = MeasurementStore(tmp_path / "lab.json")
    store.put(replace(report_for(CPU, _ran("fp32", 1.0)), cancelled=True))
    store.put(report_for(CPU, CandidateResult(Candidate("fp32"), "does_not_fit", reason="does not fit")))
    assert not (tmp_path / "lab.json").exists()


def test_a_measurement_changes_the_recommendation_only_for_its_device(tmp_path):
    store = MeasurementStore(tmp_path / "lab.json")
    cfg = sd15_config()
    assert measured_recommendation(CPU, cfg, store) is None
    store.put(report_for(CPU, _ran("fp32", 1.0), _ran("bf16", 0.5, 0.01)))
    rec = measured_recommendation(CPU, cfg, store)
    assert rec is not None and rec.training == "bf16" and rec.speedup == pytest.approx(2.0)
    assert rec.text.startswith("bf16 AMP, measured 2026-12-01")
    assert measured_recommendation(OTHER_CPU, cfg, store) is None  # another device: no measurement
    sdxl = sd15_config()
    sdxl.model.family = "sdxl"
    assert measured_recommendation(CPU, sdxl, store) is None  # another model family
    near = measured_recommendation(CPU, sd15_config(768), store)  # another resolution: the nearest, said so
    assert near is not None and near.text.endswith("(at 512 px)")


def test_a_broken_store_file_is_not_fatal(tmp_path):
    path = tmp_path / "lab.json"
    path.write_text("{not json")
    store = MeasurementStore(path)
    assert store.all() == {}
    store.put(report_for(CPU, _ran("fp32", 1.0)))
    assert len(store.all()) == 1


def test_plan_lists_what_the_device_cannot_run_with_the_rules_reason():
    # an M1 on macOS 13 with torch 2.4: bf16 needs macOS 14, fp16 AMP a newer torch (both rules say error)
    mac = DeviceInfo(
        cpu=CpuInfo("Apple M1", 8, bf16_native=False),
        mps=MpsInfo(True, macos_version="13.6", fp16_autocast=False, bf16=False),
        torch_version="2.4.0",
    )
    cfg = TrainingConfig()
    planned = dict(plan(mac, cfg, [Candidate("bf16"), Candidate("fp16"), Candidate("fp16", "fp8")]))
    assert list(planned)[0] == Candidate("fp32")  # the reference always runs, first
    assert planned[Candidate("fp32")] == ""
    for training in ("bf16", "fp16"):
        trial = cfg.copy()
        trial.precision.training = training
        errors = [a.message for a in advisor.advise(mac, trial) if a.level == "error" and a.topic == "precision.training"]
        assert errors and planned[Candidate(training)] == errors[0]  # the rule's own words
    assert "macOS 14" in planned[Candidate("bf16")] and "PyTorch" in planned[Candidate("fp16")]
    assert "fp8" in planned[Candidate("fp16", "fp8")]
    pascal = DeviceInfo(
        cpu=CpuInfo("x", 4),
        gpus=(GpuInfo(0, "NVIDIA GeForce GTX 1080", (6, 1), 8 * 2**30, bf16_native=False, tensor_cores=False),),
        torch_version="2.13.0",
        cuda_version="12.6",
    )
    assert "bf16" in dict(plan(pascal, TrainingConfig(), [Candidate("bf16")]))[Candidate("bf16")]
    assert device_key(pascal) == "cuda|NVIDIA GeForce GTX 1080|6.1|8GiB"


def test_rapl_counter_wraps_and_says_where_it_comes_from(tmp_path):
    pytest.importorskip("torch")
    import torch

    from guitrainer.engine.lab.meters import RaplEnergy, energy_meter

    zone = tmp_path / "intel-rapl:0"
    sub = tmp_path / "intel-rapl:0:0"  # a sub-zone: inside its package, not counted twice
    for z in (zone, sub):
        z.mkdir()
        (z / "max_energy_range_uj").write_text("1000000\n")
        (z / "energy_uj").write_text("900000\n")
    meter = energy_meter(torch.device("cpu"), rapl_root=tmp_path)
    assert isinstance(meter, RaplEnergy) and len(meter.zones) == 1
    assert "RAPL" in meter.source
    start = meter.read()
    (zone / "energy_uj").write_text("100000\n")  # wrapped: 900000 -> 1000000 -> 100000 is 0.2 J
    assert meter.read() - start == pytest.approx(0.2)
    empty = energy_meter(torch.device("cpu"), rapl_root=tmp_path / "none")
    assert empty.read() is None and empty.source == "not available here"


def test_recommended_here_follows_a_measurement_else_the_rules(tmp_path):
    from guitrainer.core.precision.measurements import recommended_here
    from guitrainer.core.precision.rules import recommended_training

    store = MeasurementStore(tmp_path / "lab.json")
    cfg = sd15_config()
    assert recommended_here(None, cfg, store) is None
    rule = recommended_here(CPU, cfg, store)
    assert rule.training == recommended_training(CPU) and rule.measured is None
    # measured: bf16 twice as fast here, though the rules (no native bf16 on this CPU) say otherwise
    assert recommended_training(CPU) != "bf16"
    store.put(report_for(CPU, _ran("fp32", 1.0), _ran("bf16", 0.5, 0.01)))
    measured = recommended_here(CPU, cfg, store)
    assert measured.training == "bf16" and measured.note == "recommended here (measured)"
    assert "measured 2026-12-01: 2.0x faster than fp32" in measured.reason
    other = recommended_here(OTHER_CPU, cfg, store)
    assert other.training == recommended_training(OTHER_CPU) and other.measured is None


class FakeNvml:
    """nvidia-ml-py's calls the meter makes, with a counter the test advances."""

    def __init__(self, energy_counter: bool = True):
        self.mj, self.mw, self.energy_counter, self.shut = 1_000_000, 250_000, energy_counter, False

    def nvmlInit(self):  # noqa: N802 - NVML's names
        pass

    def nvmlShutdown(self):  # noqa: N802
        self.shut = True

    def nvmlDeviceGetHandleByPciBusId(self, bus):  # noqa: N802
        return ("bus", bus)

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return ("index", i)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802
        if not self.energy_counter:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.mj

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
        return self.mw


def _fake_cuda(monkeypatch, nvml: FakeNvml) -> None:
    import sys
    from types import SimpleNamespace

    import torch

    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(pci_bus_id="0000:3b:00.0"))
    monkeypatch.setattr(torch.version, "hip", None)


def test_nvml_energy_counter(monkeypatch):
    import torch

    from guitrainer.engine.lab.meters import NvmlEnergy, energy_meter

    nvml = FakeNvml()
    _fake_cuda(monkeypatch, nvml)
    meter = energy_meter(torch.device("cuda", 0))
    assert isinstance(meter, NvmlEnergy) and "NVML total energy counter" in meter.source
    assert meter.handle == ("bus", "0000:3b:00.0")  # found by PCI bus id, not by a possibly remapped index
    start = meter.read()
    nvml.mj += 12_500  # 12.5 J later
    assert meter.read() - start == pytest.approx(12.5)
    meter.close()
    assert nvml.shut


def test_nvml_without_energy_counter_integrates_power_samples(monkeypatch):
    """Energy = sum of power x time between samples, on a clock the test controls (each reading 50 ms
    after the last, not the sampler's 20 ms: the time between samples is measured, not assumed), so the
    sum is exact: a count of samples, not a wait on the real clock."""
    import time
    from types import SimpleNamespace

    import torch

    from guitrainer.engine.lab import meters
    from guitrainer.engine.lab.meters import NvmlPowerSamples, energy_meter

    readings: list[float] = []

    def clock() -> float:  # each reading 50 ms after the one before
        readings.append(0.05 * len(readings))
        return readings[-1]

    monkeypatch.setattr(meters, "time", SimpleNamespace(perf_counter=clock))
    nvml = FakeNvml(energy_counter=False)  # 250 W (250,000 mW) at every sample
    _fake_cuda(monkeypatch, nvml)
    meter = energy_meter(torch.device("cuda", 0))
    assert isinstance(meter, NvmlPowerSamples) and "power samples" in meter.source
    deadline = time.monotonic() + 30  # a hang guard only: the sampler wakes every 20 ms of real time
    while len(readings) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    meter.close()
    assert not meter._thread.is_alive() and len(readings) >= 6
    # the sampler reads the clock once before its first sample and once per sample, each sample adding
    # 250 W x 0.05 s = 12.5 J
    assert meter.read() == pytest.approx(12.5 * (len(readings) - 1))
