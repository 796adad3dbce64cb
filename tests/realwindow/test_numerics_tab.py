"""The Numerics tab after a real demo run, opened with a click, at 1920×1080 and at 1366×768 (issue 27 #8: its
charts were ~40 px tall at both, their ticks overlapping): each plot gets a usable height, and the Log tab gives the
training charts back their place. Screenshots of both in artifacts/screenshots/."""

from __future__ import annotations

from pathlib import Path

from conftest import ARTIFACTS
from PIL import Image
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QTabWidget
from xinput import open_page, pump, train_and_wait, wait_for

from guitrainer.ui.training.numerics_chart import PLOT_MIN_HEIGHT


def small_dataset(root: Path) -> Path:
    folder = root / "2_shapes"
    folder.mkdir(parents=True)
    for i in range(4):
        Image.new("RGB", (64, 64), (60 * i, 120, 200 - 40 * i)).save(folder / f"s{i}.png")
        (folder / f"s{i}.txt").write_text(f"shape {i}", encoding="utf-8")
    return folder


def click_tab(xin, tabs: QTabWidget, index: int) -> None:  # noqa: ANN001
    bar = tabs.tabBar()
    xin.click(bar, bar.tabRect(index).center())
    wait_for(lambda: tabs.currentIndex() == index, 10, f"the {tabs.tabText(index)} tab")
    pump(300)


def test_the_numerics_tab_has_room_at_1920_and_at_1366(main_window, xin, x_server, tmp_path):
    main_window.add_paths([str(small_dataset(tmp_path))])
    wait_for(lambda: len(main_window.dataset_page.items) == 4, 15, "the images")
    main_window.binding.set("schedule.max_steps", 3)
    main_window.binding.set("output.folder", str(tmp_path / "out"))
    train_and_wait(main_window, xin)
    page = main_window.training_page
    chart = main_window.numerics()
    assert chart is not None
    tabs = page.tabs
    for size in ("1920x1080", "1366x768"):
        if size == "1366x768":
            main_window.showNormal()
            wait_for(lambda: not main_window.isMaximized(), 10, "the window restored")
            main_window.resize(1366, 745)  # the window on a 1366×768 screen, its title bar aside (as test_window_fit)
            main_window.move(0, 0)
            pump(500)
        open_page(main_window, xin, "Training")
        click_tab(xin, tabs, 0)
        charts_height = page.charts_host.height()
        click_tab(xin, tabs, tabs.indexOf(chart))
        x_server.screenshot(ARTIFACTS / "screenshots" / f"numerics_tab_{size}.png")
        assert page.verticalScrollBar().maximum() == 0, f"{size}: the page scrolls with the Numerics tab open"
        assert chart.headroom_widget.height() >= PLOT_MIN_HEIGHT, (size, chart.headroom_widget.height())
        plot = chart.headroom_widget
        assert chart.rect().contains(QRect(plot.mapTo(chart, QPoint(0, 0)), plot.size())), f"{size}: the plot is cut"
        click_tab(xin, tabs, 0)  # back to the Log: the training charts as they were
        assert page.charts_host.isVisible() and page.charts_host.height() == charts_height
