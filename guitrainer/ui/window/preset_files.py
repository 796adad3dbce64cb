"""The main window's File menu actions on presets and config files: save, rename, delete, import, open,
export, and the recent-files list. A mixin of :class:`~guitrainer.ui.window.main_window.MainWindow` (it uses the
window's preset store, binding, settings and status bar)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QInputDialog

from guitrainer import APP_NAME
from guitrainer.config import ConfigError, load_toml, save_toml
from guitrainer.config.presets import read_preset
from guitrainer.ui import start_dirs
from guitrainer.ui.widgets import messages

if TYPE_CHECKING:
    from PySide6.QtCore import QSettings

    from guitrainer.config.presets import PresetStore
    from guitrainer.ui.binding import ConfigBinding

MAX_RECENT = 8


class PresetFileActions:
    """Preset and config-file actions; the window supplies ``store``, ``binding``, ``settings`` and the rest."""

    store: PresetStore
    binding: ConfigBinding
    settings: QSettings
    current_preset: str
    _dirty: bool

    def save_preset(self) -> None:
        preset = self.store.presets.get(self.current_preset)
        if preset is None or preset.shipped:
            self.save_preset_as()
            return
        self._save_as_name(self.current_preset, preset.description)

    def save_preset_as(self) -> None:
        suggestion = self.current_preset if self.current_preset and not self._is_shipped(self.current_preset) else ""
        name, ok = QInputDialog.getText(self, "Save preset as", "Preset name:", text=suggestion)
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
        self.current_preset = name
        self._dirty = False
        self.settings.setValue("last_preset", name)
        self._fill_preset_combo()
        self._update_title()
        self.statusBar().showMessage(f"Saved preset “{name}”", 4000)

    def rename_preset(self) -> None:
        if not self.current_preset or self._is_shipped(self.current_preset):
            self._error("Cannot rename", "Only your own presets can be renamed.")
            return
        new, ok = QInputDialog.getText(self, "Rename preset", "New name:", text=self.current_preset)
        if ok and new.strip():
            try:
                self.store.rename(self.current_preset, new.strip())
            except (ValueError, OSError) as e:
                self._error("Could not rename", str(e))
                return
            self.current_preset = new.strip()
            self._fill_preset_combo()
            self._update_title()

    def delete_preset(self) -> None:
        name = self.current_preset
        if not name or self._is_shipped(name):
            self._error("Cannot delete", "Only your own presets can be deleted.")
            return
        if messages.question(self, "Delete preset", f"Delete your preset “{name}”?") != "yes":
            return
        self.store.delete(name)
        self.current_preset = ""
        self._fill_preset_combo()
        self._update_title()

    def import_preset_dialog(self) -> None:
        path = start_dirs.choose_file(self, "Import preset", "presets", "Presets (*.toml)")
        if path:
            self.import_preset(path)

    def import_preset(self, path: str) -> bool:
        try:
            preset = self.store.import_file(path)
        except (ConfigError, OSError) as e:
            self._error("This preset file cannot be used", str(e))
            return False
        self._fill_preset_combo()
        return self.load_preset(preset.name)

    # ------------------------------------------------------------------ files
    def open_file_dialog(self) -> None:
        path = start_dirs.choose_file(self, "Open preset or config", "presets", "TOML (*.toml)")
        if path:
            self.open_file(path)

    def open_file(self, path: str) -> bool:
        """Open a preset (has a [preset] header) or a config TOML; errors name the file and line."""
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if "[preset]" in Path(path).read_text(encoding="utf-8", errors="replace"):
                    preset = read_preset(path)
                    cfg, label = preset.config(), preset.name
                else:
                    cfg, label = load_toml(path), Path(path).name
        except (ConfigError, OSError) as e:
            self._error("This file cannot be opened", str(e))
            return False
        self.binding.replace(cfg)
        self.current_preset = ""
        self._dirty = False
        self._fill_preset_combo()
        self.setWindowTitle(f"{label} — {APP_NAME}")
        self._add_recent(path)
        notes = "; ".join(str(w.message) for w in caught)
        self.statusBar().showMessage(f"Opened {path}" + (f" ({notes})" if notes else ""), 8000)
        return True

    def export_config_dialog(self) -> None:
        path = start_dirs.choose_save_path(self, "Export config", "presets", "config.toml", "TOML (*.toml)")
        if path:
            try:
                save_toml(self.binding.config, path)
            except OSError as e:
                self._error("Could not export", str(e))

    def _recent(self) -> list[str]:
        value = self.settings.value("recent_files", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _add_recent(self, path: str) -> None:
        items = [p for p in self._recent() if p != path]
        items.insert(0, path)
        self.settings.setValue("recent_files", items[:MAX_RECENT])
        self._fill_recent()

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        items = self._recent()
        if not items:
            a = self.recent_menu.addAction("(none)")
            a.setEnabled(False)
        for p in items:
            self.recent_menu.addAction(p, lambda p=p: self.open_file(p))

    # ------------------------------------------------------------------ dataset drops
