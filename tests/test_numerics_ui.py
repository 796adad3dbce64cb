"""The Numerics chart (headroom per block, underflow, skipped steps, the alarm) and the save report box."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from guitrainer.core.events import StepMetrics
from guitrainer.core.precision.numerics import SaveReport, TensorFinding


def metrics(step: int, headroom=(), underflow=None, skipped=False, message="") -> StepMetrics:
    return StepMetrics(
        step=step, total_steps=200, epoch=1, loss=0.1, lr=1e-4, skipped=skipped,
        headroom=tuple(headroom), grad_underflow=underflow, numerics_message=message,
    )


@pytest.fixture
def chart(qtbot):
    from guitrainer.ui.training.numerics_chart import NumericsChart

    c = NumericsChart(precision="fp16")
    qtbot.addWidget(c)
    c.resize(700, 500)
    return c


def test_sampled_steps_become_one_curve_per_block(chart, qtbot):
    chart.add(metrics(1, [("unet.down.0.attn", 900.0), ("unet.mid.ff", 4000.0)], underflow=0.001))
    chart.add(metrics(2))  # an ordinary step carries nothing: passed over
    chart.add(metrics(50, [("unet.down.0.attn", 600.0), ("unet.mid.ff", 3000.0)], underflow=0.002))
    with qtbot.waitSignal(chart.redrawn, timeout=2000):
        pass  # the 10 Hz timer draws
    assert set(chart._curves) == {"unet.down.0.attn", "unet.mid.ff"}
    x, y = chart._curves["unet.down.0.attn"].getData()
    assert list(x) == [1.0, 50.0]
    # log mode: the curve holds log10 of the headroom
    assert np.allclose(y, np.log10([900.0, 600.0]))
    ux, uy = chart.underflow_curve.getData()
    assert list(ux) == [1.0, 50.0] and np.allclose(uy, [0.1, 0.2])
    assert not chart.alarm
    assert "lowest headroom unet down 0 attention 600×" in chart.readout.text()


def test_alarm_when_headroom_falls_under_4x_and_back(chart, qtbot):
    chart.add(metrics(1, [("unet.up.1.attn", 40.0)], underflow=0.0))
    assert not chart.alarm
    with qtbot.waitSignal(chart.alarm_changed, timeout=1000) as blocker:
        chart.add(metrics(50, [("unet.up.1.attn", 3.5)], underflow=0.0))
    assert blocker.args == [True] and chart.alarm
    with qtbot.waitSignal(chart.alarm_changed, timeout=1000) as blocker:
        chart.add(metrics(100, [("unet.up.1.attn", 20.0)], underflow=0.0))
    assert blocker.args == [False]
    with qtbot.waitSignal(chart.alarm_changed, timeout=1000) as blocker:
        chart.add(metrics(150, [("unet.up.1.attn", 20.0)], underflow=0.08))  # 8 % > 5 %
    assert blocker.args == [True]


def test_skipped_steps_are_marked_and_their_message_shown(chart):
    msg = "step 73 skipped: inf first seen in unet.up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v"
    chart.add(metrics(73, skipped=True, message=msg))
    chart.redraw()
    x, y = chart.skip_markers.getData()
    assert list(x) == [73.0]
    assert chart.skip_label.text() == msg and not chart.skip_label.isHidden()
    assert not chart.alarm  # one skip under fp16 is the scaler finding its level: no alarm by itself
    chart.clear()
    assert chart.skip_label.isHidden() and not chart._curves


def test_non_fp16_hides_the_underflow_plot(chart):
    chart.set_precision("bf16")
    assert chart.underflow_widget.isHidden()
    assert "3.4e38" in chart.limit_line.toolTip()


def report() -> SaveReport:
    return SaveReport(
        "/out/mylora.safetensors",
        "fp16",
        "bf16",
        (
            TensorFinding("lora_unet_ok.lora_down.weight", 128, peak=0.2, nonzero=128),
            TensorFinding("lora_unet_small.lora_down.weight", 128, peak=0.01, to_zero=12, subnormal=30, nonzero=128),
            TensorFinding("lora_unet_big.lora_up.weight", 256, peak=1.5e5, over_max=4, nonzero=256),
        ),
        step=400,
    )


def test_save_report_shows_choice_numbers_and_worst_first(qtbot):
    from guitrainer.ui.output.save_report import SaveReportView

    view = SaveReportView()
    qtbot.addWidget(view)
    view.show_report(report())
    assert view.choice_label.text() == "switched to bf16"
    assert "mylora.safetensors at step 400" in view.file_label.text()
    assert view.headline.text().startswith("4 values in 1 of 3 tensors exceed 65,504 (largest 1.5e5): switched to bf16.")
    rows = view.rows()
    assert [r[0] for r in rows] == [
        "lora_unet_big.lora_up.weight",
        "lora_unet_small.lora_down.weight",
        "lora_unet_ok.lora_down.weight",
    ]
    assert rows[0][1:] == ("256", "1.5e5", "4", "0", "0")
    assert rows[1][4:] == ("12", "30")
    # short headers (the tensor's name keeps its room at 1366 px), each explained in its tooltip
    tips = [view.table.horizontalHeaderItem(c).toolTip() for c in range(view.table.columnCount())]
    assert all(tips) and "infinite" in tips[3] and "zero" in tips[4] and "subnormals" in tips[5]


def test_save_report_sorts_by_number_when_a_header_is_clicked(qtbot):
    from guitrainer.ui.output.save_report import SaveReportView

    view = SaveReportView()
    qtbot.addWidget(view)
    view.resize(900, 400)
    view.show()
    view.show_report(report())
    header = view.table.horizontalHeader()
    x = header.sectionViewportPosition(5) + header.sectionSize(5) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))
    column = [int(r[5]) for r in view.rows()]
    assert column in (sorted(column), sorted(column, reverse=True))
    assert column != [0, 30, 0]  # the worst-first order it had before the click


def test_the_tab_draws_the_eye_only_while_the_alarm_is_on(qtbot):
    from PySide6.QtGui import QColor
    from PySide6.QtWidgets import QLabel, QTabWidget

    from guitrainer.ui.training.numerics_chart import ALARM_COLOR, add_numerics_tab

    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    tabs.addTab(QLabel("log"), "Log")
    chart = add_numerics_tab(tabs, "fp16")
    i = tabs.indexOf(chart)
    quiet = tabs.tabBar().tabTextColor(i)
    chart.add(metrics(1, [("unet.mid.attn", 500.0)], underflow=0.0))
    assert tabs.tabText(i) == "Numerics" and tabs.tabBar().tabTextColor(i) == quiet
    chart.add(metrics(50, [("unet.mid.attn", 2.0)], underflow=0.0))
    assert tabs.tabText(i) == "Numerics !"
    assert tabs.tabBar().tabTextColor(i) == QColor(ALARM_COLOR)
    chart.clear()
    assert tabs.tabText(i) == "Numerics" and tabs.tabBar().tabTextColor(i) == quiet
