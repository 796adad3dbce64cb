"""The Runs page, driven the way a person does: clicks, Ctrl+clicks, typing, header clicks, dialogs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt

from guitrainer.config import TrainingConfig
from guitrainer.core.runs.state import STATE_FILE
from guitrainer.core.runs.store import RunStore
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.runs.page import RunsPage


def _config(**changes) -> dict:
    cfg = TrainingConfig()
    for path, value in changes.items():
        cfg.set(path.replace("__", "."), value)
    return cfg.to_dict()


def _add_run(store: RunStore, name: str, losses: list[float], *, batch: int = 2, status: str = "finished",
             created: float = 0.0, config: dict | None = None, **run) -> int:
    cfg = config or _config()
    run_id = store.begin_run(name=name, config=cfg, model="demo", precision=cfg["precision"]["training"],
                             total_steps=len(losses), now=created or None)  # fmt: skip
    rows = [(i, 1, v, 1e-3, None, 0.1, float(batch * i), None, None, 0) for i, v in enumerate(losses, 1)]
    store.write_batch(run_id, rows, run={"steps": len(losses), "final_loss": losses[-1], **run})
    store.end_run(run_id, status)
    return run_id


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        yield s


@pytest.fixture
def make_page(qtbot, tmp_path):
    def make(binding: ConfigBinding | None = None) -> RunsPage:
        page = RunsPage(binding or ConfigBinding(TrainingConfig()), store_path=tmp_path / "runs.sqlite3")
        qtbot.addWidget(page)
        page.resize(1200, 900)
        page.show()
        qtbot.waitExposed(page)
        qtbot.waitUntil(lambda: page.chart is not None, timeout=10_000)
        return page

    return make


def _click_row(qtbot, page: RunsPage, row: int, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    rect = page.table.visualRect(page.proxy.index(row, 0))
    qtbot.mouseClick(page.table.viewport(), Qt.MouseButton.LeftButton, modifier, rect.center())


def _row_of(page: RunsPage, name: str) -> int:
    names = [page.proxy.index(r, 0).data() for r in range(page.proxy.rowCount())]
    return names.index(name)


def test_list_shows_every_run_newest_first(make_page, store):
    _add_run(store, "old", [1.0, 0.8], created=1000.0)
    _add_run(store, "new", [0.9, 0.5, 0.25], created=2000.0, status="stopped")
    page = make_page()
    assert page.count_label.text() == "2 runs"
    cells = [[page.proxy.index(r, c).data() for c in range(8)] for r in range(2)]
    assert cells[0][0] == "new" and cells[0][4] == "3/3" and cells[0][5] == "0.2500" and cells[0][6] == "stopped"
    assert cells[1][0] == "old" and cells[1][5] == "0.8000" and cells[1][3] == "fp16"


def test_two_selected_runs_overlay_on_one_chart_by_step_or_images(qtbot, make_page, store):
    a = _add_run(store, "batch2", [1.0, 0.8, 0.6, 0.5], batch=2, created=1000.0)
    b = _add_run(store, "batch4", [0.9, 0.7], batch=4, created=2000.0)
    page = make_page()
    _click_row(qtbot, page, _row_of(page, "batch2"))
    assert page.selected_ids() == [a] and list(page.chart.curves) == [a]
    _click_row(qtbot, page, _row_of(page, "batch4"), Qt.KeyboardModifier.ControlModifier)
    assert sorted(page.selected_ids()) == sorted([a, b])
    assert sorted(page.chart.curves) == sorted([a, b])  # both on the one plot
    x, y = page.chart.curve_data(a)
    assert list(x) == [1, 2, 3, 4] and list(y) == [1.0, 0.8, 0.6, 0.5]
    page.chart.set_alignment("images")  # by images seen: batch 4's two steps span batch 2's four
    xa, _ = page.chart.curve_data(a)
    xb, yb = page.chart.curve_data(b)
    assert list(xa) == [2, 4, 6, 8] and list(xb) == [4, 8] and list(yb) == [0.9, 0.7]
    page.chart.smooth_check.setChecked(True)
    _, ys = page.chart.curve_data(a)
    assert ys[0] == pytest.approx(1.0) and ys[-1] > 0.5  # debiased EMA: starts at the first value, lags behind
    page.grab().save(str(Path(page.store_path).with_name("overlay.png")))


def test_settings_diff_of_two_runs_lists_exactly_the_changed_settings(qtbot, make_page, store):
    _add_run(store, "r16", [1.0], config=_config(network__rank=16, optimizer__lr=1e-4), created=1000.0)
    _add_run(store, "r32", [1.0], config=_config(network__rank=32, optimizer__lr=1e-4, precision__training="bf16"), created=2000.0)
    page = make_page()
    _click_row(qtbot, page, 0)
    _click_row(qtbot, page, 1, Qt.KeyboardModifier.ShiftModifier)
    # rows top to bottom: r32 (newer) first
    assert page.diff_rows() == [("network.rank", "32", "16"), ("precision.training", "bf16", "fp16")]
    assert page.diff_note.text() == "2 settings differ."
    assert page.diff_table.item(0, 0).text() == "Network: Rank (dim)"


def test_filter_by_text_and_status_and_sort_by_clicking_a_header(qtbot, make_page, store):
    _add_run(store, "cat-v1", [0.3], created=1000.0)
    _add_run(store, "cat-v2", [0.1], created=2000.0, status="failed")
    dog = _add_run(store, "dog", [0.2], created=3000.0)
    page = make_page()
    qtbot.keyClicks(page.filter_edit, "cat")
    assert page.count_label.text() == "2 of 3 runs"
    page.status_combo.setCurrentIndex(page.status_combo.findData("failed"))
    assert [page.proxy.index(r, 0).data() for r in range(page.proxy.rowCount())] == ["cat-v2"]
    page.filter_edit.clear()
    page.status_combo.setCurrentIndex(0)
    _click_row(qtbot, page, _row_of(page, "dog"))
    header = page.table.horizontalHeader()
    x = header.sectionViewportPosition(5) + header.sectionSize(5) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))
    losses = [page.proxy.index(r, 5).data() for r in range(3)]
    assert losses in (["0.1000", "0.2000", "0.3000"], ["0.3000", "0.2000", "0.1000"])
    assert page.selected_ids() == [dog] and _row_of(page, "dog") == 1  # the selection follows its run
    first = losses[0]
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))
    assert page.proxy.index(0, 5).data() != first  # the other way round


def test_load_settings_makes_the_run_config_current(qtbot, make_page, store, tmp_path):
    _add_run(store, "mine", [0.5], config=_config(network__rank=8, output__name="mine", schedule__resume_from=str(tmp_path)))
    binding = ConfigBinding(TrainingConfig())
    page = make_page(binding)
    _click_row(qtbot, page, 0)
    qtbot.mouseClick(page.load_button, Qt.MouseButton.LeftButton)
    assert binding.config.network.rank == 8 and binding.config.output.name == "mine"
    assert binding.config.schedule.resume_from == ""  # loaded as a fresh start


def test_resume_offered_only_where_the_state_is_this_runs(qtbot, make_page, store, tmp_path):
    state = tmp_path / "out" / "x_state"
    state.mkdir(parents=True)
    (state / STATE_FILE).write_text(json.dumps({"global_step": 2}))
    cfg = _config(network__rank=8)
    stopped = _add_run(store, "stopped", [1.0, 0.9], status="stopped", config=cfg, state_path=str(state), state_step=2)
    _add_run(store, "no-state", [1.0], status="failed", created=1.0)
    page = make_page()
    _click_row(qtbot, page, _row_of(page, "no-state"))
    assert not page.resume_button.isEnabled() and "no resumable state" in page.resume_button.toolTip()
    _click_row(qtbot, page, _row_of(page, "stopped"))
    assert page.resume_button.isEnabled()
    with qtbot.waitSignal(page.resume_requested) as blocker:
        qtbot.mouseClick(page.resume_button, Qt.MouseButton.LeftButton)
    resumed_cfg, path = blocker.args
    assert path == str(state) and resumed_cfg.network.rank == 8
    assert page.selected_ids() == [stopped]


def test_delete_lists_the_files_and_removes_them_only_when_ticked(qtbot, make_page, store, tmp_path):
    out = tmp_path / "out"
    (out / "a_state").mkdir(parents=True)
    lora = out / "a.safetensors"
    lora.write_bytes(b"x")
    keep = _add_run(store, "keep-files", [1.0], lora_path=str(lora), state_path=str(out / "a_state"), created=2000.0)
    page = make_page()
    _click_row(qtbot, page, _row_of(page, "keep-files"))
    qtbot.mouseClick(page.delete_button, Qt.MouseButton.LeftButton)
    dlg = page.delete_dialog
    assert dlg.isVisible()
    assert [dlg.file_list.item(i).text() for i in range(dlg.file_list.count())] == [str(lora), f"{out / 'a_state'}/"]
    assert not dlg.files_check.isChecked()
    qtbot.mouseClick(dlg.delete_button, Qt.MouseButton.LeftButton)
    assert lora.is_file() and (out / "a_state").is_dir()  # the record went, the files stayed
    assert store.run_row(keep) is None and page.count_label.text() == "0 runs"

    gone = _add_run(store, "remove-files", [1.0], lora_path=str(lora), state_path=str(out / "a_state"))
    page.refresh()
    _click_row(qtbot, page, 0)
    qtbot.mouseClick(page.delete_button, Qt.MouseButton.LeftButton)
    dlg = page.delete_dialog
    qtbot.mouseClick(dlg.files_check, Qt.MouseButton.LeftButton, pos=QPoint(8, dlg.files_check.height() // 2))  # on the box
    assert dlg.files_check.isChecked()
    qtbot.mouseClick(dlg.delete_button, Qt.MouseButton.LeftButton)
    assert not lora.exists() and not (out / "a_state").exists() and out.is_dir()
    assert store.run_row(gone) is None


def test_a_corrupt_store_is_reported_on_the_page_and_replaced(qtbot, make_page, tmp_path):
    db = tmp_path / "runs.sqlite3"
    db.write_bytes(b"garbage" * 100)
    page = make_page()
    assert page.notice.isVisible() and "moved to" in page.notice.text()
    assert page.count_label.text() == "0 runs"
    moved = list(tmp_path.glob("runs.sqlite3.damaged-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == b"garbage" * 100


def test_interrupted_run_without_a_state_is_only_reported(qtbot, make_page, store):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    store.begin_run(name="crashed", config=_config(), pid=p.pid)
    page = make_page()
    said: list[str] = []
    page.status_changed.connect(said.append)
    dead = page.check_interrupted()
    assert [r.name for r in dead] == ["crashed"] and page.interrupted_box is None
    assert "saved a state" in said[-1]
    assert page.proxy.index(0, 6).data() == "interrupted"


def test_main_window_has_the_runs_page(qtbot, window):
    row = window.pages.index(window.runs_page)
    rect = window.nav.visualItemRect(window.nav.item(row))
    qtbot.mouseClick(window.nav.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.stack.currentWidget() is window.runs_page
    assert window.nav.item(row).text() == "Runs"
    n = window.runs_page.model.rowCount()  # the list was read when the page was first shown
    assert window.runs_page.count_label.text() == f"{n} runs"


def test_open_output_folder_opens_the_runs_folder(qtbot, make_page, store, tmp_path, monkeypatch):
    from PySide6.QtGui import QDesktopServices

    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(url.toLocalFile()) or True))
    (tmp_path / "out").mkdir()
    _add_run(store, "here", [1.0], output_folder=str(tmp_path / "out"), created=2000.0)
    _add_run(store, "gone", [1.0], output_folder=str(tmp_path / "nowhere"), created=1000.0)
    page = make_page()
    said: list[str] = []
    page.status_changed.connect(said.append)
    _click_row(qtbot, page, _row_of(page, "here"))
    qtbot.mouseClick(page.open_button, Qt.MouseButton.LeftButton)
    assert opened == [str(tmp_path / "out")]
    _click_row(qtbot, page, _row_of(page, "gone"))
    qtbot.mouseClick(page.open_button, Qt.MouseButton.LeftButton)
    assert opened == [str(tmp_path / "out")] and "is gone" in said[-1]


def test_a_store_damaged_past_its_first_page_is_moved_aside_too(qtbot, make_page, store, tmp_path):
    for i in range(30):
        _add_run(store, f"run{i}", [1.0] * 50)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    db = tmp_path / "runs.sqlite3"
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    data[page_size:] = b"\xa5" * (len(data) - page_size)  # every page but the first (the schema) is garbage
    db.write_bytes(bytes(data))
    page = make_page()
    assert page.notice.isVisible() and "damaged" in page.notice.text() and "moved to" in page.notice.text()
    assert page.count_label.text() == "0 runs"
    (moved,) = tmp_path.glob("runs.sqlite3.damaged-*")
    assert moved.read_bytes() == bytes(data)


def test_deleting_one_run_says_one_run_and_another_runs_files_stay(qtbot, make_page, store, tmp_path):
    """"Deleted 1 run" (not "1 run(s)"); a file a later run wrote over is that run's, and deleting the earlier run
    with its files leaves it (issue 27, items 2 and 8)."""
    out = tmp_path / "out"
    (out / "samples").mkdir(parents=True)
    shared, own = out / "samples" / "x_step000002_0.png", out / "samples" / "x_step000004_0.png"
    shared.write_bytes(b"written over by the later run")
    own.write_bytes(b"only the earlier run's")
    earlier = _add_run(store, "earlier", [1.0], created=1000.0)
    store.write_batch(earlier, artifacts=[{"kind": "sample", "path": str(shared)}, {"kind": "sample", "path": str(own)}])
    later = _add_run(store, "later", [1.0], created=2000.0)
    store.write_batch(later, artifacts=[{"kind": "sample", "path": str(shared)}])
    assert store.files_of(earlier) == [own] and store.files_of(later) == [shared]
    page = make_page()
    said: list[str] = []
    page.status_changed.connect(said.append)
    _click_row(qtbot, page, _row_of(page, "earlier"))
    qtbot.mouseClick(page.delete_button, Qt.MouseButton.LeftButton)
    dlg = page.delete_dialog
    assert [dlg.file_list.item(i).text() for i in range(dlg.file_list.count())] == [str(own)]
    assert dlg.files_check.text() == "Also delete this file or folder from disk"
    qtbot.mouseClick(dlg.files_check, Qt.MouseButton.LeftButton, pos=QPoint(8, dlg.files_check.height() // 2))
    qtbot.mouseClick(dlg.delete_button, Qt.MouseButton.LeftButton)
    assert said[-1] == "Deleted 1 run and 1 file or folder."
    assert not own.exists() and shared.read_bytes() == b"written over by the later run"
    _click_row(qtbot, page, _row_of(page, "later"))
    qtbot.mouseClick(page.delete_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(page.delete_dialog.delete_button, Qt.MouseButton.LeftButton)
    assert said[-1] == "Deleted 1 run; its files were kept." and shared.exists()


def test_a_full_disk_is_said_on_the_page_and_the_history_comes_back_on_refresh(qtbot, make_page, store, tmp_path, monkeypatch):
    _add_run(store, "kept", [1.0, 0.9])
    store.close()
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode, full.sqlite_errorname = 13, "SQLITE_FULL"  # as SQLite raises it on a full disk

    class FullDisk:  # every statement fails as on a full disk
        def __init__(self, conn):
            self.conn = conn

        def execute(self, *_args):
            raise full

        def close(self):
            self.conn.close()

    real = RunStore._connect
    monkeypatch.setattr(RunStore, "_connect", lambda self: FullDisk(real(self)))
    page = make_page()
    assert page.notice.isVisible() and "is full" in page.notice.text() and "Nothing was lost" in page.notice.text()
    assert page.count_label.text() == "0 runs" and not page.bring_back_button.isVisible()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("runs.sqlite3.")) == []  # nothing moved
    monkeypatch.undo()  # some space was freed
    qtbot.mouseClick(page.refresh_button, Qt.MouseButton.LeftButton)
    assert page.count_label.text() == "1 run" and not page.notice.isVisible()


def test_a_history_moved_aside_is_offered_back_with_a_button(qtbot, make_page, tmp_path):
    from guitrainer.core.runs.store import move_database

    db = tmp_path / "runs.sqlite3"
    with RunStore(db) as old:
        _add_run(old, "lost-to-the-full-disk-bug", [1.0, 0.9, 0.8])
    move_database(db, tmp_path / "runs.sqlite3.unreadable-20250101-120000")  # what older versions did on a full disk
    page = make_page()
    assert page.count_label.text() == "0 runs"
    assert page.bring_back_button.isVisible() and "moved aside" in page.notice.text()
    said: list[str] = []
    page.status_changed.connect(said.append)
    qtbot.mouseClick(page.bring_back_button, Qt.MouseButton.LeftButton)
    assert page.count_label.text() == "1 run" and not page.bring_back_button.isVisible()
    assert said[-1].startswith("Brought back 1 run from runs.sqlite3.unreadable-20250101-120000")
    assert (tmp_path / "runs.sqlite3.unreadable-20250101-120000.brought-back").is_file()  # kept
    _click_row(qtbot, page, 0)
    assert "steps: 3 of 3" in page.details.toPlainText()  # its series came back with it


def test_details_count_the_time_of_every_part_of_a_resumed_run(qtbot, make_page, store):
    from guitrainer.core.runs import timings

    first = timings.part(1000.0, 1100.0, 1010.0, 80.0, 40)
    second = timings.part(5000.0, 5060.0, 5005.0, 50.0, 20)
    run = _add_run(store, "resumed", [1.0] * 60)
    store.update_run(run, timings_json=timings.add_part(timings.add_part({}, first), second))
    page = make_page()
    _click_row(qtbot, page, 0)
    text = page.details.toPlainText()
    assert "time: setting up 15.0 s, 2.167 s per step, 160 s in all (2 parts: 100 s + 60 s)" in text  # (80+50)/60
