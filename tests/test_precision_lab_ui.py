"""The precision lab's window: measure in the background, cancel, the table and charts, "Use this" by click."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import Qt

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
from guitrainer.core.events import Control
from guitrainer.core.precision.lab import HEADERS, Candidate, CandidateResult, LabProgress, LabReport
from guitrainer.ui import workers
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.model.precision_lab import PrecisionLabDialog

THREE = [Candidate("fp32"), Candidate("fp16"), Candidate("bf16")]


@pytest.fixture(autouse=True)
def _no_measurements_left_behind():
    """The lab keeps what it measured in the (session-wide) user data folder: remove it after each test,
    so a measurement of this machine never steers another test's "recommended here"."""
    yield
    from guitrainer.base.paths import user_data_dir
    from guitrainer.core.precision.measurements import FILE_NAME

    (user_data_dir() / FILE_NAME).unlink(missing_ok=True)


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


@pytest.mark.slow
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


# --------------------------------------------------------------------------- wired into the Model & Precision page


def _page_with(qtbot, tmp_path, device):
    from PySide6.QtCore import QSettings

    from guitrainer.core.precision.measurements import MeasurementStore
    from guitrainer.ui.model.page import ModelPage

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    page = ModelPage(demo_binding(), settings=settings, probe=lambda: device, auto_probe=False)
    qtbot.addWidget(page)
    page.precision_picker.measurement_store = MeasurementStore(tmp_path / "lab.json")
    page.start_probe()
    qtbot.waitUntil(lambda: page.precision_picker.device() is not None, timeout=10_000)
    return page


def _measured_report(device, *, bf16_seconds: float) -> LabReport:
    """fp32 at 0.30 s/step; bf16 at ``bf16_seconds`` with a 1 % drift; demo model, 64 px, for ``device``."""
    from guitrainer.core.precision.lab import device_key

    results = (_result("fp32", 0.30, 0.0, 3000), _result("bf16", bf16_seconds, 0.01, 1500))
    return LabReport(device_key(device), device.name, "demo", 64, 2, 2, 1, results, "2026-12-01T15:00:00+00:00", 3.0)


def test_measuring_from_the_model_page_makes_the_picker_follow_the_measurement(qtbot, tmp_path):
    from helpers import fake_device

    device = fake_device("cpu")
    page = _page_with(qtbot, tmp_path, device)
    picker = page.precision_picker
    notes = picker.training_group.notes
    assert notes["fp32"].text() == "recommended here"  # the rules: a CPU without native bf16
    assert notes["bf16"].text() != "recommended here" and not picker.measured_label.isVisible()

    def runner(config, candidates, steps, *, warmup, progress, control):
        report = _measured_report(picker.device(), bf16_seconds=0.15)  # bf16 measured twice as fast
        picker.measurement_store.put(report)  # what the engine's lab does when it finishes
        return report

    page.lab_runner = runner
    page.show()
    qtbot.mouseClick(page.measure_button, Qt.MouseButton.LeftButton)
    dialog = page.lab_dialog
    assert dialog is not None and dialog.isVisible()
    with qtbot.waitSignal(dialog.measured, timeout=10_000):
        qtbot.mouseClick(dialog.measure_button, Qt.MouseButton.LeftButton)
    assert notes["bf16"].text() == "recommended here (measured)"
    assert notes["fp32"].text() != "recommended here"
    assert picker.measured_label.isVisible()
    assert "measured 2026-12-01: 2.0x faster than fp32" in picker.measured_label.text()
    assert "2.0x faster" in notes["bf16"].toolTip()
    assert page.binding.config.precision.training == "fp32"  # measuring changed no setting
    qtbot.mouseClick(dialog.use_button(Candidate("bf16")), Qt.MouseButton.LeftButton)
    assert page.binding.config.precision.training == "bf16"
    assert picker.training_group.buttons["bf16"].isChecked()  # the picker shows what "Use this" set


def test_a_measurement_for_another_device_leaves_the_picker_on_the_rules(qtbot, tmp_path):
    from helpers import fake_device

    device = fake_device("cpu")
    other = fake_device("rtx3060")  # another machine's measurement (an RTX 3060 where bf16 is 3x faster)
    from guitrainer.core.precision.measurements import MeasurementStore

    MeasurementStore(tmp_path / "lab.json").put(_measured_report(other, bf16_seconds=0.10))
    page = _page_with(qtbot, tmp_path, device)
    notes = page.precision_picker.training_group.notes
    assert notes["fp32"].text() == "recommended here" and notes["bf16"].text() != "recommended here (measured)"
    assert not page.precision_picker.measured_label.isVisible()
    # the same measurement for this device does change it, once the picker is told
    page.precision_picker.measurement_store.put(_measured_report(device, bf16_seconds=0.10))
    page.precision_picker.measurements_changed()
    assert notes["bf16"].text() == "recommended here (measured)"


def test_the_bar_charts_name_each_candidate_apart():
    """The fp8 rows read "fp32 / fp16 AMP / bf16 AMP" like the others, so each chart named them twice."""
    from guitrainer.core.precision.lab import Candidate
    from guitrainer.ui.model.precision_lab import short_label

    labels = [Candidate(t, b).label for t in ("fp32", "fp16", "bf16") for b in ("auto", "fp8")]
    shorts = [short_label(x) for x in labels]
    assert len(set(shorts)) == len(labels) and "fp16 + fp8" in shorts and all(len(x) <= 10 for x in shorts)


def test_six_candidates_with_a_long_status_need_no_sideways_scrolling(qtbot):
    """The status column stretches and elides (the whole message in its tooltip): the tester had to scroll to it."""
    from dataclasses import replace

    base = fake_report()
    failed = CandidateResult(Candidate("fp16", "fp8"), "failed",
                             reason="RuntimeError: expected scalar type Half but found Float8_e4m3fn " * 3)
    extra = tuple(replace(r, candidate=Candidate(r.candidate.training, "fp8")) for r in base.results[::2])
    report = replace(base, results=base.results + extra + (failed,))
    dialog = PrecisionLabDialog(demo_binding(), runner=fast_runner)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.show_report(report)
    qtbot.wait(20)
    assert dialog.table.rowCount() == 6
    assert dialog.table.horizontalScrollBar().maximum() == 0
    status = dialog.table.item(5, len(HEADERS))
    assert "Float8_e4m3fn" in status.toolTip()


def test_the_lab_window_has_a_close_button_that_cancels_a_running_measurement(qtbot):
    from PySide6.QtWidgets import QDialogButtonBox

    dialog = PrecisionLabDialog(demo_binding(), runner=fast_runner)
    qtbot.addWidget(dialog)
    dialog.show()
    box = dialog.findChild(QDialogButtonBox)
    close = box.button(QDialogButtonBox.StandardButton.Close)
    assert close is not None and close.isVisible()
    cancelled = []
    dialog.cancel = lambda: cancelled.append(True)  # type: ignore[method-assign]
    qtbot.mouseClick(close, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible() and cancelled
