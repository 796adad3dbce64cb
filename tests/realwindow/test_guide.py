"""Help ▸ Guide, clicked in the menu bar, shows the guide inside the app (issue 27 #7), on a desktop where no program
opens ``.md`` files (``QDesktopServices.openUrl`` answers False, as it does there)."""

from __future__ import annotations

from conftest import ARTIFACTS
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QMenu
from xinput import pump, wait_for


def test_help_guide_clicked_in_the_menu_shows_the_guide(main_window, xin, x_server, monkeypatch):
    tried: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: tried.append(QUrl(url).toString()) and False))
    bar = main_window.menuBar()
    help_action = next(a for a in bar.actions() if a.text().replace("&", "") == "Help")
    xin.click(bar, bar.actionGeometry(help_action).center())
    menu: QMenu = help_action.menu()
    wait_for(menu.isVisible, 10, "the Help menu")
    pump(150)
    guide = next(a for a in menu.actions() if a.text().replace("&", "").startswith("Guide"))
    xin.click(menu, menu.actionGeometry(guide).center())
    wait_for(lambda: main_window.guide_dialog is not None and main_window.guide_dialog.isVisible(), 10, "the guide")
    dialog = main_window.guide_dialog
    wait_for(lambda: dialog.windowHandle() is not None and dialog.windowHandle().isExposed(), 10, "the guide drawn")
    pump(400)
    x_server.screenshot(ARTIFACTS / "screenshots" / "guide.png")
    assert tried == []
    assert "Set up and run" in dialog.browser.toPlainText()
    dialog.close()
