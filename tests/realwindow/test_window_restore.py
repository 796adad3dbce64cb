"""A window size saved on a small screen, or a small window, never comes back tiny on a big one (a tester's
next start on 1920 x 1080 after a session on 1366 x 768 opened at 844 x 510, scrollbars on every side)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from xinput import XInput, close_discarding, wait_for

from guitrainer.config.presets import PresetStore
from guitrainer.ui.window.main_window import MainWindow


def _open(tmp_path: Path, xin: XInput) -> MainWindow:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    w.show()
    wait_for(lambda: w.windowHandle() is not None and w.windowHandle().isExposed(), 10, "the window to be exposed")
    return w


def test_a_tiny_saved_window_opens_at_a_sensible_size_and_a_maximized_one_maximized(qapp, xin, tmp_path):  # noqa: ANN001
    first = _open(tmp_path, xin)
    first.showNormal()
    first.resize(844, 510)  # what the tester's next start got
    first.move(40, 40)
    wait_for(lambda: first.width() <= 900, 10, "the small window")
    close_discarding(first, xin)  # saves its geometry, as a quit does

    second = _open(tmp_path, xin)
    screen = second.screen().availableGeometry()
    wait_for(lambda: second.width() >= 1180, 10, lambda: f"a sensible width, got {second.size()}")
    assert second.width() >= 0.7 * screen.width() and second.height() >= 0.7 * screen.height()
    assert screen.contains(second.frameGeometry().center())
    second.showMaximized()
    wait_for(second.isMaximized, 10, "the window to maximize")
    close_discarding(second, xin)

    third = _open(tmp_path, xin)
    wait_for(third.isMaximized, 10, "last session's maximized window to open maximized")
    close_discarding(third, xin)
