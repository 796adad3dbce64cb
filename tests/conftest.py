"""Shared test set-up: headless Qt, a private user-data folder, one torch thread."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# With 2 OpenMP threads on this 2-core machine CPU steps are sometimes 60x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after the environment above)

# One OpenMP thread: with two on this 2-core machine CPU steps are sometimes 60x slower. Importing
# torch here (not lazily) also means no test races a background thread that is importing it.
torch.set_num_threads(1)



@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Every test gets its own user data folder (presets, demo model cache) under tmp."""
    home = tmp_path_factory.getbasetemp() / "guitrainer_home"
    monkeypatch.setenv("GUITRAINER_HOME", str(home))
    yield
    torch.set_num_threads(1)  # a test (or the trainer) may have raised it


@pytest.fixture
def artifacts_dir():
    """Where tests save screenshots for people to look at (kept after the run)."""
    from pathlib import Path

    d = Path(__file__).resolve().parent.parent / "artifacts"
    d.mkdir(exist_ok=True)
    return d
