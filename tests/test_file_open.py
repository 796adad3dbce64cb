"""macOS hands double-clicked presets and Dock drops to the app as QFileOpenEvents: they reach add_paths."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QUrl
from PySide6.QtGui import QFileOpenEvent
from PySide6.QtWidgets import QApplication

from guitrainer.ui.window.single_instance import FileOpenFilter


def test_file_open_events_are_collected_and_emitted_once(qtbot, tmp_path):
    app = QApplication.instance()
    opened = FileOpenFilter()
    app.installEventFilter(opened)
    try:
        got: list[list[str]] = []
        opened.files_opened.connect(got.append)
        a, b = tmp_path / "a.toml", tmp_path / "images"
        QCoreApplication.sendEvent(app, QFileOpenEvent(str(a)))
        QCoreApplication.sendEvent(app, QFileOpenEvent(QUrl.fromLocalFile(str(b))))
        qtbot.waitUntil(lambda: bool(got), timeout=2000)
        assert got == [[str(a), str(b)]]  # Finder's one-event-per-file arrives as one batch
        qtbot.wait(200)
        assert len(got) == 1
    finally:
        app.removeEventFilter(opened)


def test_other_events_pass_through(qtbot):
    opened = FileOpenFilter()
    seen: list[int] = []

    class Probe(QObject):
        def event(self, e: QEvent) -> bool:
            seen.append(int(e.type()))
            return super().event(e)

    probe = Probe()
    probe.installEventFilter(opened)
    QCoreApplication.sendEvent(probe, QEvent(QEvent.Type.User))
    assert seen == [int(QEvent.Type.User)]  # not swallowed


def test_main_window_opens_what_the_filter_emits(qtbot, tmp_path, monkeypatch):
    """The wiring in app.main: a preset opened through Finder loads like one given on the command line."""
    import guitrainer.app as app_mod

    calls: list[list[str]] = []
    from guitrainer.ui.window import main_window

    monkeypatch.setattr(main_window.MainWindow, "add_paths", lambda self, paths: calls.append(list(paths)))
    monkeypatch.setattr(QApplication, "exec", lambda self=None: 0)
    monkeypatch.setattr(app_mod, "_install_sigint", lambda app: None)
    monkeypatch.setattr(app_mod.gc, "freeze", lambda: None)  # main() freezes start-up objects: not in a test run
    assert app_mod.main(["--new-instance"]) == 0
    windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, main_window.MainWindow)]
    filters = [o for o in QApplication.instance().children() if isinstance(o, FileOpenFilter)]
    assert filters
    preset = tmp_path / "mine.toml"
    QCoreApplication.sendEvent(QApplication.instance(), QFileOpenEvent(str(preset)))
    qtbot.waitUntil(lambda: bool(calls), timeout=2000)
    assert calls == [[str(preset)]]
    for f in filters:
        QApplication.instance().removeEventFilter(f)
        f.deleteLater()
    for w in windows:  # its delayed device probe and first-run check go with it
        w.close()
        w.deleteLater()
    qtbot.wait(10)
