"""The app's settings store (window geometry, recent models, dialog folders): one place that says which."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QSettings

from guitrainer.base import paths


def default_settings() -> QSettings:
    """The app's QSettings once the application has a name; else an INI file in the user data folder."""
    if QCoreApplication.organizationName():
        return QSettings()
    return QSettings(str(paths.user_data_dir() / "settings.ini"), QSettings.Format.IniFormat)
