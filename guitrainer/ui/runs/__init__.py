"""The Runs page: every run kept, its curves, a settings diff."""
