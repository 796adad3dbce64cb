"""Auto-caption panel on the Dataset page: a real (tiny, local ONNX) tagger run in its worker thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers.taggers import FakeHub, build_tiny_tagger
from PIL import Image
from PySide6.QtCore import QObject, Qt, Slot

from guitrainer.engine import captioners as cap
from guitrainer.ui.dataset import captioning
from guitrainer.ui.dataset.page import DatasetPage

TAGGED = "my char, long hair, ^_^"  # what the tiny tagger writes at general threshold 0.9


@pytest.fixture(scope="module")
def tagger(tmp_path_factory) -> Path:
    return build_tiny_tagger(tmp_path_factory.mktemp("tagger"))


@pytest.fixture
def page(dataset_page):
    return dataset_page


def load_images(page: DatasetPage, qtbot, folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"img{i:02d}.png"
        Image.new("RGB", (24 + 2 * i, 24), (20 * i % 255, 90, 160)).save(p)
        out.append(p)
    with qtbot.waitSignal(page.import_finished, timeout=10000):
        page.add_paths([folder])
    assert len(page.items) == n
    return out


def set_up(page: DatasetPage, source: str | Path, mode: str = "skip", scope: str = "all") -> None:
    panel = page.captioning
    page.tabs.setCurrentWidget(panel)  # the "Auto-caption" tab, as a user would open it
    panel.kind.setCurrentIndex(panel.kind.findData("wd14"))
    panel.source.setText(str(source))
    panel.general.setValue(0.9)
    panel.mode.setCurrentIndex(panel.mode.findData(mode))
    panel.scope.setCurrentIndex(panel.scope.findData(scope))


def run(page: DatasetPage, qtbot, mode: str) -> cap.CaptionRunResult:
    """Click Start and wait for the run to end and its thread to be gone."""
    panel = page.captioning
    panel.mode.setCurrentIndex(panel.mode.findData(mode))
    with qtbot.waitSignal(panel.run_finished, timeout=20000) as blocker:
        panel.start_button.click()
        assert panel.is_running()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)
    return blocker.args[0]


def captions(images: list[Path]) -> list[str | None]:
    return [p.with_suffix(".txt").read_text(encoding="utf-8") if p.with_suffix(".txt").exists() else None for p in images]


def assert_idle(panel) -> None:
    assert panel.start_button.isEnabled() and not panel.cancel_button.isEnabled()
    assert not panel.progress.isVisibleTo(panel) and not panel.is_running()


def test_modes_progress_buttons_and_one_undo_step_per_run(page, qtbot, tmp_path, tagger):
    images = load_images(page, qtbot, tmp_path / "set", 5)
    images[0].with_suffix(".txt").write_text("existing, smile", encoding="utf-8")
    page.captions.reload()
    panel = page.captioning
    set_up(page, tagger)
    page.show()
    assert_idle(panel)
    undo_base = page.undo_stack.count()

    # Skip: only uncaptioned images get a caption. Buttons flip as soon as it starts, back when it ends.
    with qtbot.waitSignal(panel.run_finished, timeout=20000) as blocker:
        panel.start_button.click()
        assert not panel.start_button.isEnabled() and panel.cancel_button.isEnabled()
        assert panel.progress.isVisible() and panel.progress.maximum() == 5 and panel.progress.value() == 0
    res = blocker.args[0]
    assert panel.progress.value() == panel.progress.maximum() == 5
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)
    assert_idle(panel)
    assert not res.cancelled and len(res.changes) == 4 and res.skipped == 1
    assert captions(images) == ["existing, smile"] + [TAGGED] * 4
    assert panel.status.text() == "Done: wrote 4 captions, skipped 1."
    assert {it.name: it.caption for it in page.items}["img03.png"] == TAGGED  # the grid's items follow
    assert page.undo_stack.count() == undo_base + 1 and "Auto-caption wrote 4 captions" in page.status.text()

    # Append: new tags go after the existing ones; captions that already have them are left alone.
    res = run(page, qtbot, "append")
    assert len(res.changes) == 1 and res.skipped == 4
    assert captions(images)[0] == "existing, smile, " + TAGGED

    # Overwrite: every differing caption is replaced.
    images[2].with_suffix(".txt").write_text("hand written", encoding="utf-8")
    res = run(page, qtbot, "overwrite")
    assert len(res.changes) == 2 and res.skipped == 3
    assert captions(images) == [TAGGED] * 5
    assert page.undo_stack.count() == undo_base + 3

    # Each run is one undo step.
    page.undo_stack.undo()
    assert captions(images) == ["existing, smile, " + TAGGED, TAGGED, "hand written", TAGGED, TAGGED]
    page.undo_stack.undo()
    page.undo_stack.undo()
    # img02's "hand written" came from another program after the first run: undoing that run would replace it,
    # so the undo refuses as a whole (no caption changed) and names the file
    assert captions(images) == ["existing, smile", TAGGED, "hand written", TAGGED, TAGGED]
    assert "no caption changed: img02.txt was changed by another program" in page.status.text()
    images[2].with_suffix(".txt").write_text(TAGGED, encoding="utf-8")  # back to what the run wrote
    page.undo_stack.redo()
    page.undo_stack.undo()
    assert captions(images) == ["existing, smile", None, None, None, None]  # as before the first run
    assert {it.name: it.caption for it in page.items}["img03.png"] == ""


class _Recorder(QObject):
    """Appends ``what`` to ``events`` when its slot is called (lives on the GUI thread)."""

    def __init__(self, events: list, what: object) -> None:
        super().__init__()
        self.events, self.what = events, what

    @Slot()
    def record(self) -> None:
        self.events.append(self.what)


def test_cancel_stops_mid_run_and_ends_the_thread(page, qtbot, tmp_path, tagger, monkeypatch):
    images = load_images(page, qtbot, tmp_path / "set", 12)  # the worker captions 4 per batch: 3 batches
    release = threading.Event()
    batches: list[int] = []
    real_caption = cap.WDTagger.caption

    def held_caption(self, imgs):  # batch 2 waits until the test has clicked Cancel
        batches.append(len(imgs))
        if len(batches) == 2:
            assert release.wait(10), "the test never released batch 2"
        return real_caption(self, imgs)

    monkeypatch.setattr(cap.WDTagger, "caption", held_caption)
    panel = page.captioning
    set_up(page, tagger)
    page.select_rows([0, 1])
    panel.scope.setCurrentIndex(panel.scope.findData("all"))  # not only the selection
    panel.start_button.click()
    thread = panel._thread
    assert thread is not None
    qtbot.waitUntil(lambda: panel.progress.value() == 4, timeout=20000)  # batch 1 is written, batch 2 held
    assert panel.status.text() == "Captioned 4 of 12…"
    assert not panel.start_button.isEnabled() and panel.cancel_button.isEnabled()

    events: list[object] = []
    panel.run_finished.connect(events.append)
    # queued, as the panel sees it; to a receiver of the test's own: a lambda's hidden receiver goes with the
    # thread when the panel deletes it, and the queued call then never arrived (a flake of the whole file)
    ended_seen = _Recorder(events, "thread finished")
    thread.finished.connect(ended_seen.record, Qt.ConnectionType.QueuedConnection)
    with qtbot.waitSignal(panel.run_finished, timeout=20000):
        panel.cancel_button.click()
        assert panel.status.text() == "Stopping after the current images…"
        release.set()
    qtbot.waitUntil(lambda: len(events) == 2 and not panel.is_running(), timeout=5000)
    res, ended = events  # the result first, then the thread ends (and the panel cleans up)
    assert ended == "thread finished"
    assert_idle(panel)
    assert res.cancelled and batches == [4, 4]
    assert len(res.changes) == 8 < len(images)
    assert captions(images) == [TAGGED] * 8 + [None] * 4
    assert panel.progress.value() == 8 and panel.progress.maximum() == 12
    assert panel.status.text() == "Cancelled: wrote 8 captions."
    page.undo_stack.undo()  # the 8 written before the cancel are still one step
    assert captions(images) == [None] * 12


def test_bad_model_folders_show_an_error_and_the_page_keeps_working(page, qtbot, tmp_path, tagger):
    images = load_images(page, qtbot, tmp_path / "set", 3)
    panel = page.captioning

    set_up(page, "", scope="all")
    panel.start_button.click()  # no model chosen: nothing starts
    assert panel.status.text() == "Choose the model folder first." and not panel.is_running()
    set_up(page, tagger, scope="selection")
    page.grid.selectionModel().clearSelection()
    panel.start_button.click()
    assert panel.status.text().startswith("No images to caption") and not panel.is_running()

    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"this is not an onnx model")
    (broken / "selected_tags.csv").write_bytes((tagger / "selected_tags.csv").read_bytes())
    for folder, why in ((incomplete, "missing model.onnx, selected_tags.csv"), (broken, "Cannot load")):
        set_up(page, folder, scope="all")
        with qtbot.waitSignal(panel.run_failed, timeout=20000) as blocker:
            panel.start_button.click()
        assert why in blocker.args[0]
        qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)
        assert_idle(panel)
        assert panel.status.text().startswith("Captioning failed: ") and why in panel.status.text()
        assert captions(images) == [None] * 3

    set_up(page, tagger, scope="all")  # a good model afterwards still works
    assert len(run(page, qtbot, "skip").changes) == 3


def test_hub_download_progress_shows_in_the_panel(page, qtbot, tmp_path, tagger, monkeypatch):
    monkeypatch.setattr(captioning, "hub_reachable", lambda *a, **k: True)  # the fake hub needs no network
    images = load_images(page, qtbot, tmp_path / "set", 3)
    hold = threading.Event()
    hub = FakeHub.from_folder(monkeypatch, tmp_path / "cache", tagger, pause={"selected_tags.csv": hold})
    size = len(hub.files["selected_tags.csv"])
    panel = page.captioning
    set_up(page, "someone/tiny-tagger")
    page.show()
    panel.start_button.click()
    # The second of two files is half-way: the status names it, the bar counts files and its bytes.
    want = f"Downloading selected_tags.csv 2/2 ({size // 2} B of {size} B)…"
    qtbot.waitUntil(lambda: panel.status.text() == want, timeout=20000)
    assert panel.progress.isVisible() and panel.progress.maximum() == 2000
    assert panel.progress.value() == int(1000 * (1 + (size // 2) / size))
    with qtbot.waitSignal(panel.run_finished, timeout=20000) as blocker:
        hold.set()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)
    assert hub.fetched == ["model.onnx", "selected_tags.csv"]
    assert len(blocker.args[0].changes) == 3 and captions(images) == [TAGGED] * 3
    assert panel.progress.value() == panel.progress.maximum() == 3  # then it counted images


def test_cancel_during_download_stops_it(page, qtbot, tmp_path, tagger, monkeypatch):
    monkeypatch.setattr(captioning, "hub_reachable", lambda *a, **k: True)  # the fake hub needs no network
    images = load_images(page, qtbot, tmp_path / "set", 2)
    hold = threading.Event()
    hub = FakeHub.from_folder(monkeypatch, tmp_path / "cache", tagger, pause={"model.onnx": hold})
    panel = page.captioning
    set_up(page, "someone/tiny-tagger")
    panel.start_button.click()
    qtbot.waitUntil(lambda: panel.status.text().startswith("Downloading model.onnx 1/2 ("), timeout=20000)
    with qtbot.waitSignal(panel.run_finished, timeout=20000) as blocker:
        panel.cancel_button.click()
        hold.set()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)
    assert_idle(panel)
    assert blocker.args[0].cancelled and hub.fetched == []  # stopped inside the first file
    assert panel.status.text() == "Cancelled: wrote 0 captions."
    assert captions(images) == [None, None]


def test_known_captioners_fill_the_source_and_offline_says_so_at_once(page, qtbot, tmp_path, monkeypatch):
    """A known model is picked from the list (hub id filled in); offline, the panel says "No network" at
    once, with no download tried and no raw socket error."""
    images = load_images(page, qtbot, tmp_path / "set", 2)
    panel = page.captioning
    panel.kind.setCurrentIndex(panel.kind.findData("wd14"))
    texts = [panel.suggested.itemText(i) for i in range(panel.suggested.count())]
    assert any("SmilingWolf/" in t and "MB download" in t for t in texts)
    panel.kind.setCurrentIndex(panel.kind.findData("blip"))
    texts = [panel.suggested.itemText(i) for i in range(panel.suggested.count())]
    assert any("Salesforce/blip" in t for t in texts) and not any("SmilingWolf" in t for t in texts)
    panel.kind.setCurrentIndex(panel.kind.findData("wd14"))
    panel.suggested.setCurrentIndex(1)
    panel.suggested.activated.emit(1)
    hub_id = panel.suggested.itemData(1)
    assert panel.source.text() == hub_id

    import huggingface_hub

    tried: list[str] = []
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda *a, **k: tried.append("list") or [])
    monkeypatch.setattr(captioning, "hub_reachable", lambda *a, **k: False)
    panel.scope.setCurrentIndex(panel.scope.findData("all"))
    with qtbot.waitSignal(panel.run_failed, timeout=10000):
        panel.start_button.click()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)
    text = panel.status.text()
    assert text.startswith("Captioning failed: No network:") and hub_id in text and "Errno" not in text
    assert tried == [] and captions(images) == [None, None]



def test_a_run_whose_thread_ends_before_start_returns_still_unlocks_the_panel(page, qtbot, tmp_path, monkeypatch):
    """The panel learns of its thread's end even when the thread is gone before ``start()`` returns (a run
    that fails at once on a busy machine): it is not left "running" with Start greyed out for good."""
    from PySide6.QtCore import QThread

    from guitrainer.ui import workers

    class EndsBeforeStartReturns(QThread):
        def start(self, *args) -> None:  # noqa: ANN002
            super().start(*args)
            assert self.wait(10000), "the worker thread did not end"

    monkeypatch.setattr(workers, "QThread", EndsBeforeStartReturns)
    monkeypatch.setattr(captioning, "hub_reachable", lambda *a, **k: False)  # fails at once: "No network"
    load_images(page, qtbot, tmp_path / "set", 2)
    panel = page.captioning
    set_up(page, "SmilingWolf/wd-vit-tagger-v3")
    with qtbot.waitSignal(panel.run_failed, timeout=10000):
        panel.start_button.click()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)
    assert panel.start_button.isEnabled() and not panel.cancel_button.isEnabled()
    panel.shutdown()  # nothing left to wait for (it raised on the deleted thread)
