"""A hub model that cannot be reached: plain words for the window and the command line alike."""

from __future__ import annotations

import pytest

from guitrainer.config import ModelConfig, TrainingConfig
from guitrainer.engine.models.loading import load_base_model
from guitrainer.engine.models.types import ModelLoadError
from guitrainer.engine.trainer import Trainer

GUI_ONLY_WORDS = ("Model page", "Model & Precision page", "re-download", "Save now")


def test_no_network_is_said_in_plain_words(monkeypatch):
    import huggingface_hub

    def no_network(*_a, **_k):
        raise OSError(-2, "Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    with pytest.raises(ModelLoadError) as ei:
        load_base_model(ModelConfig(base="someone/some-model"), offline=False)
    msg = str(ei.value)
    assert "someone/some-model" in msg and "could not be reached" in msg and "Errno" not in msg
    assert ei.value.advice and not any(w in " ".join(ei.value.advice) for w in GUI_ONLY_WORDS)


def test_a_missing_repo_is_named_as_such(monkeypatch):
    import huggingface_hub

    class RepositoryNotFoundError(Exception):  # the name huggingface_hub gives it
        pass

    def missing(*_a, **_k):
        raise RepositoryNotFoundError("404 Client Error. Repository Not Found for url: https://...")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", missing)
    with pytest.raises(ModelLoadError, match="no such model"):
        load_base_model(ModelConfig(base="someone/typo"), offline=False)


def test_offline_trainer_run_fails_with_advice_that_fits_the_command_line(tmp_path):
    # conftest sets HF_HUB_OFFLINE=1: a hub id that is not cached cannot be used
    cfg = TrainingConfig()
    cfg.model.base = "nobody/not-cached-anywhere"
    cfg.output.folder = str(tmp_path)
    summary = Trainer(cfg).run()
    assert summary.status == "failed" and "offline" in summary.message
    assert "nobody/not-cached-anywhere" in summary.message
    shown = summary.message + " ".join(summary.advice)
    assert not any(w in shown for w in GUI_ONLY_WORDS)
