"""Shared test set-up: headless Qt, a private user-data folder, one torch thread."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# With 2 OpenMP threads on this 2-core machine CPU steps are sometimes 60x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after the environment above)

# One OpenMP thread: with two on this 2-core machine CPU steps are sometimes 60x slower. Importing
# torch here (not lazily) also means no test races a background thread that is importing it.
torch.set_num_threads(1)



#: the RAM every test's "computer" has: the start check, the meter's RAM line and Fit weigh it, so no test may
#: depend on the machine it runs on (a test that reads the real figure is marked ``real_machine_ram``)
TEST_MACHINE_RAM = 32 * 1024**3


@pytest.fixture(autouse=True)
def _fixed_machine_ram(request, monkeypatch):
    if request.node.get_closest_marker("real_machine_ram") is None:
        from guitrainer.core.memory import system_ram

        monkeypatch.setattr(system_ram, "machine_ram", lambda: TEST_MACHINE_RAM)


@pytest.fixture(scope="session")
def qapp(qapp_args, qapp_cls, pytestconfig):  # noqa: ANN001, ANN201 - pytest-qt's own fixtures
    """pytest-qt's QApplication, with the app's garbage collection on the GUI thread (guitrainer.ui.gui_gc): a test's
    worker threads (training, the lab, the dataset's) never collect the GUI's garbage, as in the app."""
    from PySide6.QtWidgets import QApplication

    from guitrainer.ui import gui_gc

    app = QApplication.instance() or qapp_cls(qapp_args)
    app.setApplicationName(pytestconfig.getini("qt_qapp_name"))
    gui_gc.install(app)
    return app


@pytest.fixture(autouse=True)
def _collect_like_python():
    """After each test, the collections Python would have made automatically (once the app's collector has turned
    automatic collection off, a test that never runs the event loop would otherwise keep all its cyclic garbage)."""
    yield
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is not None:
        from guitrainer.ui import gui_gc

        gui_gc.install(app).check()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Every test gets its own user data folder (presets, demo model cache) under tmp."""
    home = tmp_path_factory.getbasetemp() / "guitrainer_home"
    monkeypatch.setenv("GUITRAINER_HOME", str(home))
    yield
    torch.set_num_threads(1)  # a test (or the trainer) may have raised it


@pytest.fixture
def artifacts_dir():
    """Where tests save screenshots for people to look at (kept after the run)."""
    from pathlib import Path

    d = Path(__file__).resolve().parent.parent / "artifacts"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture
def window(qtbot, tmp_path):
    """The main window with its own presets folder and settings file, shown; its dataset threads stopped after."""
    from PySide6.QtCore import QSettings

    from guitrainer.config.presets import PresetStore
    from guitrainer.ui.window.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.dataset_page.shutdown()


@pytest.fixture
def shown_dataset_page(qtbot):
    """A Dataset page on a default config, shown at 1366x800; its threads stopped after."""
    from guitrainer.config import TrainingConfig
    from guitrainer.ui.binding import ConfigBinding
    from guitrainer.ui.dataset.page import DatasetPage

    p = DatasetPage(ConfigBinding(TrainingConfig()))
    qtbot.addWidget(p)
    p.resize(1366, 800)
    p.show()
    qtbot.waitExposed(p)
    yield p
    p.shutdown()


@pytest.fixture
def dataset_page(qtbot):
    """A Dataset page on a default config, 1280x860, not shown; its threads stopped after."""
    from guitrainer.config import TrainingConfig
    from guitrainer.ui.binding import ConfigBinding
    from guitrainer.ui.dataset.page import DatasetPage

    p = DatasetPage(ConfigBinding(TrainingConfig()))
    qtbot.addWidget(p)
    p.resize(1280, 860)
    yield p
    p.shutdown()
