"""The leaf layer: units, paths, file I/O and constants that every other layer shares (no Qt, no torch, nothing of ours below)."""
