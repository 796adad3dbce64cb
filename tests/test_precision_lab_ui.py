"""The precision lab's window: measure in the background, cancel, the table and charts, "Use this" by click."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from guitrainer.config import TrainingConfig
from guitrainer.core.events import Control
from guitrainer.core.precision_lab import HEADERS, Candidate, CandidateResult, LabProgress, LabReport
from guitrainer.presets import DEFAULT_PRESET, PresetStore
from guitrainer.ui import workers
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.precision_lab import PrecisionLabDialog

THREE = [Candidate("fp32"), Candidate("fp16"), Candidate("bf16")]


def _result(training: str, s: float, drift: float, memory: int, **kw) -> CandidateResult:
    return CandidateResult(
        Candidate(training),
        "ran",
        seconds_per_step=s,
        images_per_second=1 / s,
        step_seconds=(s, s),
        losses=(1.0, 1.0, 1.0),
        peak_memory_bytes=memory,
        memory_source="a test",
        eval_loss=1.0 + drift,
        loss_drift=drift,
        loss_drift_relative=drift,
        **kw,
    )


def fake_report(cancelled: bool = False) -> LabReport:
    results = (
        _result("fp32", 0.30, 0.0, 3000),
        _result("fp16", 0.20, 0.02, 1000, final_scale=32768.0),  # fastest, lightest
        _result("bf16", 0.25, 0.01, 1500),  # smallest drift
    )
    return LabReport("cpu|test", "CPU: test", "demo", 64, 2, 2, 1, results, "2026-12-01T15:00:00+00:00", 3.0, cancelled=cancelled)


def fast_runner(config, candidates, steps, *, warmup, progress, control):
    for i, c in enumerate(candidates):
        for step in range(steps + warmup + 1):
            progress(LabProgress(i, len(candidates), c, step, steps + warmup, f"{c.label}: step {step}"))
    return fake_report()


def demo_binding() -> ConfigBinding:
    return ConfigBinding(PresetStore().get(DEFAULT_PRESET).config())


def test_measure_shows_table_charts_and_winners(qtbot):
    binding = demo_binding()
    dialog = PrecisionLabDialog(binding, runner=fast_runner, candidates=THREE, steps=2)
    qtbot.addWidget(dialog)
    dialog.show()
    with qtbot.waitSignal(dialog.measured, timeout=10_000):
        qtbot.mouseClick(dialog.measure_button, Qt.MouseButton.LeftButton)
    assert dialog.table.rowCount() == 3
    assert dialog.progress.value() == 1000
    texts = [[dialog.table.item(r, c).text() for c in (0, 2)] for r in range(3)]  # column 1: "Use this"
    assert texts[1][0] == "fp16 AMP" and texts[1][1].endswith("*")  # 0.20 s/step: the fastest row is marked
    assert not texts[0][1].endswith("*")
    charts = dialog.bars.charts()
    assert [w for _l, _v, w in charts["seconds_per_step"]] == [False, True, False]
    assert [w for _l, _v, w in charts["peak_memory_bytes"]] == [False, True, False]
    assert [w for _l, _v, w in charts["loss_drift"]] == [False, False, True]  # bf16 drifts least
    assert [v for _l, v, _w in charts["energy_per_image_j"]] == [None, None, None]
    assert "energy: not available here" in dialog.sources_label.text()
    # fp16 drifted 2 % (within the 10 % limit) and is fastest: 0.30 / 0.20 = 1.5x
    assert "fp16 AMP, measured 2026-12-01: 1.5x faster than fp32" in dialog.recommendation.text()
    dialog.bars.grab()  # paints without error


def test_use_this_sets_exactly_the_chosen_precision(qtbot):
    binding = demo_binding()
    dialog = PrecisionLabDialog(binding, runner=fast_runner, candidates=THREE, steps=1)
    qtbot.addWidget(dialog)
    dialog.show()
    with qtbot.waitSignal(dialog.measured, timeout=10_000):
        qtbot.mouseClick(dialog.measure_button, Qt.MouseButton.LeftButton)
    before = binding.config.to_dict()
    assert before["precision"]["training"] == "fp32"
    changed: list[str] = []
    binding.changed.connect(changed.append)
    button = dialog.use_button(Candidate("bf16"))
    assert button is not None and button.isEnabled()
    with qtbot.waitSignal(dialog.applied) as applied:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert applied.args == [Candidate("bf16")]
    after = binding.config.to_dict()
    assert after["precision"]["training"] == "bf16"
    after["precision"]["training"] = "fp32"
    assert after == before  # nothing else changed
    assert changed == ["precision.training"]


def test_cancel_leaves_nothing_running_and_changes_no_setting(qtbot):
    started = threading.Event()

    def slow_runner(config, candidates, steps, *, warmup, progress, control: Control):
        started.set()
        step = 0
        while not control.stop_requested:  # like the trainer: polls the control once per step
            step += 1
            progress(LabProgress(0, 3, Candidate("fp32"), step % 5, 5, "fp32"))
            control.wait_while_paused(0.01, timeout=0.01)
            threading.Event().wait(0.01)
        return fake_report(cancelled=True)

    binding = demo_binding()
    before = binding.config.to_toml()
    dialog = PrecisionLabDialog(binding, runner=slow_runner)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.mouseClick(dialog.measure_button, Qt.MouseButton.LeftButton)
    assert started.wait(10)
    assert dialog.running() and not dialog.measure_button.isEnabled()
    with qtbot.waitSignal(dialog.measured, timeout=10_000):
        qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: workers.live_threads() == 0, timeout=10_000)
    assert not dialog.running() and dialog.measure_button.isEnabled()
    assert dialog.status.text() == "Cancelled."
    assert binding.config.to_toml() == before


def test_a_real_measurement_on_the_demo_model_then_use_this(qtbot):
    binding = demo_binding()
    before = binding.config.to_dict()
    dialog = PrecisionLabDialog(binding, candidates=[Candidate("fp32"), Candidate("bf16")], steps=1)
    qtbot.addWidget(dialog)
    dialog.show()
    with qtbot.waitSignal(dialog.measured, timeout=120_000) as done:
        qtbot.mouseClick(dialog.measure_button, Qt.MouseButton.LeftButton)
    report: LabReport = done.args[0]
    assert [r.status for r in report.results] == ["ran", "ran"], [r.reason for r in report.results]
    assert binding.config.to_dict() == before  # measuring changed nothing
    qtbot.mouseClick(dialog.use_button(Candidate("bf16")), Qt.MouseButton.LeftButton)
    assert binding.config.precision.training == "bf16"
    qtbot.waitUntil(lambda: workers.live_threads() == 0, timeout=10_000)


def test_a_row_that_did_not_run_cannot_be_used(qtbot):
    binding = ConfigBinding(TrainingConfig())
    dialog = PrecisionLabDialog(binding)
    qtbot.addWidget(dialog)
    report = fake_report()
    report = LabReport(
        report.device_key, report.device_name, "demo", 64, 2, 2, 1,
        (*report.results, CandidateResult(Candidate("fp16", "fp8"), "not_run", reason="no fp8 here")),
        report.measured_at,
    )
    dialog.show_report(report)
    button = dialog.use_button(Candidate("fp16", "fp8"))
    assert button is not None and not button.isEnabled() and button.toolTip() == "no fp8 here"
    status_column = [c for c, _t in HEADERS].index("status") + 1  # after the "Use this" column
    assert dialog.table.item(3, status_column).text() == "not run: no fp8 here"
