"""Hovering each part of the VRAM bar with the real pointer shows that part's name and size."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QToolTip, QWidget
from readouts import shows_size, sizes_in
from xinput import choose_in_combo, open_page, wait_for

from guitrainer.ui.model.vram_meter import VramMeter


def test_hovering_each_vram_part_shows_its_name_and_size(main_window, xin):
    meter = main_window.findChild(VramMeter)
    bar = meter.findChild(QWidget, "vram_bar")
    wait_for(lambda: meter.breakdown is not None, 10, "the first VRAM estimate")
    main_window.raise_()
    # parts at least 4 px wide can be pointed at; the smaller ones need the legend (issue 15 #4)
    segments = [(rect, part) for rect, part in bar.segments() if rect.width() >= 4]
    assert len(segments) >= 3, [p.label for _r, p in bar.segments()]
    seen = {}
    for rect, part in segments:
        xin.move(bar, rect.center().toPoint())
        wait_for(
            lambda part=part: QToolTip.isVisible() and part.label in QToolTip.text(),
            4,
            f"the tooltip of {part.label!r} (showing: {QToolTip.text()!r})",
        )
        seen[part.label] = QToolTip.text()
        assert shows_size(QToolTip.text(), part.bytes), (part.label, part.bytes, QToolTip.text())
    assert len(seen) == len(segments)


@pytest.mark.slow
def test_check_precisely_with_adafactor_reports_a_measurement_in_plain_words(main_window, xin):
    """Adafactor picked in the Training page's combo box, then "Check precisely" clicked: a measured peak,
    and the status line's tooltip holds no Python traceback."""
    open_page(main_window, xin, "Training")
    choose_in_combo(xin, main_window.findChild(QComboBox, "edit_optimizer_name"), "Adafactor")
    assert main_window.binding.config.optimizer.name == "Adafactor"
    meter = main_window.findChild(VramMeter)
    status = meter.findChild(QLabel, "vram_status")
    button = next(b for b in meter.findChildren(QPushButton) if b.text() == "Check precisely")
    xin.click(button)
    wait_for(lambda: button.isEnabled() and "Measuring" not in status.text(), 60, "the measurement to end")
    xin.move(status)
    wait_for(QToolTip.isVisible, 10, "the status line's tooltip")
    assert "Traceback" not in QToolTip.text(), QToolTip.text()[:300]
    assert "fail" not in status.text().lower() and sizes_in(status.text()), status.text()
