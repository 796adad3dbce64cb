"""Real-window tests: the app on a real X server (Xvfb) with a window manager (openbox).

The suite runs in a pytest process of its own (``pytest tests/realwindow``; ``make test`` runs it after
the offscreen suite), because a Qt process has one platform: here ``xcb`` on a private Xvfb display,
with fresh HOME and XDG folders. Input is real: xdotool moves the X pointer and types (see xinput.py).

Without Xvfb, openbox, xdotool or ImageMagick the suite skips with the reason, except in CI
(``CI=true``), where a missing tool stops the run with exit status 1: CI must run these tests.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from xinput import XInput, close_discarding, pump, wait_for
from xserver import XServer, missing_tools

HERE = Path(__file__).resolve().parent
ARTIFACTS = HERE.parent.parent / "artifacts"
SCREEN = (1920, 1080)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip (or, in CI, stop the run) when these tests cannot run: a mixed session, or tools missing."""
    mine = [it for it in items if HERE in Path(str(it.path)).resolve().parents]
    if not mine:
        return
    if len(mine) < len(items):
        reason = (
            "real-window tests run in a pytest process of their own (Qt has one platform per process): "
            "`pytest tests/realwindow`, as `make test` does"
        )
    else:
        missing = missing_tools()
        if not missing:
            return
        reason = "real-window tests need " + ", ".join(missing) + " (apt-get install them, as .ci/run does)"
        if _in_ci():
            pytest.exit(f"CI=true: {reason}", returncode=pytest.ExitCode.TESTS_FAILED)
    for it in mine:
        it.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def x_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[XServer]:
    """Xvfb + openbox for the session; Qt on xcb there; HOME and XDG folders fresh and empty."""
    from PySide6.QtWidgets import QApplication

    if QApplication.instance() is not None:
        pytest.fail("a QApplication exists already: run the real-window tests on their own", pytrace=False)
    shutil.rmtree(ARTIFACTS / "failures", ignore_errors=True)  # only this session's failures
    server = XServer(*SCREEN).start()
    home = tmp_path_factory.mktemp("home")
    for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"), ("XDG_CACHE_HOME", ".cache")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(home / sub)
    os.environ["HOME"] = str(home)
    os.environ["DISPLAY"] = server.display
    os.environ["QT_QPA_PLATFORM"] = "xcb"
    os.environ.pop("WAYLAND_DISPLAY", None)
    os.environ.pop("XAUTHORITY", None)
    from PySide6.QtCore import QCoreApplication

    from guitrainer import APP_NAME

    QCoreApplication.setOrganizationName(APP_NAME)
    QCoreApplication.setApplicationName(APP_NAME)
    yield server
    server.stop()


SHOT_SIZES = {"1366x768": (1366, 768), "1920x1080": (1920, 1080)}


@pytest.fixture(scope="session", autouse=True)
def screenshot_runs(request: pytest.FixtureRequest, x_server: XServer, tmp_path_factory: pytest.TempPathFactory):
    """The screenshot runs of this session's test_screenshots items, started first: they run alongside the rest."""
    from shoot_pages import ShotRun

    wanted = [
        it.callspec.id
        for it in request.session.items
        if it.path.name == "test_screenshots.py" and hasattr(it, "callspec") and not it.get_closest_marker("skip")
    ]
    runs = {}
    for size_id in wanted:
        out = ARTIFACTS / "screenshots" / size_id
        runs[size_id] = ShotRun(SHOT_SIZES[size_id], out, tmp_path_factory.mktemp(f"shots_{size_id}")).start()
    _SHOT_FOLDERS.extend(run.out for run in runs.values())
    yield runs
    for run in runs.values():
        run.stop()


_SHOT_FOLDERS: list[Path] = []


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    """Say where the screenshots are (before pytest's last line, which stays the summary)."""
    for folder in _SHOT_FOLDERS:
        pngs = sorted(folder.glob("*.png"))
        if pngs:
            terminalreporter.write_line(f"screenshots: {folder} ({len(pngs)} PNGs, layout.json)")
    failures = ARTIFACTS / "failures"
    if failures.is_dir() and any(failures.iterdir()):
        terminalreporter.write_line(f"screens of failed tests: {failures}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failing real-window test leaves a screenshot of the screen at that moment in artifacts/failures/."""
    report = yield
    our_display = os.environ.get("QT_QPA_PLATFORM") == "xcb" and os.environ.get("DISPLAY")  # x_server is up
    if report.failed and call.when == "call" and not hasattr(report, "wasxfail") and our_display:
        path = ARTIFACTS / "failures" / f"{item.name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["import", "-window", "root", str(path)], timeout=30, check=False)
        report.sections.append(("real-window screenshot", str(path)))
    return report


@pytest.fixture(scope="session")
def qapp(x_server: XServer, qapp_args, qapp_cls):  # noqa: ANN001 - pytest-qt's own fixtures
    """pytest-qt's QApplication, made after the X server is up, with the app's bootstrap (Fusion, locale)."""
    from guitrainer.app import create_app

    app = qapp_cls.instance() or qapp_cls(qapp_args)
    create_app()
    app.setQuitOnLastWindowClosed(False)  # one window closes per test; the session goes on
    assert app.platformName() == "xcb", app.platformName()
    yield app
    pump(50)
    app.shutdown()  # before the X server goes: Qt would report a broken X connection


@pytest.fixture
def xin(x_server: XServer) -> XInput:
    return XInput(x_server.env())


@pytest.fixture
def main_window(qapp, xin: XInput, tmp_path: Path):  # noqa: ANN001, ANN201
    """The main window (own settings file and presets folder), maximized on the 1920 x 1080 screen and focused."""
    from PySide6.QtCore import QSettings

    from guitrainer.config.presets import PresetStore
    from guitrainer.ui.window.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    w.showMaximized()  # what a person does on a 1920 x 1080 screen; screenshots show the window as it opens
    wait_for(lambda: w.windowHandle() is not None and w.windowHandle().isExposed(), 10, "the window to be exposed")
    xin.activate(w)
    yield w
    if w.isVisible():
        close_discarding(w, xin)
    # the window's Python-backed Qt objects that are garbage in cycles are collected here, in the GUI thread: left
    # for a later test's worker thread to collect (the precision lab's free_memory calls gc.collect), a QObject's
    # destructor there needs the GIL while holding Qt's signal-slot mutex that the GUI thread, holding the GIL,
    # waits for — a deadlock seen once as a hung CI run (both threads in futex waits)
    pump(50)
    gc.collect()
