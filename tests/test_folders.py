"""core.dataset.folders without Qt: the images each folder gives training."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from guitrainer.core.dataset.folders import list_images, training_images
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
