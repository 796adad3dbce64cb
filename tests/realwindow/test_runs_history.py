"""One run, one name, and a history that comes back, in a real window (issue 27, items 2, 3 and 9): a demo run
into a folder that holds an earlier run's LoRA names all its files ``demo_lora_2`` on the Output page; the Runs
page offers the history an older version moved aside, and its button brings the runs back. Screenshots of both
pages go to ``artifacts/screenshots/runs27/``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton
from xinput import choose_in_combo, open_page, pump, train_and_wait, wait_for

from guitrainer.config.presets import DEFAULT_PRESET
from guitrainer.core.runs.store import RunStore, move_database

SHOTS = Path(__file__).resolve().parent.parent.parent / "artifacts" / "screenshots" / "runs27"


def _shoot(name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    pump(300)
    subprocess.run(["import", "-window", "root", str(path)], timeout=30, check=True)
    return path


def _older_history(db: Path) -> Path:
    """Two runs in a history that an older version moved aside on a full disk (whole, named 'unreadable')."""
    with RunStore(db) as store:
        for i, name in enumerate(("portrait_v1", "portrait_v2")):
            run = store.begin_run(name=name, config={}, model="demo", total_steps=3, now=1_700_000_000.0 + i)
            store.write_batch(run, [(k, 1, 1.0 / k, 1e-3, None, 0.1, 2.0 * k, None, None, 0) for k in (1, 2, 3)],
                              run={"steps": 3})  # fmt: skip
            store.end_run(run, "finished")
    moved = db.with_name(f"{db.name}.unreadable-20250101-120000")
    move_database(db, moved)
    return moved


@pytest.fixture
def moved_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The app's history file (``GUITRAINER_RUNS_DB``, set before the window opens) with an older one moved aside."""
    db = tmp_path / "history" / "runs.sqlite3"
    db.parent.mkdir()
    moved = _older_history(db)
    monkeypatch.setenv("GUITRAINER_RUNS_DB", str(db))
    return moved


def test_a_run_names_its_files_once_and_the_runs_page_brings_a_moved_history_back(moved_history, main_window, xin, tmp_path):  # noqa: ANN001
    window, moved = main_window, moved_history
    out = tmp_path / "out"
    out.mkdir()
    (out / "demo_lora.safetensors").write_bytes(b"an earlier run's LoRA")  # the earlier run of the same name

    choose_in_combo(xin, window.findChild(QComboBox, "preset_combo"), DEFAULT_PRESET)  # the Demo preset
    window.binding.set("output.folder", str(out))
    window.binding.set("schedule.max_steps", 3)
    window.binding.set("sampling.every_n_steps", 3)
    open_page(window, xin, "Output")
    preview = window.output_page.findChild(QLabel, "file_preview")
    assert window.output_page.preview_paths()[:2] == [str(out / "demo_lora_2.safetensors"), str(out / "demo_lora_2_state")]
    assert "demo_lora_2.safetensors" in preview.text() and "demo_lora_2_state" in preview.text()

    train_and_wait(window, xin)
    open_page(window, xin, "Output")
    last = window.output_page.findChild(QLabel, "last_run_file")
    wait_for(lambda: "demo_lora_2_state" in last.text(), 10, lambda: f"the files the run wrote, got {last.text()!r}")
    # the Demo preset's two prompts, before the first step and at step 3
    assert str(out / "demo_lora_2.safetensors") in last.text() and "4 sample images" in last.text()
    assert (out / "samples" / "demo_lora_2_step000003_0.png").is_file()
    assert (out / "demo_lora.safetensors").read_bytes() == b"an earlier run's LoRA"
    assert window.output_page.preview_paths()[0] == str(out / "demo_lora_3.safetensors")  # the next run's names
    assert "demo_lora_3.safetensors" in preview.text()
    _shoot("output_page")

    open_page(window, xin, "Runs")
    runs = window.runs_page
    button = runs.findChild(QPushButton, "runs_bring_back")
    wait_for(lambda: button.isVisible(), 10, "the offer to bring the moved history back")
    assert str(moved) in runs.notice.text()
    _shoot("runs_page_offer")
    xin.click(button)
    count = runs.findChild(QLabel, "runs_count")
    wait_for(lambda: count.text() == "3 runs", 10, lambda: f"the runs back, got {count.text()!r}")
    assert not button.isVisible() and moved.with_name(moved.name + ".brought-back").is_file()
    names = sorted(runs.proxy.index(r, 0).data() for r in range(runs.proxy.rowCount()))
    assert names == ["demo_lora_2", "portrait_v1", "portrait_v2"]
    _shoot("runs_page_brought_back")
