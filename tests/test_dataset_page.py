"""DatasetPage: real drops, grid, caption editor (autosave, undo, encodings), tag tools, config sync."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.scan import Flag
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.dataset.page import DatasetPage

PALETTE = [(231, 111, 81), (244, 162, 97), (233, 196, 106), (42, 157, 143), (38, 70, 83), (120, 90, 160)]


def art(path: Path, size=(640, 640), seed: int = 0, mode: str = "RGB", **save) -> Path:
    """A small colourful picture (gradient sky, sun, hills) so screenshots show something."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    im = Image.new("RGB", size)
    d = ImageDraw.Draw(im)
    top, bottom = PALETTE[seed % 6], PALETTE[(seed + 2) % 6]
    for y in range(h):
        t = y / max(1, h - 1)
        d.line([(0, y), (w, y)], fill=tuple(int(a + (b - a) * t) for a, b in zip(top, bottom)))
    r = min(w, h) // 6
    cx, cy = w * (0.25 + 0.1 * (seed % 5)), h * 0.3
    d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(255, 240, 200))
    d.polygon([(0, h), (w * 0.35, h * 0.55), (w * 0.7, h), (w, h * 0.6), (w, h)], fill=PALETTE[(seed + 4) % 6])
    if mode != "RGB":
        im = im.convert(mode)
    im.save(path, **save)
    return path


def drop(page: DatasetPage, paths: list[Path], qtbot) -> None:
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = page.rect().center()
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(page, enter)
    assert enter.isAccepted()
    with qtbot.waitSignal(page.import_finished, timeout=10000):
        ev = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
        QApplication.sendEvent(page, ev)
        assert ev.isAccepted()


@pytest.fixture
def page(qtbot):
    binding = ConfigBinding(TrainingConfig())
    p = DatasetPage(binding)
    qtbot.addWidget(p)
    p.resize(1280, 860)
    yield p
    p.shutdown()


def by_name(page: DatasetPage) -> dict[str, ds.DatasetItem]:
    return {it.name: it for it in page.items}


def select(page: DatasetPage, name: str) -> None:
    rows = [r for r in range(page.proxy.rowCount()) if page.proxy.index(r, 0).data() == name]
    page.select_rows(rows)
    assert page.editor.item is not None and page.editor.item.name == name


def test_drop_imports_folders_and_files_and_rejects_others(page, qtbot, tmp_path):
    folder = tmp_path / "10_mychar"
    for i in range(3):
        art(folder / f"img{i}.png", seed=i)
    (folder / "img0.txt").write_text("mychar, smiling", encoding="utf-8")
    (folder / "notes.pdf").write_bytes(b"%PDF")
    loose = art(tmp_path / "other" / "loose.jpg", seed=4)
    text = tmp_path / "readme.md"
    text.write_text("hello")

    drop(page, [folder, loose, text], qtbot)
    assert sorted(by_name(page)) == ["img0.png", "img1.png", "img2.png", "loose.jpg"]
    assert by_name(page)["img0.png"].repeats == 10 and by_name(page)["img0.png"].caption == "mychar, smiling"
    report = page.last_report
    assert report is not None and report.added == 4
    assert {Path(p).name for p, _ in report.rejected} == {"notes.pdf", "readme.md"}
    assert "Not imported" in page.status.text() or "Added 4" in page.status.text()
    folders = page.binding.get("dataset.folders")
    assert [(Path(f.path).name, f.repeats) for f in folders] == [("10_mychar", 10), ("other", 1)]

    # Dropping the same folder again adds nothing and says so.
    drop(page, [folder], qtbot)
    assert len(page.items) == 4 and len(page.last_report.duplicates) == 3

    # Repeats are editable per folder and reach the config.
    page.set_folder_repeats(str(folder), 3)
    assert page.binding.get("dataset.folders")[0].repeats == 3
    assert by_name(page)["img1.png"].repeats == 3

    # Non-local URLs are refused.
    md = QMimeData()
    md.setUrls([QUrl("https://example.com/a.png")])
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(page, enter)
    assert not enter.isAccepted()


def test_autosave_is_debounced_atomic_and_undoable(page, qtbot, tmp_path, monkeypatch):
    art(tmp_path / "set" / "a.png")
    (tmp_path / "set" / "a.txt").write_text("old caption", encoding="utf-8")
    art(tmp_path / "set" / "b.png", seed=1)
    page.add_paths([tmp_path / "set"])
    qtbot.waitUntil(lambda: len(page.items) == 2)
    select(page, "a.png")
    cap = tmp_path / "set" / "a.txt"
    editor = page.editor
    editor.text.moveCursor(editor.text.textCursor().MoveOperation.End)
    qtbot.keyClicks(editor.text, ", new tag")
    assert editor.dirty and editor.state.property("state") == "unsaved"
    assert cap.read_text() == "old caption"  # nothing written yet: debounced
    qtbot.waitUntil(lambda: not editor.dirty, timeout=3000)
    assert cap.read_text() == "old caption, new tag"
    assert by_name(page)["a.png"].caption == "old caption, new tag"

    # A write that dies half-way keeps the old caption (atomic), and the editor says "not saved".
    import guitrainer.base.fileio as fileio

    real = Path.write_bytes

    def dying(self, data):
        real(self, data[:4])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.Path, "write_bytes", dying)
    qtbot.keyClicks(editor.text, " more")
    qtbot.waitUntil(lambda: editor.state.property("state") == "error", timeout=3000)
    monkeypatch.undo()
    assert cap.read_text() == "old caption, new tag"
    assert sorted(p.name for p in cap.parent.iterdir()) == ["a.png", "a.txt", "b.png"]  # no temp file left
    assert editor.flush() and cap.read_text() == "old caption, new tag more"

    # Undo restores the file byte for byte and shows it in the editor; redo brings the edit back.
    editor.undo()
    assert cap.read_text() == "old caption, new tag"
    editor.undo()
    assert cap.read_bytes() == b"old caption"
    assert editor.text.toPlainText() == "old caption"
    editor.redo()
    assert cap.read_text() == "old caption, new tag"

    # Typing in an image without a caption creates its caption file; undo removes it again.
    page.step_current(1)
    assert editor.item.name == "b.png"
    qtbot.keyClicks(editor.text, "fresh")
    page.step_current(-1)  # switching images saves at once
    assert (tmp_path / "set" / "b.txt").read_text() == "fresh"
    editor.undo()
    assert not (tmp_path / "set" / "b.txt").exists()


def test_non_utf8_caption_is_shown_but_never_rewritten(page, qtbot, tmp_path):
    art(tmp_path / "s" / "a.png")
    art(tmp_path / "s" / "b.png", seed=2)
    raw = "caf\xe9, red hair".encode("latin-1")
    (tmp_path / "s" / "a.txt").write_bytes(raw)
    page.add_paths([tmp_path / "s"])
    qtbot.waitUntil(lambda: len(page.items) == 2)
    select(page, "a.png")
    assert page.editor.text.toPlainText() == "caf\xe9, red hair"  # read as Windows-1252, not with U+FFFD
    assert page.editor.warning.isVisibleTo(page.editor) and "Windows-1252" in page.editor.warning.text()
    assert Flag.CAPTION_NOT_UTF8 in by_name(page)["a.png"].flags
    page.step_current(1)
    page.step_current(-1)
    qtbot.wait(600)
    with qtbot.waitSignal(page.tag_operation_finished, timeout=10000) as done:
        page.captions.apply_tag_operation("Replace", lambda s: ds.find_replace(s, "red", "blue"), "all")
    edit = done.args[0]
    assert edit is not None and edit.count == 0 and edit.skipped_not_utf8 == 1
    assert (tmp_path / "s" / "a.txt").read_bytes() == raw


def test_bulk_replace_is_one_undo_step_restoring_bytes(page, qtbot, tmp_path):
    raw = {
        "a": b"red hair, smile\r\n",
        "b": "\ufeffred dress, caf\u00e9".encode(),
        "c": b"blue sky",
        "d": b"red, red, red",
    }
    for i, (stem, data) in enumerate(raw.items()):
        art(tmp_path / "b" / f"{stem}.png", seed=i)
        (tmp_path / "b" / f"{stem}.txt").write_bytes(data)
    page.add_paths([tmp_path / "b"])
    qtbot.waitUntil(lambda: len(page.items) == 4)
    qtbot.waitUntil(lambda: page.tag_tools.table.rowCount() > 0)
    before = page.undo_stack.count()
    page.tag_tools.scope.setCurrentIndex(page.tag_tools.scope.findData("all"))
    page.tag_tools.find.setText("red")
    page.tag_tools.replace.setText("green")
    with qtbot.waitSignal(page.tag_operation_finished, timeout=10000):
        page.tag_tools._find_replace()
    assert page.undo_stack.count() == before + 1
    assert "changed 3 captions" in page.status.text()
    assert (tmp_path / "b" / "d.txt").read_bytes() == b"green, green, green"
    assert by_name(page)["d.png"].caption == "green, green, green"

    # Selection scope: dedupe only the selected image.
    select(page, "d.png")
    page.tag_tools.scope.setCurrentIndex(page.tag_tools.scope.findData("selection"))
    with qtbot.waitSignal(page.tag_operation_finished, timeout=10000):
        page.tag_tools._dedupe()
    assert (tmp_path / "b" / "d.txt").read_bytes() == b"green"
    assert "changed 1 caption" in page.status.text()

    page.undo_stack.undo()
    page.undo_stack.undo()
    for stem, data in raw.items():
        assert (tmp_path / "b" / f"{stem}.txt").read_bytes() == data
    assert by_name(page)["a.png"].caption == "red hair, smile\r\n"


def test_filters_tag_table_and_keyboard(page, qtbot, tmp_path):
    art(tmp_path / "f" / "cap.png")
    (tmp_path / "f" / "cap.txt").write_text("cat, sunset")
    art(tmp_path / "f" / "nocap.png", seed=1)
    art(tmp_path / "f" / "small.png", size=(100, 100), seed=2)
    (tmp_path / "f" / "small.txt").write_text("dog, sunset")
    page.add_paths([tmp_path / "f"])
    qtbot.waitUntil(lambda: len(page.items) == 3)
    proxy = page.proxy
    names = lambda: sorted(proxy.index(r, 0).data() for r in range(proxy.rowCount()))  # noqa: E731
    page.filter_combo.setCurrentIndex(page.filter_combo.findData("uncaptioned"))
    assert names() == ["nocap.png"]
    page.filter_combo.setCurrentIndex(page.filter_combo.findData("flagged"))
    assert names() == ["small.png"]
    page.filter_combo.setCurrentIndex(page.filter_combo.findData("captioned"))
    assert names() == ["cap.png", "small.png"]
    page.filter_combo.setCurrentIndex(0)
    page.search.setText("DOG")
    assert names() == ["small.png"]
    page.search.clear()
    qtbot.waitUntil(lambda: page.tag_tools.table.rowCount() == 3)
    assert page.tag_tools.table.item(0, 0).text() == "sunset" and page.tag_tools.table.item(0, 1).text() == "2"
    row = next(r for r in range(3) if page.tag_tools.table.item(r, 0).text() == "cat")
    page.tag_tools.table.cellClicked.emit(row, 0)
    assert names() == ["cap.png"] and page.tag_chip.isVisibleTo(page)
    page.filter_by_tag("")

    # Keyboard: the page's actions carry the shortcuts (offscreen Qt has no active window to deliver them).
    assert page.next_action.shortcut().toString() == "Alt+Right"
    assert page.previous_action.shortcut().toString() == "Alt+Left"
    assert page.focus_caption_action.shortcut().toString() == "Ctrl+E"
    page.select_rows([0])
    first = page.editor.item
    page.next_action.trigger()
    assert page.editor.item is not first and page.grid.currentIndex().row() == 1
    page.previous_action.trigger()
    assert page.editor.item is first
    page.tabs.setCurrentIndex(1)
    page.focus_caption_action.trigger()
    assert page.tabs.currentWidget() is page.editor


def test_config_folders_drive_the_grid_and_removal_keeps_files(page, qtbot, tmp_path):
    art(tmp_path / "one" / "a.png")
    art(tmp_path / "two" / "b.png", seed=3)
    art(tmp_path / "two" / "sub" / "deep.png", seed=1)  # configured folders are read non-recursively
    cfg = TrainingConfig()
    cfg.dataset.folders = [DatasetFolder(str(tmp_path / "two"), 4)]
    with qtbot.waitSignal(page.import_finished, timeout=5000):
        page.binding.replace(cfg)
    assert [(it.name, it.repeats) for it in page.items] == [("b.png", 4)]
    with qtbot.waitSignal(page.import_finished, timeout=5000):
        page.add_paths([tmp_path / "one"])
    assert len(page.items) == 2
    assert [Path(f.path).name for f in page.binding.get("dataset.folders")] == ["two", "one"]
    select(page, "a.png")
    assert page.remove_selected() == 1
    assert (tmp_path / "one" / "a.png").exists()
    assert [Path(f.path).name for f in page.binding.get("dataset.folders")] == ["two"]
    summary = page.summary.summary
    assert summary is not None
    qtbot.waitUntil(lambda: page.summary.summary.image_count == 1)
    assert page.summary.summary.steps_per_epoch == 4


def test_screenshot_with_dataset(page, qtbot, tmp_path, artifacts_dir):
    root = tmp_path / "20_mychar"
    captions = [
        "mychar, 1girl, smiling, outdoors, sunset",
        "mychar, standing, city street, night",
        "mychar, portrait, looking at viewer",
        "",
        "mychar, sitting, cafe, window light",
        "mychar, full body, beach",
    ]
    sizes = [(768, 768), (640, 960), (960, 640), (700, 700), (1024, 576), (600, 900)]
    for i, (c, s) in enumerate(zip(captions, sizes)):
        art(root / f"mychar_{i:02d}.png", size=s, seed=i)
        if c:
            (root / f"mychar_{i:02d}.txt").write_text(c)
    art(root / "mychar_small.png", size=(300, 300), seed=3)
    (root / "mychar_small.txt").write_text("mychar, close-up")
    rot = root / "mychar_rotated.jpg"
    im = Image.open(art(tmp_path / "tmp.png", size=(800, 600), seed=5)).convert("RGB")
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(rot, exif=exif)
    art(root / "mychar_cmyk.jpg", size=(700, 700), seed=1, mode="CMYK")
    art(root / "mychar_alpha.png", size=(640, 640), seed=2, mode="RGBA")
    (root / "broken.png").write_bytes(b"")
    page.show()
    qtbot.waitExposed(page)
    drop(page, [root], qtbot)
    qtbot.waitUntil(lambda: len(page.items) == 11)
    select(page, "mychar_00.png")
    qtbot.waitUntil(lambda: not page.loader.is_pending(), timeout=10000)
    qtbot.wait(300)
    qtbot.waitUntil(lambda: not page.loader.is_pending(), timeout=10000)
    flags = by_name(page)
    assert Flag.EXIF_ROTATED in flags["mychar_rotated.jpg"].flags and Flag.EMPTY in flags["broken.png"].flags
    page.grab().save(str(artifacts_dir / "dataset_page.png"))
    page.tabs.setCurrentIndex(1)
    page.grab().save(str(artifacts_dir / "dataset_page_tags.png"))
    page.tabs.setCurrentIndex(3)
    page.grab().save(str(artifacts_dir / "dataset_page_summary.png"))
    page.tabs.setCurrentIndex(2)
    page.grab().save(str(artifacts_dir / "dataset_page_autocaption.png"))
    assert (artifacts_dir / "dataset_page.png").stat().st_size > 10000


# ---------------------------------------------------------------------- GUI-thread work stays small (issue 8)


def test_ready_thumbnails_are_announced_in_few_data_changed(page, qtbot, tmp_path):
    from guitrainer.ui.dataset.thumbnails import GRID_SIZE

    for i in range(12):
        art(tmp_path / "c" / f"img{i:02d}.png", size=(64, 64), seed=i)
    drop(page, [tmp_path / "c"], qtbot)
    page.loader.wait()
    qtbot.wait(50)
    model = page.model
    changes: list[tuple[int, int, list]] = []
    model.dataChanged.connect(lambda a, b, roles: changes.append((a.row(), b.row(), list(roles))))
    # Twelve thumbnails become ready in one batch, rows 0-4 and 7-11: two runs, two dataChanged.
    for row in [*range(5), *range(7, 12)]:
        model.loader.ready.emit(str(model.item(row).image_path), GRID_SIZE)
    model.loader.ready.emit(str(model.item(5).image_path), GRID_SIZE + 1)  # another size: not the grid's
    assert changes == []  # nothing until control returns to the event loop
    qtbot.waitUntil(lambda: len(changes) == 2)
    qtbot.wait(20)
    assert [(a, b) for a, b, _ in changes] == [(0, 4), (7, 11)]
    assert all(roles == [Qt.ItemDataRole.DecorationRole] for _, _, roles in changes)


def test_thumbnail_loader_hands_results_over_in_batches(qtbot, tmp_path):
    from guitrainer.ui.dataset.thumbnails import ThumbnailLoader

    paths = [str(art(tmp_path / f"t{i}.png", size=(80, 60), seed=i)) for i in range(6)]
    (tmp_path / "bad.png").write_bytes(b"not a png")
    loader = ThumbnailLoader(disk_dir=False, threads=2)
    ready: list[str] = []
    loader.ready.connect(lambda p, _s: ready.append(p))
    for p in [*paths, str(tmp_path / "bad.png")]:
        assert loader.get(p, 32) is None
    qtbot.waitUntil(lambda: not loader.is_pending(), timeout=10000)
    assert sorted(ready) == sorted([*paths, str(tmp_path / "bad.png")])
    assert all(loader.get(p, 32) is not None for p in paths)
    assert loader.failed(str(tmp_path / "bad.png"), 32)
    loader.shutdown()


def test_summary_in_slices_equals_one_summarize(tmp_path):
    import random

    from guitrainer.core.dataset.report import SummaryBuilder, SummaryParams

    rng = random.Random(7)
    sizes = [(1024, 1024), (1024, 768), (768, 1024), (640, 1536), (300, 200), (0, 0), (2000, 900)]
    flags = [set(), {Flag.SMALL}, {Flag.EMPTY}, {Flag.ALPHA, Flag.CMYK}, {Flag.UNREADABLE}]
    items = []
    for i in range(537):
        w, h = rng.choice(sizes)
        cap = ", ".join(rng.sample(["a", "b", "Cat", "cat", "dog", "x y", "sunset"], rng.randint(0, 4)))
        items.append(
            ds.DatasetItem(
                image_path=tmp_path / f"{i}.png",
                caption_path=tmp_path / f"{i}.txt",
                caption=cap,
                caption_exists=rng.random() < 0.8,
                repeats=rng.choice([1, 1, 3, 10]),
                flags=set(rng.choice(flags)),
                width=w,
                height=h,
            )
        )
    builder = SummaryBuilder(slice_size=50)
    for params in (
        SummaryParams(512, True, 256, 1024, 64, 1),
        SummaryParams(768, True, 256, 1536, 64, 4),
        SummaryParams(512, False, 256, 1024, 64, 3),
    ):
        expected = ds.summarize(
            items, params.resolution, bucketing=params.bucketing, min_side=params.min_side,
            max_side=params.max_side, step=params.step, batch_size=params.batch_size,
        )  # fmt: skip
        steps = list(builder.run(items, params))
        assert sum(s is None for s in steps) > 5  # computed slice by slice
        summary, freq = steps[-1]
        assert summary == expected
        assert list(summary.resolution_histogram) == list(expected.resolution_histogram)
        assert list(summary.buckets) == list(expected.buckets)
        assert freq == ds.tag_frequency(it.caption for it in items)
    # Cached slices: one caption edit recomputes one slice only.
    items[3].caption = "brand new"
    steps = list(builder.run(items, SummaryParams(512, False, 256, 1024, 64, 3)))
    assert sum(s is None for s in steps) == 1
    assert steps[-1][1] == ds.tag_frequency(it.caption for it in items)
    with pytest.raises(ValueError):
        builder.compute(items, SummaryParams(512, True, 1024, 256, 64, 1))


def test_the_same_folder_dropped_twice_at_once_is_added_once(page, qtbot, tmp_path):
    for i in range(30):
        art(tmp_path / "d" / f"img{i:02d}.png", size=(64, 64), seed=i)
    first = page.add_paths([tmp_path / "d"])
    with qtbot.waitSignal(page.import_finished, timeout=10000):
        second = page.add_paths([tmp_path / "d"])  # before the first import is done
    qtbot.waitUntil(lambda: not page.is_loading())
    assert len(page.items) == 30
    assert first.added + second.added == 30 and len(first.duplicates) + len(second.duplicates) == 30
    qtbot.waitUntil(lambda: page.summary.summary is not None and page.summary.summary.image_count == 30)


def _trained(page):
    """The image names training would use: the engine's own reading of the config."""
    from guitrainer.engine.data import collect_items

    return sorted(Path(it.image).name for it in collect_items(page.binding.config.dataset))


def test_loose_images_from_a_bigger_folder_train_only_those(page, qtbot, tmp_path):
    downloads = tmp_path / "Downloads"
    chosen = [art(downloads / f"pick{i}.png", seed=i) for i in range(2)]
    for i in range(3):
        art(downloads / f"other{i}.png", seed=10 + i)
    drop(page, chosen, qtbot)
    report = page.last_report
    assert report.added == 2 and report.partial_folders == [(str(downloads), 3)]
    assert "the other 3 images in Downloads are left out" in report.message()
    assert sorted(by_name(page)) == _trained(page) == ["pick0.png", "pick1.png"]
    assert len(page.binding.get("dataset.exclude")) == 3
    # Dropping the folder itself brings the rest in, for the grid and for training alike.
    drop(page, [downloads], qtbot)
    assert page.binding.get("dataset.exclude") == []
    assert sorted(by_name(page)) == _trained(page) == sorted(f"{n}.png" for n in ["other0", "other1", "other2", "pick0", "pick1"])


def test_removed_images_are_left_out_of_training_and_survive_a_reload(page, qtbot, tmp_path):
    folder = tmp_path / "5_cat"
    for i in range(4):
        art(folder / f"cat{i}.png", seed=i)
    drop(page, [folder], qtbot)
    page.select_rows([r for r in range(page.proxy.rowCount()) if page.visible_items()[r].name in ("cat1.png", "cat3.png")])
    assert page.remove_selected() == 2
    assert "from training" in page.status.text()
    assert sorted(by_name(page)) == _trained(page) == ["cat0.png", "cat2.png"]
    # The config alone (a saved preset, the CLI) reproduces the grid.
    cfg = page.binding.config.copy()
    page.binding.replace(type(cfg)())
    qtbot.waitUntil(lambda: not page.items, timeout=3000)
    page.binding.replace(cfg)
    qtbot.waitUntil(lambda: len(page.items) == 2 and not page.is_loading(), timeout=5000)
    assert sorted(by_name(page)) == ["cat0.png", "cat2.png"]
    # Editing the left-out list by hand brings an image back.
    page.binding.set("dataset.exclude", [p for p in cfg.dataset.exclude if not p.endswith("cat3.png")])
    qtbot.waitUntil(lambda: len(page.items) == 3 and not page.is_loading(), timeout=5000)
    assert sorted(by_name(page)) == _trained(page) == ["cat0.png", "cat2.png", "cat3.png"]


def test_the_flag_tooltip_says_why_an_image_cannot_be_read(page, qtbot, tmp_path):
    """Hovering an unreadable image's card tells the reason the scan found, not only "Cannot be read as an image"."""
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QToolTip

    folder = tmp_path / "set"
    art(folder / "fine.png")
    (folder / "phone.jpg").write_bytes(b"\x00\x00\x00\x18ftypheic" + bytes(64))  # a HEIC photo renamed .jpg
    page.show()
    qtbot.waitExposed(page)
    page.add_paths([folder])
    qtbot.waitUntil(lambda: len(page.items) == 2 and not page.is_loading(), timeout=10000)
    row = next(r for r in range(page.proxy.rowCount()) if page.proxy.index(r, 0).data() == "phone.jpg")
    rect = page.grid.visualRect(page.proxy.index(row, 0))
    viewport = page.grid.viewport()
    QApplication.sendEvent(viewport, QHelpEvent(QHelpEvent.Type.ToolTip, rect.center(), viewport.mapToGlobal(rect.center())))
    qtbot.waitUntil(QToolTip.isVisible, timeout=3000)
    tip = QToolTip.text()
    assert "Cannot be read as an image: phone.jpg is a HEIC / HEIF image" in tip, tip
    select(page, "phone.jpg")  # the caption editor's line under the image says it too
    assert "phone.jpg is a HEIC / HEIF image" in page.editor.info.text()
