"""The main window's File menu actions on presets and config files: save, rename, delete, import, open,
export, and the recent-files list.

:class:`PresetFileActions` does them for the window, which owns it: it is given the preset store, the
binding, the settings, the recent-files menu and the window's callbacks in its constructor.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QInputDialog, QMainWindow, QMenu

from guitrainer import APP_NAME
from guitrainer.config import ConfigError, load_toml, save_toml
from guitrainer.config.files import parse_toml_text, read_config_text
from guitrainer.config.presets import PresetStore, read_preset
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.widgets import messages

MAX_RECENT = 8


class PresetFileActions:
    """Preset and config-file actions of the File menu, and its "Open recent" list.

    Args:
        window: the dialogs' parent; its status bar says what was done, its title names an opened file.
        store: the presets (shipped and the user's).
        binding: the settings being edited: saved into presets, replaced by an opened file.
        settings: where the last preset and the recent files are kept.
        recent_menu: File ▸ Open recent, filled here.
        current_preset: the name of the current preset ("" for none).
        show_preset: ``show_preset(name, saved)``: ``name`` ("" for none) is the current preset now, in the
            window's picker and title; ``saved``: nothing is unsaved any more (it was just saved, or a file
            was just read), else the unsaved mark stays as it was.
        load_preset: load a preset's settings by name (True when it loaded).
        error: tell the user something could not be done: ``error(title, text)``.
    """

    def __init__(
        self,
        window: QMainWindow,
        store: PresetStore,
        binding: ConfigBinding,
        settings: QSettings,
        recent_menu: QMenu,
        *,
        current_preset: Callable[[], str],
        show_preset: Callable[[str, bool], None],
        load_preset: Callable[[str], bool],
        error: Callable[[str, str], None],
    ) -> None:
        self.window = window
        self.store = store
        self.binding = binding
        self.settings = settings
        self.recent_menu = recent_menu
        self._current = current_preset
        self._show_preset = show_preset
        self._load_preset = load_preset
        self._error = error
        self._fill_recent()

    def save_preset(self) -> None:
        name = self._current()
        preset = self.store.presets.get(name)
        if preset is None or preset.shipped:
            self.save_preset_as()
            return
        self._save_as_name(name, preset.description)

    def save_preset_as(self) -> None:
        current = self._current()
        suggestion = current if current and not self._is_shipped(current) else ""
        name, ok = QInputDialog.getText(self.window, "Save preset as", "Preset name:", text=suggestion)
        if ok and name.strip():
            self._save_as_name(name.strip(), "")

    def _is_shipped(self, name: str) -> bool:
        p = self.store.presets.get(name)
        return bool(p and p.shipped)

    def _save_as_name(self, name: str, description: str) -> None:
        if self._is_shipped(name):
            self._error("Cannot save", f"“{name}” is a shipped preset. Save under another name.")
            return
        try:
            self.store.save(name, self.binding.config, description)
        except (ValueError, OSError) as e:
            self._error("Could not save the preset", str(e))
            return
        self.settings.setValue("last_preset", name)
        self._show_preset(name, True)
        self.window.statusBar().showMessage(f"Saved preset “{name}”", 4000)

    def rename_preset(self) -> None:
        current = self._current()
        if not current or self._is_shipped(current):
            self._error("Cannot rename", "Only your own presets can be renamed.")
            return
        new, ok = QInputDialog.getText(self.window, "Rename preset", "New name:", text=current)
        if ok and new.strip():
            try:
                self.store.rename(current, new.strip())
            except (ValueError, OSError) as e:
                self._error("Could not rename", str(e))
                return
            self._show_preset(new.strip(), False)

    def delete_preset(self) -> None:
        name = self._current()
        if not name or self._is_shipped(name):
            self._error("Cannot delete", "Only your own presets can be deleted.")
            return
        if messages.question(self.window, "Delete preset", f"Delete your preset “{name}”?") != "yes":
            return
        self.store.delete(name)
        self._show_preset("", False)

    def import_preset_dialog(self) -> None:
        path = start_dirs.choose_file(self.window, "Import preset", "presets", "Presets (*.toml)")
        if path:
            self.import_preset(path)

    def import_preset(self, path: str) -> bool:
        try:
            preset = self.store.import_file(path)
        except (ConfigError, OSError) as e:
            self._error("This preset file cannot be used", str(e))
            return False
        self._show_preset(self._current(), False)  # the picker lists it, also if it cannot be loaded
        return self._load_preset(preset.name)

    # ------------------------------------------------------------------ files
    def open_file_dialog(self) -> None:
        path = start_dirs.choose_file(self.window, "Open preset or config", "presets", "TOML (*.toml)")
        if path:
            self.open_file(path)

    def open_file(self, path: str) -> bool:
        """Open a preset (has a [preset] table) or a config TOML; errors name the file and line.

        The file is read through :func:`~guitrainer.config.files.read_config_text` (``base.safe_open``): a named
        pipe is refused instead of hanging the window, ``/dev/zero`` or a huge file instead of filling memory."""
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if "preset" in parse_toml_text(read_config_text(path), path):
                    preset = read_preset(path)
                    cfg, label = preset.config(), preset.name
                else:
                    cfg, label = load_toml(path), Path(path).name
        except (ConfigError, OSError) as e:
            self._error("This file cannot be opened", str(e))
            return False
        self.binding.replace(cfg)
        self._show_preset("", True)
        self.window.setWindowTitle(f"{label} — {APP_NAME}")
        self._add_recent(path)
        notes = "; ".join(str(w.message) for w in caught)
        self.window.statusBar().showMessage(f"Opened {path}" + (f" ({notes})" if notes else ""), 8000)
        return True

    def export_config_dialog(self) -> None:
        path = start_dirs.choose_save_path(self.window, "Export config", "presets", "config.toml", "TOML (*.toml)")
        if path:
            try:
                save_toml(self.binding.config, path)
            except OSError as e:
                self._error("Could not export", str(e))

    def recent(self) -> list[str]:
        """The files opened last, newest first (at most :data:`MAX_RECENT`)."""
        value = self.settings.value("recent_files", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _add_recent(self, path: str) -> None:
        items = [p for p in self.recent() if p != path]
        items.insert(0, path)
        self.settings.setValue("recent_files", items[:MAX_RECENT])
        self._fill_recent()

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        items = self.recent()
        if not items:
            a = self.recent_menu.addAction("(none)")
            a.setEnabled(False)
        for p in items:
            self.recent_menu.addAction(p, lambda p=p: self.open_file(p))
