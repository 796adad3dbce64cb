"""The Numerics tab on the Training page and the save report on the Output page, fed by the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import configs, fake_device
from PySide6.QtCore import QObject, Qt, Signal

from guitrainer.core.device import hardware
from guitrainer.core.events import SavedFile
from guitrainer.core.precision.numerics import SaveReport, TensorFinding
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.training.numerics_tab import attach_numerics
from guitrainer.ui.training.page import TrainingPage

TO_V = "up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v"


class _Injecting:
    """A reporter in front of the worker's: once the model is built, ``module``'s output is multiplied by
    ``factor`` on step ``at`` (its forward and the diagnosis replay alike)."""

    def __init__(self, inner, module: str, factor: float, at: int):
        self.inner, self.module, self.factor, self.at = inner, module, factor, at
        self.trainer = None

    def __getattr__(self, name: str):  # on_step, on_warning, on_saved, on_sample
        return getattr(self.inner, name)

    def on_status(self, text: str) -> None:
        self.inner.on_status(text)
        if text.startswith("training "):
            tr = self.trainer
            module = tr.session.model.denoiser.get_submodule(self.module)
            module.register_forward_hook(
                lambda _m, _a, out: out * self.factor if tr.progress.global_step + 1 == self.at else out
            )


def injecting_factory(module: str, factor: float, at: int):
    def factory(config, reporter, control):
        from guitrainer.engine.trainer import Trainer

        proxy = _Injecting(reporter, module, factor, at)
        proxy.trainer = Trainer(config, proxy, control)
        return proxy.trainer

    return factory


@pytest.fixture
def page(qtbot, tmp_path, monkeypatch):
    pytest.importorskip("torch").set_num_threads(1)
    monkeypatch.setattr(hardware, "cached", lambda: fake_device("cpu"))
    cfg = configs.demo_cfg(
        tmp_path / "out", precision__training="fp16", precision__save="fp16", schedule__max_steps=3,
        precision__cache_latents=True, precision__cache_to_disk=False,
    )
    p = TrainingPage(ConfigBinding(cfg), trainer_factory=injecting_factory(TO_V, 1e6, at=2))
    p.saved_files = []
    p.numerics = attach_numerics(p, p.saved_files.append)  # as the main window does
    qtbot.addWidget(p)
    p.resize(1360, 900)
    p.show()
    qtbot.waitExposed(p)
    yield p
    if p.is_active:
        p.stop()
        p.wait_until_idle(120)


@pytest.mark.slow
def test_numerics_tab_shows_the_injected_overflow_and_the_saved_report(qtbot, page):
    assert page.numerics() is None  # nothing built before the first run
    with qtbot.waitSignal(page.run_finished, timeout=120_000) as finished:
        qtbot.mouseClick(page.train_button, Qt.MouseButton.LeftButton)
    assert finished.args[0].status == "finished" and finished.args[0].skipped_steps == 1
    chart = page.numerics()
    assert chart is not None
    # the user opens the tab
    bar = page.tabs.tabBar()
    index = page.tabs.indexOf(chart)
    qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.tabRect(index).center())
    assert page.tabs.currentWidget() is chart
    qtbot.waitUntil(lambda: chart.redraw_count > 0, timeout=2000)
    assert chart.skipped == [2]
    message = chart.skip_label.text()
    assert message.startswith(f"step 2 skipped: inf first seen in unet.{TO_V} (fp16 activation ")
    assert chart.skip_label.isVisible()
    assert message in page.log_panel.text()  # the status line went to the log too
    # step 1 was sampled: every UNet and text-encoder block has a headroom, far from 4x: the tab stays quiet
    latest = chart.latest()
    assert {"unet.up.1.attn", "unet.mid.ff", "te.attn"} <= set(latest)
    assert min(latest.values()) > 4.0 and not chart.alarm and page.tabs.tabText(index) == "Numerics"
    (lora,) = [f for f in page.saved_files if f.kind == "lora"]
    assert lora.save_report is not None and lora.save_report.choice == "kept fp16"
    assert Path(lora.save_report.path).is_file()


class _Worker(QObject):
    """The signals of a TrainingWorker that the Numerics tab and the save report listen to."""

    step_finished = Signal(object)
    checkpoint_saved = Signal(object)

    def __init__(self, config):
        super().__init__()
        self.config = config


def test_output_page_shows_the_report_of_each_saved_lora(window, qtbot):
    report = SaveReport(
        "/out/a.safetensors", "fp16", "bf16", (TensorFinding("lora_unet_x.lora_up.weight", 8, 2e5, over_max=2, nonzero=8),),
        step=12,
    )
    view = window.output_page.save_report_view
    assert view.report is None and view.table.isHidden()
    worker = _Worker(configs.config_with(precision__training="fp16"))
    window.training_page.worker_started.emit(worker)  # a run starts: its worker is connected
    chart = window.numerics()
    assert chart is not None and window.training_page.tabs.indexOf(chart) >= 0
    worker.checkpoint_saved.emit(SavedFile("/out/a_state", "state", 12, 1))  # no report: nothing changes
    assert view.report is None
    worker.checkpoint_saved.emit(SavedFile(report.path, "lora", 12, 1, report))
    assert view.report is report
    assert view.choice_label.text() == "switched to bf16"
    assert view.rows()[0][:4] == ("lora_unet_x.lora_up.weight", "8", "2.0e5", "2")
