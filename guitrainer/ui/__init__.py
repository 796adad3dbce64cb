"""PySide6 views. The only package that imports Qt."""
