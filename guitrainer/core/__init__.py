"""Pure-Python logic: no Qt, and no torch at import time."""
