"""Issue 20 in a real window: Prodigy picked with the mouse sets lr 1.0 and says why; a run with a validation
split draws its validation loss beside the training loss."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QLabel, QMessageBox, QPushButton
from xinput import ModalAnswerer, button_with_role, choose_in_combo, click_args, open_page, wait_for

from guitrainer.ui.charts import TrainingCharts


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

    badge = w.training_page.findChild(QLabel, "state_badge")

    def start_anyway(box):  # noqa: ANN001, ANN202
        if isinstance(box, QMessageBox) and box.objectName() == "start_confirm_box":
            return click_args(button_with_role(box, QMessageBox.ButtonRole.YesRole, QMessageBox.ButtonRole.AcceptRole))
        return None

    answers = ModalAnswerer(xin, start_anyway)
    try:
        xin.click(w.training_page.findChild(QPushButton, "train_button"))
        wait_for(lambda: badge.text() in ("Done", "Failed"), 180, f"the run to end (badge: {badge.text()!r})")
    finally:
        answers.stop()
    assert badge.text() == "Done", status.text()
    charts = w.training_page.findChild(TrainingCharts)
    wait_for(lambda: charts.validation_curve is not None and len(charts.validation_curve.xData) == 2, 10,
             "the validation curve")  # fmt: skip
    assert list(charts.validation_curve.xData) == [4, 8]
    assert all(v > 0 for v in charts.validation_curve.yData)
