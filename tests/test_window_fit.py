"""Issue 15: from 1366×768 up nothing is cut off and no page scrolls (no scrolling column inside a
scrolling page), and tab labels are whole ("Regula…" was elided)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from guitrainer.presets import PresetStore
from guitrainer.ui.main_window import MainWindow


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_every_page_fits_without_scrolling(qtbot, tmp_path, size):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    for row, page in enumerate(w.pages):
        w.nav.setCurrentRow(row)
        qtbot.wait(30)
        assert page.verticalScrollBar().maximum() == 0, f"{page.title} scrolls vertically at {size}"
        assert page.horizontalScrollBar().maximum() == 0, f"{page.title} scrolls horizontally at {size}"
    tabs = w.dataset_page.tabs
    w.nav.setCurrentRow(0)
    qtbot.wait(30)
    bar = tabs.tabBar()
    for i in range(tabs.count()):
        assert bar.tabRect(i).width() >= bar.fontMetrics().horizontalAdvance(tabs.tabText(i)), tabs.tabText(i)
    assert "Class images" in [tabs.tabText(i) for i in range(tabs.count())]
    w.dataset_page.shutdown()


@pytest.mark.parametrize("device", ["cpu", "cpu_bf16", "gtx1080", "gtx1660", "rx6800", "m1", "rtx4090"])
def test_the_model_page_fits_1366_whatever_the_device_says(qtbot, tmp_path, monkeypatch, device):
    """The precision notes differ per device class (a Turing or RDNA2 caveat was 95-147 px too wide for a
    1366 px screen): every class of device must leave the page without scroll bars."""
    from helpers import fake_device

    from guitrainer.core import hardware

    found = fake_device(device)
    monkeypatch.setattr(hardware, "cached", lambda: found)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.resize(1366, 768)
    w.show()
    qtbot.waitExposed(w)
    w.nav.setCurrentRow(w.pages.index(w.model_page))
    qtbot.wait(30)
    assert w.model_page.precision_picker.device() is found
    assert w.model_page.horizontalScrollBar().maximum() == 0, f"Model & Precision scrolls sideways with {device}"
    assert w.model_page.verticalScrollBar().maximum() == 0, f"Model & Precision scrolls with {device}"
    w.dataset_page.shutdown()
