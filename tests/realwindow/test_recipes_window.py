"""Issue 20 in a real window: Prodigy picked with the mouse sets lr 1.0 and says why; a run with a validation
split draws its validation loss beside the training loss."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QComboBox, QLabel
from xinput import choose_in_combo, open_page, train_and_wait, wait_for

from guitrainer.ui.training.charts import TrainingCharts


@pytest.mark.slow
def test_prodigy_by_mouse_and_a_validation_curve_after_a_run(main_window, xin, tmp_path):
    w, b = main_window, main_window.binding
    assert b.config.model.base == "demo", "the window opens on the Demo preset"
    b.set("output.folder", str(tmp_path / "out"))
    b.set("schedule.max_steps", 8)
    b.set("validation.split", 0.25)
    b.set("validation.every_n_steps", 4)
    open_page(w, xin, "Training")
    combo = w.findChild(QComboBox, "edit_optimizer_name")
    choose_in_combo(xin, combo, "Prodigy (LR-free: LR 1.0)")
    assert b.config.optimizer.name == "Prodigy"
    assert (b.config.optimizer.lr, b.config.optimizer.text_encoder_lr) == (1.0, 1.0)
    status = w.training_page.findChild(QLabel, "status_label")
    assert "finds its own step size" in status.text(), status.text()

    train_and_wait(w, xin, timeout_s=180)
    charts = w.training_page.findChild(TrainingCharts)
    wait_for(lambda: charts.validation_curve is not None and len(charts.validation_curve.xData) == 2, 10,
             "the validation curve")  # fmt: skip
    assert list(charts.validation_curve.xData) == [4, 8]
    assert all(v > 0 for v in charts.validation_curve.yData)
