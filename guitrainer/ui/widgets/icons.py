"""Icons for advice levels, from the style's standard pixmaps (so they follow the platform theme)."""

from __future__ import annotations

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QStyle, QWidget

LEVEL_ICONS = {
    "ok": QStyle.StandardPixmap.SP_DialogApplyButton,
    "info": QStyle.StandardPixmap.SP_MessageBoxInformation,
    "warning": QStyle.StandardPixmap.SP_MessageBoxWarning,
    "error": QStyle.StandardPixmap.SP_MessageBoxCritical,
}


def level_icon(widget: QWidget, level: str) -> QIcon:
    """The icon for an advice level ("ok", "info", "warning", "error") in ``widget``'s style."""
    return widget.style().standardIcon(LEVEL_ICONS[level])
