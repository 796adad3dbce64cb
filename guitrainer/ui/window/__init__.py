"""The main window and what belongs to it: the File menu's presets, the workspace kept between starts, one instance per user, Help ▸ Environment and Guide."""
