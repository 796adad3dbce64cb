"""The precision lab on the demo model (CPU): same inputs per candidate, out of memory, cancel, the table."""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref
from pathlib import Path

import pytest
import torch

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
from guitrainer.core.events import Control
from guitrainer.core.precision.lab import Candidate, LabProgress, all_candidates, format_table
from guitrainer.core.precision.measurements import MeasurementStore
from guitrainer.engine import data as D
from guitrainer.engine.lab.precision_lab import compare_precisions, engine_supports_fp8, trainer_model
from guitrainer.engine.network import lora as L
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here runs the precision lab's training steps

THREE = [Candidate("fp32"), Candidate("fp16"), Candidate("bf16")]


def demo_config() -> TrainingConfig:
    cfg = PresetStore().get(DEFAULT_PRESET).config()
    assert cfg.model.base == "demo"
    return cfg


class Recorder:
    """A trainer factory that remembers, per candidate, the LoRA weights just before the first step,
    the dataset positions of every training batch, and a weak reference to the trained UNet."""

    def __init__(self, force_fp32: bool = False, oom: str = "", slow: str = ""):
        self.force_fp32, self.oom, self.slow = force_fp32, oom, slow
        self.initial: dict[str, dict[str, torch.Tensor]] = {}
        self.batches: dict[str, list[tuple[int, ...]]] = {}
        self.unets: list[weakref.ref] = []
        self.current = ""

    def __call__(self, cfg, reporter, control):
        name = cfg.precision.training
        if self.force_fp32:
            cfg.precision.training = "fp32"
        trainer = Trainer(cfg, _Spy(self, name, reporter), control)
        self.current = name
        self.batches[name] = []
        self.trainer = trainer
        return trainer


class _Spy:
    """Passes every call on to the lab's reporter; snapshots the LoRA while no step has run."""

    def __init__(self, rec: Recorder, name: str, inner):
        self.rec, self.name, self.inner, self.stepped = rec, name, inner, False

    def on_status(self, text):
        model = trainer_model(self.rec.trainer)
        if not self.stepped and model is not None and L.lora_layers(model.denoiser):
            self.rec.initial[self.name] = {k: v.clone() for k, v in L.kohya_state_dict(model.denoiser).items()}
            if not any(r() is model.denoiser for r in self.rec.unets):
                self.rec.unets.append(weakref.ref(model.denoiser))
        self.inner.on_status(text)

    def on_step(self, metrics):
        self.stepped = True
        if self.name == self.rec.oom and metrics.step == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (forced by the test)")
        if self.name == self.rec.slow:  # as if each step had taken 1000 s
            metrics = dataclasses.replace(metrics, seconds_per_step=1000.0)
        self.inner.on_step(metrics)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def record_batches(monkeypatch):
    """Every training batch's dataset indices, per candidate (evaluation batches are not training batches)."""
    holder: dict[str, Recorder] = {}
    real = D.collate

    def collate(samples):
        batch = real(samples)
        rec = holder.get("rec")
        if rec is not None and rec.current:
            rec.batches[rec.current].append(tuple(batch["indices"]))
        return batch

    monkeypatch.setattr(D, "collate", collate)
    return holder


@pytest.fixture
def lab_tmp(tmp_path, monkeypatch):
    """The lab's temporary folders go under tmp_path (to check they are removed)."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_three_candidates_start_from_the_same_weights_and_batches(tmp_path, record_batches, lab_tmp):
    rec = Recorder()
    record_batches["rec"] = rec
    store = MeasurementStore(tmp_path / "lab.json")
    progress: list[LabProgress] = []
    report = compare_precisions(
        demo_config(), THREE, steps=3, warmup=1, trainer_factory=rec, store=store, progress=progress.append
    )
    by = {r.candidate.training: r for r in report.results}
    assert [r.status for r in report.results] == ["ran", "ran", "ran"], [r.reason for r in report.results]
    # the same LoRA initialisation, bit for bit (without sharing it, bf16 and fp16 would start from
    # their own init rounded to 16 bits) ...
    ref = rec.initial["fp32"]
    assert ref and any(float(t.abs().sum()) > 0 for k, t in ref.items() if "lora_down" in k)
    for name in ("fp16", "bf16"):
        assert rec.initial[name].keys() == ref.keys()
        for key, tensor in ref.items():
            assert torch.equal(rec.initial[name][key], tensor), (name, key)
    # ... the same batches (4 steps of 2 images) ...
    assert len(rec.batches["fp32"]) >= 4
    assert rec.batches["fp16"][:4] == rec.batches["bf16"][:4] == rec.batches["fp32"][:4]
    # ... so the first losses differ only by rounding: bf16 keeps 8 bits of mantissa (~0.4 %)
    first = by["fp32"].first_loss
    for name in ("fp16", "bf16"):
        assert by[name].first_loss == pytest.approx(first, rel=0.01)
    # timing excludes the warm-up step; the fp16 row has the scaler's numbers, the others none
    for r in report.results:
        assert len(r.step_seconds) == 3 and len(r.losses) == 4
        assert r.seconds_per_step == sorted(r.step_seconds)[1]
        assert r.images_per_second == pytest.approx(demo_config().schedule.batch_size / r.seconds_per_step)
        assert r.peak_memory_bytes is not None and "RSS" in r.memory_source
        assert r.energy_source and (r.energy_per_image_j is None) == (r.energy_source == "not available here")
    assert by["fp16"].final_scale is not None and by["fp16"].skipped_steps >= 0
    assert by["fp32"].final_scale is None and by["bf16"].final_scale is None
    assert by["fp32"].loss_drift == 0.0
    assert abs(by["bf16"].loss_drift_relative) < 0.05
    # progress went through every candidate, ending at the last step of the last one
    assert {p.candidate.training for p in progress} == {"fp32", "fp16", "bf16"}
    assert max(p.fraction for p in progress) == pytest.approx(1.0)
    assert report.overhead is not None and report.overhead > 1.0
    assert store.get(report.device_key, "demo", 64) == report  # kept for the picker
    assert not list(lab_tmp.glob("guitrainer-lab-*"))  # the candidates' folders are gone
    text = format_table(report)
    assert "energy: not available here" in text or "energy: Linux RAPL" in text


def test_equal_precision_first_step_loss_identical(record_batches):
    """Every candidate forced to compute in fp32: same weights, batches and noise give the same losses."""
    rec = Recorder(force_fp32=True)
    record_batches["rec"] = rec
    report = compare_precisions(demo_config(), THREE, steps=2, warmup=1, trainer_factory=rec, store=MeasurementStore("/dev/null/x"))
    losses = [r.losses for r in report.results]
    assert all(r.ran for r in report.results)
    assert losses[0][0] == losses[1][0] == losses[2][0]
    assert losses[0] == losses[1] == losses[2]


def test_a_candidate_out_of_memory_is_reported_and_the_others_run(tmp_path):
    rec = Recorder(oom="fp16")  # fp16 runs second: fp32 before it, bf16 after it
    report = compare_precisions(demo_config(), THREE, steps=2, trainer_factory=rec, store=MeasurementStore(tmp_path / "s.json"))
    by = {r.candidate.training: r for r in report.results}
    assert by["fp16"].status == "does_not_fit"
    assert "does not fit" in by["fp16"].reason and "out of memory" in by["fp16"].reason
    assert by["fp32"].ran and by["bf16"].ran
    assert by["bf16"].seconds_per_step is not None
    del rec.trainer
    gc.collect()
    assert len(rec.unets) == 3 and all(r() is None for r in rec.unets)  # every candidate's model was freed
    assert "does not fit" in format_table(report)


def test_cancel_leaves_nothing_running_and_changes_no_setting(tmp_path, lab_tmp):
    cfg = demo_config()
    before = cfg.to_toml()
    threads = set(threading.enumerate())
    control = Control()
    seen: list[LabProgress] = []

    def progress(p: LabProgress) -> None:
        seen.append(p)
        if p.candidate.training == "fp16" and p.step == 1:
            control.request_stop()

    store = MeasurementStore(tmp_path / "s.json")
    report = compare_precisions(cfg, THREE, steps=3, control=control, progress=progress, store=store)
    statuses = {r.candidate.training: r.status for r in report.results}
    assert statuses == {"fp32": "ran", "fp16": "cancelled", "bf16": "cancelled"}
    assert report.cancelled
    assert max(p.step for p in seen if p.candidate.training == "fp16") <= 2  # stopped at the next step
    assert not any(p.candidate.training == "bf16" for p in seen)
    assert cfg.to_toml() == before
    # nothing the lab started still runs (tqdm's process-wide monitor, started by a library's first
    # progress bar, is not the lab's)
    left = [t for t in threading.enumerate() if t not in threads and t.name != "tqdm_monitor"]
    assert left == []
    assert not list(lab_tmp.glob("guitrainer-lab-*"))
    assert not Path(store.path).exists()  # a cancelled comparison is not kept


def test_fp8_candidates_run_or_say_why_not(tmp_path):
    cfg = demo_config()
    wanted = [Candidate("fp32"), Candidate("bf16", "fp8")]
    assert set(wanted) <= set(all_candidates())
    report = compare_precisions(cfg, wanted, steps=1, warmup=0, store=MeasurementStore(tmp_path / "s.json"))
    fp8 = report.result(Candidate("bf16", "fp8"))
    assert fp8 is not None
    if engine_supports_fp8() and fp8.ran:  # the trainer really stored float8 weights
        assert fp8.seconds_per_step is not None
    else:  # no setting, or a trainer that left the weights as they were: said so, not measured
        assert fp8.status == "not_run" and "fp8" in fp8.reason and fp8.seconds_per_step is None
        assert "not run: " in format_table(report)


def test_a_candidate_far_slower_than_fp32_is_stopped_after_its_first_step(tmp_path):
    rec = Recorder(slow="fp16")
    report = compare_precisions(demo_config(), THREE, steps=3, trainer_factory=rec, store=MeasurementStore(tmp_path / "s.json"))
    by = {r.candidate.training: r for r in report.results}
    assert by["fp16"].status == "too_slow" and len(by["fp16"].losses) == 1  # stopped after step 1 of 4
    assert "1000.0 s" in by["fp16"].reason and "fp32" in by["fp16"].reason
    assert by["bf16"].ran and len(by["bf16"].losses) == 4  # the next candidate runs in full
    assert not report.cancelled
    assert report.recommended().candidate != Candidate("fp16")
    assert "too slow to measure" in format_table(report)


def test_a_candidate_that_raises_is_reported_failed_and_the_others_run(tmp_path):
    """A bug in one precision path (an exception the trainer does not turn into a summary) is a row of
    the table, with the error named, not the end of the lab."""

    def factory(cfg, reporter, control):
        trainer = Trainer(cfg, reporter, control)
        if cfg.precision.training == "fp16":
            def broken():
                raise RuntimeError("expected scalar type Half but found Float8_e4m3fn")

            trainer.run = broken
        return trainer

    report = compare_precisions(demo_config(), THREE, steps=1, trainer_factory=factory, store=MeasurementStore(tmp_path / "s.json"))
    by = {r.candidate.training: r for r in report.results}
    assert by["fp16"].status == "failed" and by["fp16"].reason.startswith("RuntimeError: expected scalar type Half")
    assert by["fp32"].ran and by["bf16"].ran
