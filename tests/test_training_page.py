"""Training page, charts, log panel and sample gallery; the real engine on the tiny demo model."""

from __future__ import annotations

import csv
import logging
import math
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import fake_device
from helpers.doubles import FakeTrainer, fake_factory
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QLabel, QMessageBox

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import DEMO_PRESET, PresetStore
from guitrainer.core.checks.start import check_start
from guitrainer.core.device import hardware
from guitrainer.core.events import RunSummary, SampleImage, StepMetrics
from guitrainer.core.runs.state import find_state
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.output.page import OutputPage
from guitrainer.ui.training.page import TrainingPage, TrainState

DEMO = DEMO_PRESET


def demo_config(tmp_path: Path, **schedule) -> TrainingConfig:
    cfg = PresetStore().get(DEMO).config()
    cfg.output.folder = str(tmp_path / "out")
    for k, v in schedule.items():
        setattr(cfg.schedule, k, v)
    return cfg


def make_dataset(folder: Path, n: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        img = QImage(64, 64, QImage.Format.Format_RGB32)
        img.fill(QColor.fromHsv(i * 40, 200, 220))
        img.save(str(folder / f"img{i}.png"))
        (folder / f"img{i}.txt").write_text("a colored square")
    return folder


@pytest.fixture(autouse=True)
def _reset_fakes():
    FakeTrainer.instances.clear()
    yield


@pytest.fixture
def cpu_device(monkeypatch):
    """A known CPU machine, so no test waits for the real device probe (it imports bitsandbytes: seconds)."""
    dev = fake_device("cpu")
    monkeypatch.setattr(hardware, "cached", lambda: dev)
    return dev


@pytest.fixture
def make_page(qtbot, tmp_path, cpu_device):
    pages: list[TrainingPage] = []

    def make(cfg: TrainingConfig | None = None, factory=None) -> TrainingPage:
        binding = ConfigBinding(cfg or demo_config(tmp_path))
        page = TrainingPage(binding, trainer_factory=factory)
        qtbot.addWidget(page)
        page.resize(1360, 900)
        page.show()
        qtbot.waitExposed(page)
        pages.append(page)
        return page

    yield make
    for page in pages:  # never leave a training thread behind
        if page.is_active:
            page.stop()
            page.wait_until_idle(120)


def click_train(qtbot, page: TrainingPage) -> None:
    assert page.train_button.isEnabled()
    qtbot.mouseClick(page.train_button, Qt.MouseButton.LeftButton)


# --------------------------------------------------------------------------- charts


def metrics(step: int, *, epoch: int = 1, loss: float = 1.0, scale: float | None = None, skipped: bool = False,
            class_loss: float | None = None) -> StepMetrics:
    return StepMetrics(step=step, total_steps=10_000, epoch=epoch, loss=loss, lr=1e-4 * step, grad_scale=scale,
                       skipped=skipped, seconds_per_step=0.1, images_per_second=10.0, class_loss=class_loss)


def test_charts_buffer_ema_epochs_skips_and_export(qtbot, tmp_path):
    from guitrainer.ui.training.charts import COLUMNS, TrainingCharts, ema

    charts = TrainingCharts(smoothing=0.5)
    qtbot.addWidget(charts)
    charts.resize(900, 600)
    charts.show()
    rng = np.random.default_rng(0)
    losses = rng.uniform(0.5, 1.5, 3000)
    losses[10] = math.inf  # an overflowed step must not poison the smoothed curve
    for i, loss in enumerate(losses, 1):
        skipped = i in (5, 777)
        charts.add(metrics(i, epoch=1 + (i - 1) // 1000, loss=float(loss), scale=2.0 ** (16 - (i in (5, 777))),
                           skipped=skipped, class_loss=0.3 if i % 2 else None))
    assert len(charts) == 3000
    assert charts.buffer.capacity == 4096  # 1024 -> 2048 -> 4096 by doubling
    assert charts.epoch_boundaries == [1000.5, 2000.5]
    assert charts.skipped_steps == [5, 777]
    smoothed = charts.series("loss_ema")
    assert np.all(np.isfinite(smoothed))
    np.testing.assert_allclose(smoothed, ema(losses, 0.5))
    # reference debiased EMA by hand for the first points
    assert smoothed[0] == pytest.approx(losses[0])
    assert smoothed[1] == pytest.approx((0.5 * 0.5 * losses[0] + 0.5 * losses[1]) / (1 - 0.25))
    # redraw happens on the timer, and pushes the buffers into the curves
    with qtbot.waitSignal(charts.redrawn, timeout=2000):
        pass
    assert len(charts.loss_curve.xData) == 3000 and len(charts.ema_curve.yData) == 3000  # the curves' full data
    assert charts.class_curve is not None  # class loss appeared: its own series
    assert len(charts._epoch_lines) == 2 * 4  # a boundary line in each of the four plots
    assert list(charts.skip_markers.xData) == [5, 777]
    assert list(charts.skip_markers.yData) == [2.0**15, 2.0**15]
    # smoothing change recomputes the whole curve
    charts.smoothing_slider.setValue(90)
    assert charts.smoothing == pytest.approx(0.9)
    with qtbot.waitSignal(charts.redrawn, timeout=2000):
        pass
    np.testing.assert_allclose(charts.series("loss_ema"), ema(losses, 0.9))
    # CSV: every series
    path = tmp_path / "m.csv"
    assert charts.export_csv(path) == 3000
    rows = list(csv.DictReader(path.open()))
    assert tuple(rows[0]) == COLUMNS and len(rows) == 3000
    assert rows[4]["skipped"] == "1" and rows[3]["skipped"] == "0"
    assert float(rows[4]["grad_scale"]) == 32768.0
    assert rows[1]["class_loss"] == "" and float(rows[0]["class_loss"]) == 0.3
    assert rows[10]["loss"] == ""  # inf written as an empty cell
    png = tmp_path / "c.png"
    assert charts.export_png(png)
    img = QImage(str(png))
    assert img.width() > 400 and img.height() > 300
    charts.clear()
    assert len(charts) == 0 and charts.epoch_boundaries == [] and charts.class_curve is None


def test_charts_hide_scaler_with_a_note(qtbot):
    from guitrainer.ui.training.charts import NO_SCALER_TEXT, TrainingCharts

    charts = TrainingCharts()
    qtbot.addWidget(charts)
    charts.show()
    charts.set_scaler_visible(False)
    assert not charts.scale_widget.isVisible()
    assert charts.no_scaler_note.isVisible() and NO_SCALER_TEXT in charts.no_scaler_note.text()
    charts.add(metrics(1, scale=None))
    assert not charts.scaler_visible
    charts.add(metrics(2, scale=1024.0))  # data with a scale brings the plot back
    assert charts.scaler_visible and charts.scale_widget.isVisible()
    assert charts.scale_plot.ctrl.logYCheck.isChecked()  # log axis


# --------------------------------------------------------------------------- log panel and gallery


def test_log_panel_takes_records_from_other_threads(qtbot):
    from guitrainer.ui.training.log_panel import LogPanel

    panel = LogPanel()
    qtbot.addWidget(panel)
    panel.attach("guitrainer")
    logger = logging.getLogger("guitrainer.engine.fake")
    t = threading.Thread(target=lambda: (logger.info("hello from the trainer"), logger.warning("careful")))
    t.start()
    t.join()
    qtbot.waitUntil(lambda: "careful" in panel.text(), timeout=2000)
    assert "hello from the trainer" in panel.text()
    panel.detach()
    logger.warning("after detach")
    qtbot.wait(50)
    assert "after detach" not in panel.text()
    assert panel.handler not in logging.getLogger("guitrainer").handlers


def test_gallery_newest_first_and_enlarges(qtbot, tmp_path):
    from guitrainer.ui.training.sample_gallery import SampleGallery

    gallery = SampleGallery()
    qtbot.addWidget(gallery)
    gallery.show()
    for step, color in ((10, "red"), (20, "blue")):
        img = QImage(64, 64, QImage.Format.Format_RGB32)
        img.fill(QColor(color))
        path = tmp_path / f"s{step}.png"
        img.save(str(path))
        gallery.add_sample(SampleImage(path=str(path), prompt=f"a {color} circle", step=step))
    assert [s.step for s in gallery.samples()] == [20, 10]
    rect = gallery.visualItemRect(gallery.item(1))
    qtbot.mouseClick(gallery.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    dialog = gallery.dialog
    assert dialog is not None and dialog.isVisible()
    assert "Step 10" in dialog.caption.text() and "a red circle" in dialog.caption.text()
    assert dialog.image.pixmap().width() >= 256  # enlarged
    dialog.close()


# --------------------------------------------------------------------------- page with a fake trainer


def test_page_runs_a_fake_trainer_and_buttons_follow_the_state(qtbot, make_page):
    page = make_page(factory=fake_factory(steps=100_000, delay=0.005))
    before = page.binding.config.to_dict()
    assert page.state == TrainState.IDLE
    assert not page.stop_button.isEnabled() and not page.pause_button.isEnabled()
    qtbot.waitUntil(lambda: page._charts is not None, timeout=5000)  # charts built right after the page shows
    click_train(qtbot, page)
    assert page.state == TrainState.RUNNING
    assert not page.train_button.isEnabled() and page.stop_button.isEnabled() and page.save_button.isEnabled()
    assert not page.settings_panel.isEnabled()
    qtbot.waitUntil(lambda: len(page.charts) >= 5, timeout=5000)
    qtbot.waitUntil(lambda: "step" in page.progress_bar.text(), timeout=2000)
    assert "ETA" in page.progress_label.text() and "img/s" in page.progress_label.text()
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    assert page.state == TrainState.PAUSED and page.pause_button.text() == "Resume"
    assert page.save_button.isEnabled() and not page.sample_button.isEnabled()  # Save now works while paused
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    assert page.state == TrainState.RUNNING
    with qtbot.waitSignal(page.run_finished, timeout=5000) as blocker:
        qtbot.mouseClick(page.stop_button, Qt.MouseButton.LeftButton)
        assert page.state == TrainState.STOPPING
    assert blocker.args[0].status == "stopped"
    assert page.state == TrainState.STOPPED and page.state_badge.text() == "Stopped"  # not "Done"
    assert page.train_button.isEnabled() and page.settings_panel.isEnabled()
    assert "Stopped at step" in page.status_label.text()
    assert page.warning_label.isVisible() and "fake warning" in page.warning_label.text()
    assert page.binding.config.to_dict() == before  # the run used a copy


def test_exception_in_trainer_shows_error_dialog_and_page_recovers(qtbot, make_page):
    page = make_page(factory=fake_factory(steps=10, fail_at=2))
    before = page.binding.config.to_dict()
    with qtbot.waitSignal(page.run_failed, timeout=5000):
        click_train(qtbot, page)
    box = page.findChild(QMessageBox, "training_error_box")
    assert box is not None and box.isVisible()
    assert box.text() == "fake failure at step 2"
    assert "ValueError" in box.detailedText() and "Traceback" in box.detailedText()
    assert any("Show Details" in b.text() for b in box.buttons())
    box.button(QMessageBox.StandardButton.Ok).click()
    assert page.state == TrainState.FAILED
    assert page.train_button.isEnabled() and not page.stop_button.isEnabled()
    assert page.binding.config.to_dict() == before
    # usable again: the next run works
    page.trainer_factory = fake_factory(steps=3)
    with qtbot.waitSignal(page.run_finished, timeout=5000) as blocker:
        click_train(qtbot, page)
    assert blocker.args[0].status == "finished" and page.state == TrainState.FINISHED


def test_failed_summary_shows_message_and_advice(qtbot, make_page):
    class OutOfMemory:
        def run(self):
            return RunSummary("failed", 0, 0, None, message="out of memory at step 1", advice=("lower the batch size",))

    page = make_page(factory=lambda c, r, k: OutOfMemory())
    with qtbot.waitSignal(page.run_finished, timeout=5000):
        click_train(qtbot, page)
    box = page.error_box
    assert box is not None and box.isVisible()
    assert "out of memory" in box.text() and "lower the batch size" in box.informativeText()
    box.close()
    assert page.state == TrainState.FAILED and page.train_button.isEnabled()


def test_failed_summary_details_go_under_show_details(qtbot, make_page):
    trace = "Traceback (most recent call last):\n  File \"trainer.py\", line 1\ntorch.OutOfMemoryError: CUDA out of memory"

    class OutOfMemory:
        def run(self):
            return RunSummary("failed", 3, 1, None, message="out of memory at step 3", details=trace)

    page = make_page(factory=lambda c, r, k: OutOfMemory())
    with qtbot.waitSignal(page.run_finished, timeout=5000):
        click_train(qtbot, page)
    box = page.error_box
    assert box is not None and box.isVisible()
    assert box.detailedText() == trace
    assert any("Show Details" in b.text() for b in box.buttons())
    box.close()


def test_failed_summary_without_details_shows_the_log_tail(qtbot, make_page):
    class WriteError:
        def run(self):
            log = logging.getLogger("guitrainer.engine.fake")
            for i in range(60):
                log.info("fake step %d", i)
            log.error("cannot write the LoRA: disk full")
            return RunSummary("failed", 60, 1, None, message="cannot write the LoRA")

    page = make_page(factory=lambda c, r, k: WriteError())
    page.log_panel.append("an earlier line")
    with qtbot.waitSignal(page.run_finished, timeout=5000):
        click_train(qtbot, page)
    details = page.error_box.detailedText()
    lines = details.splitlines()
    assert lines[0] == "The last 40 lines of the log:"
    assert lines[-1].endswith("cannot write the LoRA: disk full") and "fake step 59" in lines[-2]
    assert len(lines) == 2 + 40 and "fake step 20" not in details and "an earlier line" not in details
    assert page.log_panel.text().endswith(lines[-1])  # the same text the log panel shows
    page.error_box.close()


def test_start_without_device_logs_cpu_precision_advice(qtbot, make_page, monkeypatch):
    """A failed device probe still gets the precision advice, against an assumed CPU (no torch import)."""
    monkeypatch.setattr(hardware, "cached", lambda: None)

    def failing_probe(*a, **k):
        raise RuntimeError("probe crashed")

    monkeypatch.setattr(hardware, "probe", failing_probe)
    page = make_page(factory=fake_factory(steps=2))
    page.binding.set("precision.training", "fp16")
    with qtbot.waitSignal(page.run_finished, timeout=10000):
        click_train(qtbot, page)
    assert "fp16 on the CPU" in page.log_panel.text() and "CPU is assumed" in page.log_panel.text()


def test_start_checks_list_problems_in_plain_words(qtbot, make_page, tmp_path):
    cfg = demo_config(tmp_path)
    cfg.model.base = str(tmp_path / "no" / "model.safetensors")
    page = make_page(cfg, factory=fake_factory())
    click_train(qtbot, page)
    box = page.findChild(QMessageBox, "start_problems_box")
    assert box is not None and box.isVisible()
    assert "model.safetensors" in box.informativeText() and "was not found" in box.informativeText()
    box.close()
    assert page.state == TrainState.IDLE and page.train_button.isEnabled()
    assert FakeTrainer.instances == []  # nothing ran

    cfg2 = demo_config(tmp_path)
    cfg2.model.base = "someone/some-model"  # a hub id is fine, but then images are needed
    assert check_start(cfg2).errors == ["No training images: add an image folder on the Dataset page."]
    cfg2.set("dataset.folders", [str(tmp_path / "missing")])
    assert check_start(cfg2).errors == [f"The image folder “{tmp_path / 'missing'}” does not exist."]
    (tmp_path / "empty").mkdir()
    cfg2.set("dataset.folders", [str(tmp_path / "empty")])
    assert "holds no images" in check_start(cfg2).errors[0]
    cfg2.set("dataset.folders", [str(make_dataset(tmp_path / "10_images"))])
    assert check_start(cfg2).ok
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg3 = demo_config(tmp_path)
    cfg3.output.folder = str(blocker / "sub")
    assert any("Cannot write to the output folder" in e for e in check_start(cfg3).errors)


def test_memory_estimate_above_the_gpu_asks_first(qtbot, make_page, tmp_path, monkeypatch):
    small_gpu = fake_device("gtx1080")
    monkeypatch.setattr(hardware, "cached", lambda: small_gpu)
    cfg = demo_config(tmp_path)
    cfg.model.family = "sdxl"  # estimated as SDXL: far above 8 GiB in fp32
    check = check_start(cfg, small_gpu)
    assert check.ok and check.confirm and "more than your GPU has" in check.confirm[0]
    page = make_page(cfg, factory=fake_factory(steps=2))
    click_train(qtbot, page)
    box = page.confirm_box
    assert box is not None and box.isVisible() and page.state == TrainState.CHECKING
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert page.state == TrainState.IDLE and FakeTrainer.instances == []
    with qtbot.waitSignal(page.run_finished, timeout=5000):
        click_train(qtbot, page)
        page.confirm_box.button(QMessageBox.StandardButton.Yes).click()


def test_unknown_device_is_probed_in_the_background(qtbot, make_page, monkeypatch):
    calls: list[str] = []

    def probe():
        calls.append(threading.current_thread().name)
        return fake_device("cpu")

    monkeypatch.setattr(hardware, "cached", lambda: None)
    monkeypatch.setattr(hardware, "probe", probe)
    page = make_page(factory=fake_factory(steps=2))
    with qtbot.waitSignal(page.run_finished, timeout=5000):
        click_train(qtbot, page)
        assert page.state == TrainState.CHECKING
    assert calls and calls[0] != threading.current_thread().name


def test_confirm_close_keeps_or_stops(qtbot, make_page, monkeypatch):
    page = make_page(factory=fake_factory(steps=100_000, delay=0.005))
    assert page.confirm_close()  # idle: nothing to ask
    click_train(qtbot, page)
    qtbot.waitUntil(lambda: len(page.charts) >= 2, timeout=5000)
    monkeypatch.setattr(page, "_ask_close", lambda: "keep")
    assert page.confirm_close() is False and page.state == TrainState.RUNNING
    monkeypatch.setattr(page, "_ask_close", lambda: "stop")
    assert page.confirm_close() is True
    assert page.state == TrainState.STOPPED and page.last_summary.status == "stopped"


# --------------------------------------------------------------------------- the real engine, demo model


@pytest.fixture
def real_engine():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    pytest.importorskip("guitrainer.engine.trainer")
    return torch


@pytest.mark.slow
def test_real_engine_fp16_charts_scale_and_screenshot(qtbot, make_page, tmp_path, real_engine, artifacts_dir):
    cfg = demo_config(tmp_path, max_steps=3)
    cfg.precision.training = "fp16"
    page = make_page(cfg)
    click_train(qtbot, page)
    qtbot.waitUntil(lambda: len(page.charts) >= 2, timeout=60_000)
    qtbot.waitUntil(lambda: page.charts.redraw_count > 0 and "step" in page.progress_bar.text(), timeout=5000)
    qtbot.wait(250)
    page.grab().save(str(artifacts_dir / "training_page.png"))
    assert page.charts.scaler_visible and page.charts.scale_widget.isVisible()
    scale = page.charts.series("grad_scale")
    assert np.all(np.isfinite(scale)) and np.all(scale > 0)
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        pass
    summary = blocker.args[0]
    assert summary.status == "finished" and summary.steps == 3
    assert list(page.charts.series("step")) == [1.0, 2.0, 3.0]
    assert Path(summary.lora_path).is_file()
    assert "loading the base model" in page.log_panel.text().lower()  # the engine's log reached the panel


@pytest.mark.slow
def test_real_engine_bf16_has_no_scale_series(qtbot, make_page, tmp_path, real_engine):
    cfg = demo_config(tmp_path, max_steps=2)
    cfg.precision.training = "bf16"
    page = make_page(cfg)
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        click_train(qtbot, page)
    assert blocker.args[0].status == "finished"
    assert len(page.charts) == 2
    assert not page.charts.scaler_visible and page.charts.no_scaler_note.isVisible()
    assert np.all(np.isnan(page.charts.series("grad_scale")))


@pytest.mark.slow
def test_real_engine_stop_saves_and_resume_continues(qtbot, make_page, tmp_path, real_engine):
    cfg = demo_config(tmp_path, max_steps=500)
    cfg.precision.training = "fp32"
    page = make_page(cfg)
    assert not page.resume_state_button.isEnabled()
    click_train(qtbot, page)
    qtbot.waitUntil(lambda: len(page.charts) >= 2, timeout=60_000)
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        qtbot.mouseClick(page.stop_button, Qt.MouseButton.LeftButton)
    first = blocker.args[0]
    assert first.status == "stopped" and 2 <= first.steps < 500
    assert Path(first.lora_path).is_file() and first.lora_path.endswith(".safetensors")
    assert first.state_path and find_state(page.binding.config) == first.state_path
    assert page.last_state_path == first.state_path and page.resume_state_button.isEnabled()
    assert page.binding.config.schedule.resume_from == ""  # the user's settings are untouched

    steps_before = list(page.charts.series("step"))
    assert steps_before[-1] == first.steps
    new_steps: list[int] = []
    click = page.resume_state_button
    qtbot.mouseClick(click, Qt.MouseButton.LeftButton)
    assert page.state == TrainState.RUNNING and page.run_config.schedule.resume_from == first.state_path
    assert page.worker is not None
    page.worker.step_finished.connect(lambda m: new_steps.append(m.step))
    qtbot.waitUntil(lambda: len(new_steps) >= 2, timeout=60_000)
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        page.stop()
    second = blocker.args[0]
    assert new_steps[0] == first.steps + 1  # the step count continues
    assert second.status == "stopped" and second.steps > first.steps
    steps_after = list(page.charts.series("step"))
    assert steps_after[: len(steps_before)] == steps_before  # the chart kept the first part of the run
    assert steps_after == list(range(1, second.steps + 1))


@pytest.mark.slow
def test_real_engine_failure_shows_dialog(qtbot, make_page, tmp_path, real_engine, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = demo_config(tmp_path, max_steps=2)
    cfg.model.base = "nobody/no-such-model"  # passes the start check (a hub id), fails to load offline
    cfg.model.family = "auto"
    cfg.set("dataset.folders", [str(make_dataset(tmp_path / "images"))])
    page = make_page(cfg)
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        click_train(qtbot, page)
    assert blocker.args[0].status == "failed"
    box = page.findChild(QMessageBox, "training_error_box")
    assert box is not None and box.isVisible() and "no-such-model" in box.text()
    box.close()
    assert page.state == TrainState.FAILED and page.train_button.isEnabled()


@pytest.mark.slow
def test_real_engine_output_folder_changed_mid_run_takes_save_now_while_paused(qtbot, make_page, tmp_path, real_engine):
    cfg = demo_config(tmp_path, max_steps=500)
    cfg.precision.training = "fp32"
    page = make_page(cfg)
    click_train(qtbot, page)
    qtbot.waitUntil(lambda: len(page.charts) >= 1, timeout=60_000)
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.state == TrainState.PAUSED, timeout=10_000)
    assert page.save_button.isEnabled()  # Save now works while paused
    elsewhere = tmp_path / "elsewhere"
    page.binding.set("output.folder", str(elsewhere))  # what the Output page does
    assert page.run_config.output.folder == str(elsewhere)
    assert f"the next saves go to {elsewhere}" in page.log_panel.text()
    saved: list = []
    page.worker.checkpoint_saved.connect(saved.append)
    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: any(s.kind == "lora" for s in saved), timeout=60_000)
    lora = next(Path(s.path) for s in saved if s.kind == "lora")
    assert lora.parent == elsewhere and lora.is_file()
    assert page.state == TrainState.PAUSED  # saving did not resume training
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        page.stop()
    assert Path(blocker.args[0].lora_path).parent == elsewhere


@pytest.mark.slow
def test_resuming_a_finished_run_offers_more_epochs(qtbot, make_page, tmp_path, real_engine):
    cfg = demo_config(tmp_path)
    cfg.schedule.epochs, cfg.schedule.max_steps = 1, 0
    cfg.precision.training = "fp32"
    page = make_page(cfg)
    output = OutputPage(page.binding)
    qtbot.addWidget(output)
    page.run_finished.connect(output.show_last_run)  # as the main window wires them
    page.worker_started.connect(output.begin_run)
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        click_train(qtbot, page)
    first = blocker.args[0]
    assert first.status == "finished" and first.steps > 0
    assert first.lora_path in output.last_run_label.text()

    # a state that cannot continue (another rank now): Train more starts nothing and leaves the epochs alone
    rank = page.binding.get("network.rank")
    page.binding.set("network.rank", rank * 2)
    qtbot.mouseClick(page.resume_state_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(page.finished_box.findChild(object, "train_more_button"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.problems_box is not None and page.problems_box.isVisible(), timeout=30_000)
    assert "rank" in page.problems_box.text().lower() + page.problems_box.informativeText().lower()
    assert page.binding.get("schedule.epochs") == 1 and page.worker is None
    page.problems_box.close()
    page.binding.set("network.rank", rank)

    qtbot.mouseClick(page.resume_state_button, Qt.MouseButton.LeftButton)
    box = page.finished_box
    assert box is not None and box.isVisible() and page.worker is None  # nothing started
    label_text = " ".join(w.text() for w in box.findChildren(QLabel))
    assert "complete" in label_text and str(first.steps) in label_text
    spin = box.findChild(type(box.findChild(object, "more_epochs")), "more_epochs")
    spin.setValue(1)
    with qtbot.waitSignal(page.run_finished, timeout=60_000) as blocker:
        qtbot.mouseClick(box.findChild(object, "train_more_button"), Qt.MouseButton.LeftButton)
    second = blocker.args[0]
    assert page.binding.get("schedule.epochs") == 1  # the run trained on; the user's settings are untouched
    assert second.status == "finished" and second.steps > first.steps  # it trained on, from the saved state
    assert second.lora_path == first.lora_path  # the same run on: its name (before, a new name_2 file)
    kept = Path(first.lora_path).with_name(f"{Path(first.lora_path).stem}-step{first.steps:06d}.safetensors")
    assert kept.is_file()  # the LoRA it finished with first is kept under its step's name
    assert second.lora_path in output.last_run_label.text() and str(kept) in output.last_run_label.text()
    assert "Loading the model" not in page.progress_bar.text()


def test_empty_charts_say_no_data_and_the_scale_chart_says_flat_is_healthy(qtbot):
    from guitrainer.ui.training.charts import NO_DATA, TrainingCharts

    charts = TrainingCharts()
    qtbot.addWidget(charts)
    charts.resize(900, 500)
    charts.show()
    titles = lambda: [p.titleLabel.text for p in (charts.loss_plot, charts.lr_plot, charts.scale_plot, charts.sps_plot)]  # noqa: E731
    assert all(NO_DATA in t for t in titles())
    assert "flat line is healthy" in charts.scale_hint.text() and charts.scale_hint.isVisible()
    charts.add(metrics(1, scale=65536.0))
    charts.redraw()
    assert not any(NO_DATA in t for t in titles())
    charts.clear()
    assert all(NO_DATA in t for t in titles())


def test_samples_tab_says_when_sampling_is_off(qtbot, make_page):
    page = make_page()
    page.binding.set("sampling.every_n_steps", 0)
    page.binding.set("sampling.at_start", False)
    assert page.gallery.count() == 0 and page.gallery.empty_text.startswith("Sampling is off")
    page.binding.set("sampling.prompts", ["a red apple"])
    page.binding.set("sampling.every_n_steps", 50)
    assert page.gallery.empty_text == "Samples appear here every 50 steps while training."
    page.binding.set("sampling.at_start", True)
    assert page.gallery.empty_text == "Samples appear here before the first step and every 50 steps while training."
    page.binding.set("sampling.every_n_steps", 0)
    assert page.gallery.empty_text == "Samples appear here once, before the first step (the base model's pictures)."
    page.tabs.setCurrentWidget(page.samples_tab)
    assert page.gallery.grab().toImage() is not None  # paints the text without error


def test_a_blocking_problem_stops_every_way_of_starting(qtbot, make_page, tmp_path):
    """Train was off, yet Resume from last state and Train more started a run past the problem."""
    page = make_page(factory=fake_factory(steps=1))
    page.last_state_path = str(tmp_path / "demo_lora_state")
    page._apply_state()
    assert page.resume_state_button.isEnabled()
    page.set_blocking_errors("The LoRA to continue from is a LoRA file, but Network type is LoKr.")
    assert not page.train_button.isEnabled() and not page.resume_state_button.isEnabled()
    page.start(resume_from=str(tmp_path / "demo_lora_state"))  # what Train more ends in
    assert page.worker is None and "Fix this first on the Model & Precision page" in page.status_label.toolTip() + \
        page.status_label.text()


def test_why_train_is_off_shows_beside_the_button(qtbot, make_page):
    page = make_page(factory=fake_factory(steps=1))
    assert not page.blocked_label.isVisible() and page.train_button.isEnabled()
    page.set_blocking_errors("bf16 is not supported on the Tesla T4.\nA second problem.")
    assert not page.train_button.isEnabled()
    assert page.blocked_label.isVisible() and "bf16 is not supported on the Tesla T4" in page.blocked_label.text()
    assert "Model & Precision" in page.blocked_label.text() and "A second problem" in page.blocked_label.toolTip()
    page.set_blocking_errors("")
    assert page.train_button.isEnabled() and not page.blocked_label.isVisible()
