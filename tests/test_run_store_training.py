"""Real demo runs recorded in the run store: from the CLI, from the app's worker, and after a kill -9."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import fake_device
from helpers.configs import demo_cfg
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QPushButton

from guitrainer.cli import main
from guitrainer.config import config_from_dict
from guitrainer.config.presets import PresetStore
from guitrainer.core.demo.dataset import demo_drawings
from guitrainer.core.device import hardware
from guitrainer.core.runs.store import RunStore
from guitrainer.ui.workers import TrainingWorker, run_in_thread

pytestmark = pytest.mark.slow  # every test here trains the demo model (in-process or through the CLI)

DEMO = "Demo — tiny built-in model (CPU, about a minute)"
#: the Demo preset trimmed as ``helpers.configs.demo_cfg`` trims it: 2 epochs of batches of 2 over its 12 pictures
#: (12 steps), a plain LoRA at a constant 1e-3, no samples
SHORT = [x for kv in ("schedule.max_steps=0", "schedule.epochs=2", "schedule.batch_size=2", "schedule.lr_scheduler=constant",
                      "optimizer.lr=1e-3", "network.type=lora", "network.train_text_encoder=false", "loss.min_snr_gamma=0",
                      "precision.cache_latents=false", "sampling.every_n_steps=0", "sampling.at_start=false")
         for x in ("--set", kv)]  # fmt: skip
REPO = Path(__file__).resolve().parent.parent

pytest.importorskip("guitrainer.engine.trainer")


@pytest.fixture
def runs_db(tmp_path, monkeypatch) -> Path:
    db = tmp_path / "runs.sqlite3"
    monkeypatch.setenv("GUITRAINER_RUNS_DB", str(db))
    return db


def test_cli_demo_run_is_recorded_with_its_full_series(tmp_path, runs_db):
    out = tmp_path / "out"
    assert main(["--preset", DEMO, "--quiet", *SHORT, "--set", f"output.folder={out}", "--set", "network.rank=2"]) == 0
    with RunStore(runs_db) as store:
        (row,) = store.list_runs()
        assert (row.status, row.source, row.steps, row.total_steps) == ("finished", "cli", 12, 12)  # 12 images, batch 2, 2 epochs
        s = store.series(row.id)
        assert s["step"] == list(range(1, 13)) and s["epoch"] == [1] * 6 + [2] * 6
        assert all(math.isfinite(v) for v in s["loss"]) and row.final_loss == s["loss"][-1]
        assert s["lr"] == [1e-3] * 12 and all(v > 0 for v in s["seconds_per_step"])
        assert s["images"] == [2.0 * i for i in range(1, 13)]
        detail = store.run(row.id)
        assert detail.device == "cpu" and detail.save_precision == "fp16"
        cfg = config_from_dict(detail.config)
        assert cfg.network.rank == 2 and cfg.output.folder == str(out)
        kinds = {a["kind"] for a in detail.artifacts}
        assert {"lora", "state"} <= kinds and Path(row.lora_path).is_file()
        assert detail.timings["mean_seconds_per_step"] > 0
    assert main(["--preset", DEMO, "--quiet", *SHORT, "--no-record", "--set", f"output.folder={out}"]) == 0
    with RunStore(runs_db) as store:
        assert len(store.list_runs()) == 1  # --no-record left no row


def test_gui_worker_demo_run_is_recorded(qtbot, tmp_path, runs_db):
    cfg = demo_cfg(tmp_path / "out", precision__save="fp16")
    worker = TrainingWorker(cfg)
    seen: list[tuple[int, float]] = []
    worker.step_finished.connect(lambda m: seen.append((m.step, m.loss)))
    with qtbot.waitSignal(worker.finished, timeout=120_000) as blocker:
        run_in_thread(worker)
    summary = blocker.args[0]
    assert summary.status == "finished"
    qtbot.waitUntil(lambda: len(seen) == 12, timeout=5000)
    with RunStore(runs_db) as store:
        (row,) = store.list_runs()
        assert row.id == worker.run_id and row.source == "app" and row.status == "finished"
        s = store.series(row.id, ["step", "loss"])
        assert list(zip(s["step"], s["loss"])) == seen  # the very numbers the charts got
        assert row.state_path == str(Path(summary.state_path).absolute())


def _read(db: Path, sql: str) -> list[tuple]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError:  # not made yet
        return []


#: the Demo dataset's pictures in batches of 3 (the kill test sets the batch size, so an epoch's length does not
#: follow the preset's)
KILL_BATCH = 3
PER_EPOCH = math.ceil(len(demo_drawings()) / KILL_BATCH)


def _kill_mid_run(tmp_path: Path, db: Path, home: Path) -> int:
    """A CLI run of 60 steps (state saved every epoch of PER_EPOCH steps), killed with SIGKILL once the store
    holds at least 12 steps and a state; returns the pid."""
    out = tmp_path / "out"
    env = dict(os.environ, GUITRAINER_RUNS_DB=str(db), GUITRAINER_HOME=str(home), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "guitrainer.cli", "--preset", DEMO, "--quiet", "--set", f"output.folder={out}",
           "--set", "schedule.max_steps=60", "--set", "schedule.epochs=100", "--set", "output.save_every_n_epochs=1",
           "--set", "output.keep_last=1", "--set", f"schedule.batch_size={KILL_BATCH}", "--set", "sampling.every_n_steps=0",
           "--set", "sampling.at_start=false"]  # fmt: skip
    with open(tmp_path / "cli.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 180
            while True:
                rows = _read(db, "SELECT steps, state_step FROM runs")
                if rows and rows[0][0] >= 12 and rows[0][1] and rows[0][0] > rows[0][1]:
                    break
                assert proc.poll() is None, (tmp_path / "cli.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the CLI run recorded no 12 steps within 180 s"
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return proc.pid


def test_kill_9_leaves_a_readable_store_and_the_app_resumes_the_run(qtbot, tmp_path, tmp_path_factory, runs_db, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "guitrainer_home"  # the cached demo model
    _kill_mid_run(tmp_path, runs_db, home)
    conn = sqlite3.connect(runs_db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    with RunStore(runs_db) as store:
        (row,) = store.list_runs()
        assert row.status == "running"  # nobody has looked yet
        before = store.series(row.id, ["step", "loss"])
        assert before["step"] == list(range(1, row.steps + 1))  # every committed batch, no gap
        state_step = row.state_step
        assert state_step % PER_EPOCH == 0 and PER_EPOCH <= state_step < row.steps
    # the state folder may be one save newer than the store says (killed between the save and the commit of its
    # step's metrics); the app resumes from the folder
    from guitrainer.core.runs.state import read_saved_run

    resumed_from = read_saved_run(row.state_path).global_step
    assert resumed_from >= state_step and resumed_from % PER_EPOCH == 0

    # the next start of the app: the run is marked interrupted and offered for resuming
    from guitrainer.ui.window.main_window import MainWindow

    dev = fake_device("cpu")
    monkeypatch.setattr(hardware, "cached", lambda: dev)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.show()
    try:
        qtbot.waitUntil(lambda: w.runs_page.interrupted_box is not None and w.runs_page.interrupted_box.isVisible(), timeout=10_000)
        box = w.runs_page.interrupted_box
        assert f"step {state_step}" in box.informativeText()
        with RunStore(runs_db) as store:
            assert store.run_row(row.id).status == "interrupted"
        with qtbot.waitSignal(w.training_page.run_finished, timeout=180_000) as blocker:
            qtbot.mouseClick(box.findChild(QPushButton, "interrupted_resume"), Qt.MouseButton.LeftButton)
            assert w.stack.currentWidget() is w.training_page
        summary = blocker.args[0]
        assert summary.status == "finished" and summary.steps == 60
    finally:
        if w.training_page.is_active:
            w.training_page.stop()
            w.training_page.wait_until_idle(120)
        w.dataset_page.shutdown()
    with RunStore(runs_db) as store:
        (again,) = store.list_runs()  # the same run, continued
        assert again.id == row.id and again.status == "finished" and again.steps == 60
        after = store.series(row.id, ["step", "loss"])
        # a kill can lose the steps of the one batch not yet committed (metrics are written once a second), so
        # the killed run's part is what it had committed; from the state on, the resumed run has every step
        steps = after["step"]
        assert steps == sorted(set(steps)) and set(range(resumed_from + 1, 61)) <= set(steps) and steps[-1] == 60
        was = dict(zip(before["step"], before["loss"]))
        now = dict(zip(steps, after["loss"]))
        assert {k: now[k] for k in was if k <= state_step} == {k: v for k, v in was.items() if k <= state_step}
        # the steps redone after the state repeat the killed run's (the state holds the RNG): it continued
        redone = [k for k in was if k > state_step]
        assert redone and [now[k] for k in redone] == pytest.approx([was[k] for k in redone], rel=1e-4)


def test_a_resume_that_trains_nothing_leaves_the_finished_run_as_it_was(tmp_path, runs_db, capsys):
    """Found by a new user: resuming a finished run with another rank failed, and the run's row became 'failed'
    (its dataset numbers and end time gone). Now the input check refuses it before anything starts (exit code 2,
    the CLI's code for input it refuses), naming the rank; the finished run stays as it was and no row is added."""
    out = tmp_path / "out"
    assert main(["--preset", DEMO, "--quiet", *SHORT, "--set", f"output.folder={out}", "--set", "network.rank=2"]) == 0
    with RunStore(runs_db) as store:
        (first,) = store.list_runs()
        before = store.run(first.id)
        series = store.series(first.id)
    state = str(Path(first.state_path))
    capsys.readouterr()
    code = main(["--preset", DEMO, "--quiet", *SHORT, "--set", f"output.folder={out}", "--set", "network.rank=4",
                 "--set", f"schedule.resume_from={state}", "--set", "schedule.epochs=3"])  # fmt: skip
    assert code == 2  # refused: the state was trained at rank 2
    assert "Rank (dim) = 2; it is 4 now" in capsys.readouterr().err
    with RunStore(runs_db) as store:
        assert [r.id for r in store.list_runs()] == [first.id]
        kept = store.run(first.id)
        assert (kept.row.status, kept.row.ended_at, kept.row.message) == (before.row.status, before.row.ended_at, before.row.message)
        assert kept.row.status == "finished" and kept.row.steps == 12
        assert kept.dataset == before.dataset and kept.config == before.config and kept.timings == before.timings
        assert store.series(first.id) == series
