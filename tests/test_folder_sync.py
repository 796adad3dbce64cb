"""core.dataset.folder_sync without Qt: the Dataset page's images and ``dataset.folders`` / ``dataset.exclude``
kept in step, both ways."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from guitrainer.base.paths import path_key
from guitrainer.core.dataset.folder_sync import (
    folders_of,
    images_per_folder,
    left_out_on_removal,
    reconcile,
    with_left_out,
)
from guitrainer.core.dataset.scan import DatasetItem


@dataclass
class Folder:
    path: str
    repeats: int = 1


def item(folder: Path, name: str, repeats: int = 1) -> DatasetItem:
    return DatasetItem(folder / name, (folder / name).with_suffix(".txt"), repeats=repeats, folder=folder)


def test_the_config_lists_each_folder_once_in_import_order_with_its_repeats(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    items = [item(b, "1.png", 3), item(a, "2.png", 2), item(b, "3.png", 3), item(a, "4.png", 2)]
    assert folders_of(items) == [(str(b), 3), (str(a), 2)]  # b was imported first
    assert images_per_folder(items) == {str(b): 2, str(a): 2}
    assert folders_of([]) == [] and images_per_folder([]) == {}


def test_removed_images_are_left_out_only_while_their_folder_stays(tmp_path):
    """a keeps one of its two images: the removed one must be named in ``dataset.exclude``, or reading a again
    brings it back. b loses its only image: b leaves ``dataset.folders``, so its image needs no entry."""
    a, b = tmp_path / "a", tmp_path / "b"
    a1, a2, b1 = item(a, "1.png"), item(a, "2.png"), item(b, "1.png")
    assert left_out_on_removal([a1, b1], remaining=[a2]) == [path_key(a1.image_path)]
    assert left_out_on_removal([a1, a2], remaining=[b1]) == []


def test_left_out_images_keep_their_order_and_are_never_listed_twice():
    assert with_left_out(["/z.png", "/m.png"], ["/b.png", "/m.png", "/a.png", "/b.png"]) == [
        "/z.png", "/m.png", "/a.png", "/b.png",
    ]  # fmt: skip
    assert with_left_out([], []) == []


def test_a_loaded_config_drops_other_folders_and_left_out_images_and_sets_repeats(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a1, a2, b1 = item(a, "1.png", 1), item(a, "2.png", 1), item(b, "1.png", 1)
    # the config names a as "~/a" with 4 repeats, leaves out a/2.png (spelled with ".."), and adds c, not b
    plan = reconcile([a1, a2, b1], [Folder("~/a", 4), Folder(str(c), 2)], [str(b / ".." / "a" / "2.png")])
    assert plan.gone == [a2, b1]
    assert plan.repeats_of(a1) == 4  # kept, with its folder's repeats from the config
    assert plan.repeats_of(b1) == 1  # not configured: keeps its own (it goes anyway)
    (request,) = plan.to_read  # a is shown already: only c is read
    assert request.paths == (c,) and request.repeats == 2 and request.recursive is False
    assert request.exclude == frozenset({path_key(a / "2.png")})


def test_an_unchanged_config_changes_nothing_unless_a_rescan_is_asked_for(tmp_path):
    a = tmp_path / "a"
    items = [item(a, "1.png", 2), item(a, "2.png", 2)]
    plan = reconcile(items, [Folder(str(a), 2)], [])
    assert plan.gone == [] and plan.to_read == [] and [plan.repeats_of(it) for it in items] == [2, 2]
    # dataset.exclude edited by hand: a is read again, for the images the edit brought back
    (request,) = reconcile(items, [Folder(str(a), 2)], [], rescan=True).to_read
    assert request.paths == (a,) and request.exclude == frozenset()


def test_an_empty_config_empties_the_page(tmp_path):
    items = [item(tmp_path / "a", "1.png"), item(tmp_path / "b", "1.png")]
    plan = reconcile(items, [], [])
    assert plan.gone == items and plan.to_read == []
