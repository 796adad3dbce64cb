"""The memory estimate: VRAM (and system RAM) of a run as a sum of named parts, without torch."""
