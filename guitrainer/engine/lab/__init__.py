"""The precision lab: a few real steps per precision, and what it reads from the machine (peak memory, energy)."""
