"""Bulk tag edits run off the GUI thread: responsive, locked while running, undoable, all or nothing."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QTimer

from guitrainer.config import TrainingConfig
from guitrainer.core.dataset import captions as caption_files
from guitrainer.core.dataset import scan as ds
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.dataset.page import DatasetPage

pytestmark = pytest.mark.slow  # every test here loads 600 images into the Dataset page and writes their captions (seconds each)

N = 600
TRIGGER = "Add trigger word “zz”"


def add_zz(text: str) -> str:
    return ds.add_trigger(text, "zz")


@pytest.fixture
def page(qtbot):
    p = DatasetPage(ConfigBinding(TrainingConfig()))
    qtbot.addWidget(p)
    p.resize(1280, 860)
    p.show()
    yield p
    p.shutdown()


@pytest.fixture
def captions(tmp_path: Path) -> dict[Path, bytes | None]:
    """N tiny images; their captions in every shape a bulk edit must restore byte for byte."""
    folder = tmp_path / "set"
    folder.mkdir()
    Image.new("RGB", (8, 8), (40, 120, 200)).save(tmp_path / "px.png")
    png = (tmp_path / "px.png").read_bytes()
    shapes: list[bytes | None] = [
        b"red hair, smile",
        b"red hair, smile\r\n",  # CRLF
        "\ufeffcaf\u00e9, red".encode(),  # BOM
        None,  # no caption file: the edit creates it, undo removes it
        "latin caf\xe9".encode("latin-1"),  # not UTF-8: left alone
    ]
    out: dict[Path, bytes | None] = {}
    for i in range(N):
        (folder / f"img{i:04d}.png").write_bytes(png)
        cap = folder / f"img{i:04d}.txt"
        data = shapes[i % len(shapes)]
        if data is not None:
            cap.write_bytes(data + f" {i}".encode() if i % len(shapes) != 4 else data)
        out[cap] = cap.read_bytes() if data is not None else None
    return out


def on_disk(caps: dict[Path, bytes | None]) -> dict[Path, bytes | None]:
    return {p: (p.read_bytes() if p.exists() else None) for p in caps}


def load(page: DatasetPage, qtbot, caps: dict[Path, bytes | None]) -> None:
    page.add_paths([next(iter(caps)).parent])
    qtbot.waitUntil(lambda: len(page.items) == N and not page.is_loading(), timeout=60000)


def slow_writes(monkeypatch, delay_s: float = 0.001, fail_at: int | None = None) -> list[int]:
    """Each caption write waits ``delay_s`` first (so the edit lasts, whatever the disk); optionally the
    ``fail_at``-th write raises "disk full". Returns the running count of writes."""
    real = caption_files.atomic_write_bytes  # the caption writes go through core/dataset/captions.py
    calls = [0]

    def write(path, data):
        calls[0] += 1
        if calls[0] == fail_at:
            raise OSError(28, "No space left on device", str(path))
        time.sleep(delay_s)
        real(path, data)

    monkeypatch.setattr(caption_files, "atomic_write_bytes", write)
    return calls


def assert_locked(page: DatasetPage, locked: bool) -> None:
    assert page.caption_jobs.busy is locked
    assert page.tag_tools.ops.isEnabled() is not locked and page.tag_tools.scope.isEnabled() is not locked
    assert page.editor.locked is locked and page.editor.text.isEnabled() is not locked
    assert page.undo_action.isEnabled() is not locked and page.redo_action.isEnabled() is not locked


def expected_after(caps: dict[Path, bytes | None]) -> dict[Path, bytes | None]:
    out = {}
    for p, raw in caps.items():
        if raw is None:
            out[p] = b"zz"
        else:
            c = ds.decode_caption(raw)
            out[p] = add_zz(c.text).encode() if c.was_utf8 else raw
    return out


def test_600_caption_edit_keeps_the_gui_thread_responsive(page, qtbot, captions, monkeypatch):
    """The 480 writes run on a worker thread and the GUI thread handles its events between them.

    Counted, not timed: each write records its thread and how many ticks a 10 ms GUI-thread timer had
    made by then. The longest GUI pause is printed, not asserted: on a shared machine it moves with the
    load, so a limit on it (0.25 s was asserted here) would fail for reasons not in the code;
    bench/caption_bulk.py measures it.
    """
    load(page, qtbot, captions)
    page.select_rows([0])
    slow_writes(monkeypatch, delay_s=0.002)  # 480 writes: >= 0.96 s of writing, on any disk
    slowed = caption_files.atomic_write_bytes
    ticks: list[float] = []
    writes: list[tuple[int, int]] = []  # (thread, GUI ticks so far) at each caption write

    def write(path, data):
        writes.append((threading.get_ident(), len(ticks)))
        slowed(path, data)

    monkeypatch.setattr(caption_files, "atomic_write_bytes", write)
    statuses: list[str] = []
    page.status_changed.connect(statuses.append)
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    with qtbot.waitSignal(page.tag_operation_finished, timeout=60000) as done:
        t0 = time.perf_counter()
        assert page.captions.apply_tag_operation(TRIGGER, add_zz, "all") is None  # returns at once: runs in a thread
        returned = time.perf_counter() - t0
        assert_locked(page, True)
    elapsed = time.perf_counter() - t0
    qtbot.wait(30)
    timer.stop()
    gaps = [b - a for a, b in zip([t0, *ticks], ticks)]
    during = writes[-1][1] - writes[0][1] if writes else 0
    print(
        f"\n{N} captions: edit {elapsed * 1000:.0f} ms, apply_tag_operation returned after "
        f"{returned * 1000:.1f} ms, max GUI-thread gap {max(gaps) * 1000:.1f} ms over {len(gaps)} ticks, "
        f"{during} ticks between the first and the last of {len(writes)} writes"
    )
    # by hand: 600 captions, every 5th not UTF-8 (left alone): 480 writes, none on the GUI thread
    assert len(writes) == N - N // 5 and all(thread != threading.get_ident() for thread, _ in writes)
    # the GUI thread ran its timer while the worker wrote (a GUI thread blocked until the end: 0)
    assert during >= 1
    edit = done.args[0]
    assert edit is not None and edit.count == N - N // 5 and edit.skipped_not_utf8 == N // 5
    assert on_disk(captions) == expected_after(captions)
    assert all(it.caption == ds.read_caption(it.caption_path).text for it in page.items)  # the grid follows
    assert page.editor.item is not None and page.editor.text.toPlainText() == page.editor.item.caption
    note = f" {N // 5} not UTF-8, left unchanged."
    assert page.status.text() == f"{TRIGGER}: changed {edit.count} captions (Ctrl+Z undoes it).{note}"
    assert any(re.fullmatch(rf"{TRIGGER}… \d+ / {edit.count:,}", s) for s in statuses), statuses
    assert page.undo_stack.count() == 1
    assert_locked(page, False)


def wait_idle(page: DatasetPage, qtbot) -> None:
    qtbot.waitUntil(lambda: not page.caption_jobs.busy, timeout=60000)


def test_bulk_undo_and_redo_run_in_the_background_and_restore_bytes(page, qtbot, captions):
    load(page, qtbot, captions)
    with qtbot.waitSignal(page.tag_operation_finished, timeout=60000):
        page.captions.apply_tag_operation(TRIGGER, add_zz, "all")
    after = expected_after(captions)
    assert on_disk(captions) == after

    page.undo_action.trigger()
    assert_locked(page, True)  # undo of 480 captions is written in the worker thread
    assert page.undo_stack.index() == 0
    page.editor.redo()  # refused while the captions are being written
    assert page.undo_stack.index() == 0
    wait_idle(page, qtbot)
    assert_locked(page, False)
    assert on_disk(captions) == captions  # byte for byte, and the created files are gone again
    assert page.status.text() == f"Undone: {TRIGGER} (480 captions)."
    assert {it.caption_path: it.caption for it in page.items} == {
        p: ds.decode_caption(raw).text for p, raw in captions.items()
    }

    statuses: list[str] = []
    page.status_changed.connect(statuses.append)
    page.redo_action.trigger()
    assert_locked(page, True)
    wait_idle(page, qtbot)
    assert statuses[0] == f"Redoing: {TRIGGER}…" and statuses[-1] == f"Redone: {TRIGGER} (480 captions)."
    assert on_disk(captions) == after and page.undo_stack.index() == 1
    assert all(it.caption.startswith("zz") or not it.caption_utf8 for it in page.items)


def test_a_write_failure_midway_changes_nothing_and_says_so(page, qtbot, captions, monkeypatch):
    load(page, qtbot, captions)
    calls = slow_writes(monkeypatch, delay_s=0, fail_at=300)
    with qtbot.waitSignal(page.tag_operation_finished, timeout=60000) as done:
        page.captions.apply_tag_operation(TRIGGER, add_zz, "all")
    assert done.args[0] is None
    assert calls[0] > 300  # 299 written, the 300th failed, then the ones written were put back
    assert on_disk(captions) == captions
    assert not list(next(iter(captions)).parent.glob(".*.tmp"))
    assert page.undo_stack.count() == 0
    status = page.status.text()
    assert status.startswith(f"{TRIGGER}: nothing changed, a caption could not be written (")
    assert "No space left on device" in status
    assert_locked(page, False)
    monkeypatch.undo()

    # An undo that fails half-way leaves the edit applied and the undo stack where it was.
    with qtbot.waitSignal(page.tag_operation_finished, timeout=60000):
        page.captions.apply_tag_operation(TRIGGER, add_zz, "all")
    after = expected_after(captions)
    slow_writes(monkeypatch, delay_s=0, fail_at=100)
    page.undo_action.trigger()
    wait_idle(page, qtbot)
    assert on_disk(captions) == after
    assert page.undo_stack.index() == 1 and page.undo_stack.canUndo()
    assert page.status.text().startswith("Undo failed, no caption changed:")
    monkeypatch.undo()
    page.undo_action.trigger()  # and it can be undone once the disk has room again
    wait_idle(page, qtbot)
    assert on_disk(captions) == captions and page.undo_stack.index() == 0


def test_small_edits_stay_synchronous_and_a_busy_page_queues(page, qtbot, captions):
    load(page, qtbot, captions)
    page.select_rows(list(range(10)))
    selected = {it.caption_path: captions[it.caption_path] for it in page.selected_items()}
    with qtbot.waitSignal(page.tag_operation_finished, timeout=10000) as done:
        edit = page.captions.apply_tag_operation(TRIGGER, add_zz, "selection")
        assert not page.caption_jobs.busy
    assert edit is done.args[0] and edit.count == 8  # 2 of the 10 are not UTF-8
    assert on_disk(selected) == expected_after(selected)
    page.undo_stack.undo()  # 8 captions: written at once
    assert not page.caption_jobs.busy
    assert on_disk(selected) == selected

    # A job running: a second edit (even a small one) waits its turn instead of writing alongside it.
    finished: list[object] = []
    page.tag_operation_finished.connect(finished.append)
    page.captions.apply_tag_operation(TRIGGER, add_zz, "all")
    page.captions.apply_tag_operation("Sort tags", ds.sort_tags, "selection")
    assert finished == []
    qtbot.waitUntil(lambda: len(finished) == 2, timeout=60000)
    assert [e.description for e in finished] == [TRIGGER, "Sort tags"]
    assert page.undo_stack.count() == 2 and not page.caption_jobs.busy
