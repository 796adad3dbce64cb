"""The recipes in the window: the advanced forms, LR-free optimizers picked by key, the validation curve."""

from __future__ import annotations

import csv

import pytest
from helpers import demo_cfg, fake_device
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

from guitrainer.config import TrainingConfig
from guitrainer.config.sections import learning_rates_for_optimizer
from guitrainer.core.device import hardware
from guitrainer.core.events import StepMetrics
from guitrainer.ui.binding import ConfigBinding, bound_editors
from guitrainer.ui.training.page import TrainingPage


@pytest.fixture
def page(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "cached", lambda: fake_device("cpu"))  # no real device probe
    p = TrainingPage(ConfigBinding(demo_cfg(tmp_path)))
    qtbot.addWidget(p)
    p.resize(1360, 900)
    p.show()
    return p


def test_recipe_settings_have_editors_on_the_training_page(page):
    editors = bound_editors(page)
    for path in (
        "loss.min_snr_gamma", "loss.loss_type", "loss.huber_schedule", "loss.min_timestep",
        "noise.noise_offset", "noise.multires_noise_iterations", "noise.ip_noise_gamma", "noise.zero_terminal_snr",
        "validation.split", "validation.folder", "validation.every_n_steps",
        "schedule.lr_scheduler_num_cycles", "schedule.lr_scheduler_power", "schedule.warmup_ratio",
    ):
        assert path in editors, path
    assert "min-SNR" in editors["loss.min_snr_gamma"].toolTip().replace("Min-SNR", "min-SNR")


def _pick_by_keys(qtbot, combo: QComboBox, value: str) -> None:
    """Select ``value`` as a keyboard user does: focus the box, then arrow keys."""
    combo.setFocus()
    target = combo.findData(value)
    assert target >= 0, value
    key = Qt.Key.Key_Down if target > combo.currentIndex() else Qt.Key.Key_Up
    while combo.currentIndex() != target:
        qtbot.keyClick(combo, key)


def test_picking_an_lr_free_optimizer_sets_lr_one_and_says_why(qtbot, page):
    combo = bound_editors(page)["optimizer.name"]
    assert isinstance(combo, QComboBox)
    assert page.binding.get("optimizer.lr") == pytest.approx(1e-3)  # helpers.configs.demo_cfg's
    _pick_by_keys(qtbot, combo, "Prodigy")
    assert "LR 1.0" in combo.currentText()
    assert page.binding.get("optimizer.name") == "Prodigy"
    assert page.binding.get("optimizer.lr") == 1.0 and page.binding.get("optimizer.text_encoder_lr") == 1.0
    assert "finds its own step size" in page.status_label.text()
    _pick_by_keys(qtbot, combo, "AdamW")
    assert page.binding.get("optimizer.lr") == pytest.approx(1e-4)  # AdamW's default back, not 1.0


def test_learning_rates_for_optimizer_decisions():
    cfg = TrainingConfig()
    assert learning_rates_for_optimizer(cfg.optimizer) == ({}, "")  # AdamW at 1e-4: nothing to change
    cfg.optimizer.name = "DAdaptAdam"
    changes, why = learning_rates_for_optimizer(cfg.optimizer)
    assert changes == {"optimizer.lr": 1.0, "optimizer.text_encoder_lr": 1.0} and "DAdaptAdam" in why
    cfg.optimizer.lr = cfg.optimizer.text_encoder_lr = 0.5  # a chosen multiplier is kept
    assert learning_rates_for_optimizer(cfg.optimizer) == ({}, "")


def test_validation_loss_is_charted_beside_the_training_loss(qtbot, tmp_path):
    from guitrainer.ui.training.charts import COLUMNS, TrainingCharts

    charts = TrainingCharts()
    qtbot.addWidget(charts)
    charts.show()
    for step in range(1, 31):
        charts.add(
            StepMetrics(step=step, total_steps=30, epoch=1, loss=1.0, lr=1e-4,
                        validation_loss=0.5 - step / 100 if step % 10 == 0 else None)
        )
    with qtbot.waitSignal(charts.redrawn, timeout=2000):
        pass
    assert charts.validation_curve is not None
    assert list(charts.validation_curve.xData) == [10, 20, 30]
    assert list(charts.validation_curve.yData) == pytest.approx([0.4, 0.3, 0.2])
    path = tmp_path / "m.csv"
    charts.export_csv(path)
    rows = list(csv.DictReader(path.open()))
    assert tuple(rows[0]) == COLUMNS and "validation_loss" in COLUMNS
    assert float(rows[9]["validation_loss"]) == pytest.approx(0.4) and rows[0]["validation_loss"] == ""  # no score: empty
    charts.clear()
    assert charts.validation_curve is None
