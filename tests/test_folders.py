"""core.dataset.folders without Qt: when two paths name one folder, and the images each folder gives training."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from guitrainer.core.dataset.folders import folder_key, list_images, training_images
from guitrainer.core.dataset.regularization import class_usage


@dataclass
class Folder:
    path: str
    repeats: int = 1


def images(folder: Path, *names: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        Image.new("RGB", (8, 8)).save(folder / name)
        out.append(folder / name)
    return out


def test_every_spelling_of_a_folder_has_one_key_and_another_folder_another(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATA", str(tmp_path / "data"))
    real = tmp_path / "data" / "dogs"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    spellings = ["~/data/dogs", "$DATA/dogs", str(real / ".." / "dogs"), str(tmp_path / "link"), str(real) + "/"]
    assert {folder_key(s) for s in spellings} == {str(real.resolve())}
    assert folder_key(str(tmp_path / "data" / "cats")) != folder_key(str(real))  # a folder not made yet has its key too


def test_a_path_that_cannot_be_resolved_is_its_own_key(tmp_path):
    """Before the move the dialog caught OSError only: a symlink loop (RuntimeError on Python 3.11) or a NUL
    byte typed into the folder box (ValueError) escaped from "Generate"."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    loop = str(tmp_path / "a" / "x")
    assert folder_key(loop) == loop
    assert folder_key("dogs\0") == "dogs\0"


def test_a_folder_gives_its_own_images_not_its_subfolders_nor_captions(tmp_path):
    a = images(tmp_path / "a", "2.png", "1.jpg")
    (tmp_path / "a" / "1.txt").write_text("a dog", encoding="utf-8")
    (tmp_path / "a" / "notes.pdf").write_bytes(b"%PDF")
    images(tmp_path / "a" / "sub", "3.png")
    assert list_images(tmp_path / "a") == [a[1], a[0]]  # listed in training's (name) order
    assert list_images(tmp_path / "missing") == []


def test_training_images_carry_their_folders_repeats(tmp_path):
    """2 images × 3 repeats + 1 image × 1 repeat = 7 draws per epoch, what the class-image count is suggested from."""
    a = images(tmp_path / "3_dog", "a.png", "b.png")
    b = images(tmp_path / "more", "c.png")
    draws = training_images([Folder(str(tmp_path / "3_dog"), 3), Folder(str(tmp_path / "more"))])
    assert draws == [(str(a[0]), 3), (str(a[1]), 3), (str(b[0]), 1)]
    assert class_usage(draws, []).train_draws == 7
    assert training_images([Folder(str(tmp_path / "gone"), 5)]) == []
