"""Issue 27 #7: Help ▸ Guide shows the guide inside the app (rendered Markdown), and no open with the desktop's
programs is ignored: where none opens the output folder or a link, a message says what and where, and copies the
path on request. ``QDesktopServices.openUrl`` answers False here as on a desktop with no program for the thing."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication, QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox, QPushButton

from guitrainer.ui.window.guide_dialog import IMAGE_WIDTH


@pytest.fixture
def nothing_opens(monkeypatch) -> list[str]:
    """Every open with the desktop fails (no file manager, no program for .md, no browser); the URLs tried."""
    tried: list[str] = []

    def refuse(url: QUrl) -> bool:
        tried.append(url.toString())
        return False

    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(refuse))
    return tried


def menu_action(window, menu_title: str, text: str):  # noqa: ANN001, ANN201
    menu = next(a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == menu_title)
    return next(a for a in menu.actions() if a.text().replace("&", "").startswith(text))


def open_box(parent, name: str) -> QMessageBox | None:
    return next((b for b in parent.findChildren(QMessageBox, name) if b.isVisible()), None)


def test_help_guide_shows_the_readme_inside_the_app(window, qtbot, nothing_opens):
    menu_action(window, "Help", "Guide").trigger()
    dialog = window.guide_dialog
    assert dialog is not None and dialog.isVisible()
    assert nothing_opens == []  # no program for .md files is needed
    shown = dialog.browser.toPlainText()
    assert "Set up and run" in shown and "## Set up and run" not in shown  # the Markdown is rendered
    doc = dialog.browser.document()
    assert doc.toMarkdown().count("](docs/screens/") >= 5
    image = doc.resource(QTextDocument.ResourceType.ImageResource, QUrl("docs/screens/dataset_1366x768.png"))
    assert image is not None and not image.isNull()  # its pictures are found beside it
    widths = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isImageFormat():
                widths.append(fmt.toImageFormat().width())
            it += 1
        block = block.next()
    assert widths and max(widths) <= IMAGE_WIDTH  # the 1366 px screenshots fit the window
    menu_action(window, "Help", "Guide").trigger()  # again: the same window comes up
    assert window.guide_dialog is dialog


def test_a_web_link_in_the_guide_that_nothing_opens_is_said(window, qtbot, nothing_opens):
    dialog = window.open_guide()
    dialog.browser.anchorClicked.emit(QUrl("https://download.pytorch.org/whl/cpu"))  # what a click on a link sends
    box = open_box(dialog, "open_failed_box")
    assert box is not None and "web browser" in box.text() and "https://download.pytorch.org/whl/cpu" in box.text()
    next(b for b in box.buttons() if b.text() == "Copy the address").click()
    assert QGuiApplication.clipboard().text() == "https://download.pytorch.org/whl/cpu"


def test_an_output_folder_nothing_opens_is_said_with_its_path_to_copy(window, qtbot, nothing_opens, tmp_path):
    folder = tmp_path / "out"
    window.binding.set("output.folder", str(folder))
    window.nav.setCurrentRow(window.pages.index(window.training_page))
    button = window.training_page.findChild(QPushButton, "open_output_button")
    assert button is not None
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)
    assert nothing_opens == [QUrl.fromLocalFile(str(folder)).toString()]
    box = open_box(window.training_page, "open_failed_box")
    assert box is not None and box.windowTitle() == "Could not open the output folder" and str(folder) in box.text()
    next(b for b in box.buttons() if b.text() == "Copy the path").click()
    assert QGuiApplication.clipboard().text() == str(folder)
    assert Path(folder).is_dir()


def test_no_open_with_the_desktop_bypasses_the_helper():
    """Every ``QDesktopServices.openUrl`` of the UI is the one in ui/widgets/desktop.py, which never ignores False."""
    ui = Path(__file__).resolve().parent.parent / "guitrainer" / "ui"
    callers = sorted(str(p.relative_to(ui)) for p in ui.rglob("*.py") if "openUrl(" in p.read_text(encoding="utf-8"))
    assert callers == ["widgets/desktop.py"]
