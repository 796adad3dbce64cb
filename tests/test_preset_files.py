"""PresetFileActions on its own: it works from what its constructor is given (no main window), and tells the
window through its callbacks what became current."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QInputDialog, QMainWindow, QMenu

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import PresetStore
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.widgets import messages
from guitrainer.ui.window.preset_files import MAX_RECENT, PresetFileActions


class Window:
    """What the main window keeps of its presets, as the callbacks change it."""

    def __init__(self) -> None:
        self.current = ""
        self.shown: list[tuple[str, bool]] = []
        self.loaded: list[str] = []
        self.errors: list[tuple[str, str]] = []

    def show_preset(self, name: str, saved: bool) -> None:
        self.current = name
        self.shown.append((name, saved))

    def load_preset(self, name: str) -> bool:
        self.loaded.append(name)
        return True


@pytest.fixture
def actions(qtbot, tmp_path):  # noqa: ANN001, ANN201
    win = QMainWindow()
    qtbot.addWidget(win)
    state = Window()
    files = PresetFileActions(
        win,
        PresetStore(user_dir=tmp_path / "presets"),
        ConfigBinding(TrainingConfig()),
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
        QMenu(win),
        current_preset=lambda: state.current,
        show_preset=state.show_preset,
        load_preset=state.load_preset,
        error=lambda title, text: state.errors.append((title, text)),
    )
    return files, state, win


def menu_texts(menu: QMenu) -> list[str]:
    return [a.text() for a in menu.actions()]


def test_save_as_names_the_preset_and_the_window_hears_it_saved(actions, monkeypatch):
    files, state, win = actions
    assert menu_texts(files.recent_menu) == ["(none)"]  # filled when made
    files.binding.set("network.rank", 12)
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("  Mine ", True)))
    files.save_preset_as()
    assert state.shown == [("Mine", True)] and files.settings.value("last_preset") == "Mine"
    assert files.store.get("Mine").config().network.rank == 12
    assert win.statusBar().currentMessage() == "Saved preset “Mine”"
    files.binding.set("network.rank", 13)
    files.save_preset()  # a preset of the user's: saved under its name, no dialog
    assert state.shown[-1] == ("Mine", True) and files.store.get("Mine").config().network.rank == 13


def test_shipped_presets_are_not_overwritten_renamed_or_deleted(actions, monkeypatch):
    files, state, _win = actions
    state.current = next(n for n in files.store.names() if files.store.presets[n].shipped)
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("", False)))  # Save as: cancelled
    files.save_preset()
    files.rename_preset()
    files.delete_preset()
    assert [title for title, _ in state.errors] == ["Cannot rename", "Cannot delete"] and state.shown == []


def test_rename_and_delete_keep_the_unsaved_mark(actions, monkeypatch):
    files, state, _win = actions
    files.store.save("Mine", files.binding.config, "")
    state.current = "Mine"
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("Ours", True)))
    files.rename_preset()
    assert state.shown == [("Ours", False)] and "Ours" in files.store.presets and "Mine" not in files.store.presets
    monkeypatch.setattr(messages, "question", lambda *a, **k: "yes")
    files.delete_preset()
    assert state.shown[-1] == ("", False) and "Ours" not in files.store.presets


def test_an_opened_file_replaces_the_settings_and_leads_the_recent_list(actions, tmp_path: Path):
    files, state, win = actions
    paths = []
    for i in range(MAX_RECENT + 1):
        paths.append(tmp_path / f"c{i}.toml")
        paths[-1].write_text(f"[network]\nrank = {i + 1}\n", encoding="utf-8")
        assert files.open_file(str(paths[-1]))
    assert files.binding.get("network.rank") == MAX_RECENT + 1
    assert state.shown[-1] == ("", True) and win.windowTitle().startswith(f"c{MAX_RECENT}.toml — ")
    assert files.recent() == [str(p) for p in reversed(paths)][:MAX_RECENT]
    assert menu_texts(files.recent_menu) == files.recent()
    files.recent_menu.actions()[-1].trigger()  # the oldest one kept: opened again, now first
    assert files.recent()[0] == str(paths[1]) and files.binding.get("network.rank") == 2


def test_a_broken_file_is_an_error_and_changes_nothing(actions, tmp_path: Path):
    files, state, _win = actions
    bad = tmp_path / "bad.toml"
    bad.write_text("[schedule]\nepochs = 0\n", encoding="utf-8")
    before = files.binding.config.copy()
    assert files.open_file(str(bad)) is False
    ((title, text),) = state.errors
    assert title == "This file cannot be opened" and "line 2" in text
    assert files.binding.config == before and state.shown == [] and files.recent() == []
