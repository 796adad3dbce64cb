"""base.paths.path_key: one spelling per folder, used by the config, the core checks and the UI alike."""

from __future__ import annotations

from guitrainer.base.paths import expand, path_key, same_path
from guitrainer.config import DatasetFolder, TrainingConfig


def _dogs(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATA", str(tmp_path / "data"))
    real = tmp_path / "data" / "dogs"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    return real


def test_every_spelling_of_a_folder_has_one_key_and_another_folder_another(tmp_path, monkeypatch):
    real = _dogs(tmp_path, monkeypatch)
    spellings = ["~/data/dogs", "$DATA/dogs", str(real / ".." / "dogs"), str(tmp_path / "link"), str(real) + "/"]
    assert {path_key(s) for s in spellings} == {str(real.resolve())}
    assert not same_path(tmp_path / "data" / "cats", real)  # a folder not made yet has its own key


def test_a_path_that_cannot_be_resolved_keeps_a_key_and_never_raises(tmp_path):
    """A symlink loop (RuntimeError on Python 3.11), a NUL byte (ValueError), a name too long for the file
    system (OSError) and a ~user that names nobody each get a key instead of an exception."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    loop = str(tmp_path / "a" / "x")
    assert path_key(loop) == loop
    assert path_key("dogs\0") != path_key("dogs")
    assert path_key(str(tmp_path / ("x" * 300))).endswith("x" * 300)
    assert path_key("~nosuchuser_guitrainer/dogs").endswith("~nosuchuser_guitrainer/dogs")
    assert str(expand("~nosuchuser_guitrainer/dogs")) == "~nosuchuser_guitrainer/dogs"


def test_the_config_refuses_a_class_folder_that_is_a_training_folder_in_any_spelling(tmp_path, monkeypatch):
    """The config and the Dataset page ask the same question with the same key: the class folder spelled
    ``$DATA/dogs`` is the training folder reached through a symlink."""
    real = _dogs(tmp_path, monkeypatch)
    cfg = TrainingConfig()
    cfg.dataset.folders = [DatasetFolder(str(tmp_path / "link"))]
    cfg.dataset.regularization_folders = [DatasetFolder("$DATA/dogs")]
    assert any(e.field == "dataset.regularization_folders" for e in cfg.errors())
    cfg.dataset.regularization_folders = [DatasetFolder(str(real.parent / "cats"))]
    assert not any(e.field == "dataset.regularization_folders" for e in cfg.errors())
