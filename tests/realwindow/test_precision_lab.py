"""The precision lab with the real pointer: open it from the Model & Precision page, measure, "Use this"."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QPushButton
from xinput import global_point, open_page, pump, wait_for

from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
from guitrainer.core.precision.lab import Candidate
from guitrainer.ui.model.precision_lab import PrecisionLabDialog


@pytest.mark.slow
def test_measure_on_this_machine_then_use_this(main_window, xin, monkeypatch):
    from guitrainer.engine.lab import precision_lab

    # no "too slow" stop: on a loaded machine fp16's first CPU step took 12x fp32's and was stopped, so
    # whether fp16 ran depended on the load (the stop has its own test in tests/test_precision_lab.py)
    monkeypatch.setattr(precision_lab, "SLOW_LIMIT", float("inf"))
    main_window.binding.replace(PresetStore().get(DEFAULT_PRESET).config())  # the Demo preset: seconds on a CPU
    open_page(main_window, xin, "Model & Precision")
    page = main_window.model_page
    wait_for(lambda: page.precision_picker.device() is not None, 90, "the device probe")
    button = page.findChild(QPushButton, "measure_precisions")
    assert button is not None and button.isVisible()
    # the device panel fills in after the probe and moves the button: click where it has come to rest
    # (on a loaded machine the click went where the button had been, and no lab window came)
    spots = [None, global_point(button)]
    while spots[-1] != spots[-2]:
        pump(250)
        spots.append(global_point(button))
        assert len(spots) < 40, spots
    xin.click(button)
    wait_for(lambda: isinstance(page.lab_dialog, PrecisionLabDialog) and page.lab_dialog.isVisible(), 10, "the lab window")
    dialog = page.lab_dialog
    wait_for(lambda: dialog.windowHandle() is not None and dialog.windowHandle().isExposed(), 10, "the lab window shown")
    xin.activate(dialog)
    dialog.steps_box.setValue(1)  # the quickest measurement: one timed step per precision
    before = main_window.binding.config.to_dict()
    xin.click(dialog.measure_button)
    wait_for(lambda: dialog.report is not None, 240, lambda: f"the measurement ({dialog.status.text()})")
    report = dialog.report
    ran = [r.candidate for r in report.results if r.ran]
    assert {Candidate("fp32"), Candidate("fp16"), Candidate("bf16")} <= set(ran), [r.reason for r in report.results]
    assert main_window.binding.config.to_dict() == before  # measuring changed no setting
    pump(300)  # the table's buttons laid out
    use = dialog.use_button(Candidate("bf16"))
    xin.click(use)
    wait_for(lambda: main_window.binding.config.precision.training == "bf16", 5, "Use this to set bf16")
    best = report.recommended().candidate
    notes = page.precision_picker.training_group.notes
    assert notes[best.training].text() == "recommended here (measured)"
    dialog.close()
