"""The Training page: run controls, live charts, the Numerics tab, samples and the log."""
