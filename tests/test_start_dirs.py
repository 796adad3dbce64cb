"""File dialogs open where the user's files are, not in the app's install folder (the process's working
folder for a double-clicked app), and each kind of file remembers its own last folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QStandardPaths, Qt
from PySide6.QtWidgets import QFileDialog, QPushButton

from guitrainer.config import TrainingConfig
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.dataset.page import DatasetPage
from guitrainer.ui.training.charts import TrainingCharts


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    """A home folder of this test's own, with a Pictures folder (no XDG user-dirs file: Qt's default names)."""
    home = tmp_path / "home"
    (home / "Pictures").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    assert QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation) == str(home / "Pictures")
    return home


@pytest.fixture
def settings(tmp_path, monkeypatch):
    s = QSettings(str(tmp_path / "dialogs.ini"), QSettings.Format.IniFormat)
    monkeypatch.setattr(start_dirs, "default_settings", lambda: s)
    return s


@pytest.fixture
def dialogs(monkeypatch):
    """Stand-ins for Qt's file dialogs: record where each opened and answer with ``answers`` in turn."""
    opened: list[str] = []
    answers: list[str] = []

    def folder(_parent, _title, start="", *a, **k):
        opened.append(start)
        return answers.pop(0) if answers else ""

    def files(_parent, _title, start="", *a, **k):
        opened.append(start)
        return ([answers.pop(0)] if answers else []), ""

    def save(_parent, _title, start="", *a, **k):
        opened.append(start)
        return (answers.pop(0) if answers else ""), ""

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(folder))
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(files))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(save))
    return opened, answers


@pytest.fixture
def page(qtbot):
    p = DatasetPage(ConfigBinding(TrainingConfig()))
    qtbot.addWidget(p)
    yield p
    p.shutdown()


def test_add_folder_opens_in_pictures_then_next_to_the_last_folder_added(page, qtbot, settings, dialogs, tmp_path,
                                                                         monkeypatch, home):
    opened, answers = dialogs
    monkeypatch.chdir(tmp_path)  # the install folder of a double-clicked app
    qtbot.mouseClick(page.add_folder_button, Qt.MouseButton.LeftButton)  # cancelled
    assert opened[-1] == str(home / "Pictures") != os.getcwd()

    chosen = tmp_path / "art" / "10_mychar"
    chosen.mkdir(parents=True)
    answers.append(str(chosen))
    qtbot.mouseClick(page.add_folder_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(page.add_folder_button, Qt.MouseButton.LeftButton)
    assert opened[-1] == str(tmp_path / "art")  # the next pick can be a sibling folder

    qtbot.mouseClick(page.add_images_button, Qt.MouseButton.LeftButton)  # the same kind: images
    assert opened[-1] == str(tmp_path / "art")


def test_a_remembered_folder_that_is_gone_falls_back_and_kinds_do_not_mix(qtbot, settings, dialogs, tmp_path, home):
    opened, answers = dialogs
    gone = tmp_path / "gone" / "x"
    gone.mkdir(parents=True)
    start_dirs.remember("images", str(gone))
    (tmp_path / "gone" / "x").rmdir()
    (tmp_path / "gone").rmdir()
    assert start_dirs.start_dir("images") == str(home / "Pictures")

    charts = TrainingCharts()
    qtbot.addWidget(charts)
    exports = tmp_path / "exports"
    exports.mkdir()
    answers.append(str(exports / "mine.csv"))
    qtbot.mouseClick(charts.csv_button, Qt.MouseButton.LeftButton)
    assert Path(opened[-1]).name == "training_metrics.csv"
    assert Path(opened[-1]).parent == home
    qtbot.mouseClick(charts.png_button, Qt.MouseButton.LeftButton)
    assert opened[-1] == str(exports / "training_charts.png")  # charts remember their folder...
    assert start_dirs.start_dir("images") != str(exports)  # ...and images keep theirs


def test_a_setting_not_made_yet_opens_the_nearest_folder_that_exists(qtbot, settings, dialogs, home, monkeypatch, tmp_path):
    """The default output folder (~/guitrainer/output) does not exist before the first run: its dialog opens in
    the home folder, not in the working folder Qt falls back to."""
    from guitrainer.ui.output.page import OutputPage

    opened, _answers = dialogs
    monkeypatch.chdir(tmp_path)
    binding = ConfigBinding(TrainingConfig())
    assert binding.get("output.folder") == "~/guitrainer/output"
    out = OutputPage(binding)
    qtbot.addWidget(out)
    browse = out.findChild(QPushButton, "browse_output_folder")
    qtbot.mouseClick(browse, Qt.MouseButton.LeftButton)
    assert opened[-1] == str(home)
    (home / "guitrainer" / "output").mkdir(parents=True)
    qtbot.mouseClick(browse, Qt.MouseButton.LeftButton)
    assert opened[-1] == str(home / "guitrainer" / "output")
    assert start_dirs.start_near("madebyollin/sdxl-vae-fp16-fix", "models") == str(home)  # a hub id: the usual


def test_continue_from_lora_first_opens_where_the_app_writes_loras(qtbot, settings, home, monkeypatch, tmp_path):
    from guitrainer.ui.model.init_lora_row import InitLoraRow

    out = home / "guitrainer" / "output"
    out.mkdir(parents=True)
    opened: list[str] = []
    answer = str(tmp_path / "elsewhere" / "old.safetensors")
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        staticmethod(lambda _p, _t, start="", *a, **k: (opened.append(start) or answer, "")))
    row = InitLoraRow(ConfigBinding(TrainingConfig()))
    qtbot.addWidget(row)
    qtbot.mouseClick(row.file_button, Qt.MouseButton.LeftButton)
    assert opened[-1] == str(out)  # the first time: ~/guitrainer/output, the default output folder
    (tmp_path / "elsewhere").mkdir()
    qtbot.mouseClick(row.file_button, Qt.MouseButton.LeftButton)
    assert opened[-1] == str(tmp_path / "elsewhere")  # then where the last one was chosen
