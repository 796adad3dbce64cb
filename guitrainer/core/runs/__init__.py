"""The run history: the SQLite run store, the run-state folder, what a stored run allows, comparing runs."""
