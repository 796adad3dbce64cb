"""The window's status bar shows the Dataset page's messages (import report), for a few seconds."""

from __future__ import annotations

from PIL import Image
from PySide6.QtCore import QSettings

import guitrainer.ui.window.main_window as main_window
from guitrainer.config.presets import PresetStore
from guitrainer.ui.window.main_window import MainWindow


def test_status_bar_shows_the_dataset_import_report(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(main_window, "STATUS_TIMEOUT_MS", 300)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(window)
    folder = tmp_path / "set"
    folder.mkdir()
    Image.new("RGB", (64, 64), (200, 60, 60)).save(folder / "a.png")
    (folder / "notes.pdf").write_bytes(b"%PDF")
    try:
        with qtbot.waitSignal(window.dataset_page.import_finished, timeout=10000):
            window.add_paths([str(folder)])
        message = window.statusBar().currentMessage()
        assert message == window.dataset_page.status.text()
        assert "Added 1 image." in message and "Not imported: notes.pdf" in message
        qtbot.waitUntil(lambda: window.statusBar().currentMessage() == "", timeout=3000)  # it times out
    finally:
        window.dataset_page.shutdown()
