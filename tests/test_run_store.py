"""The run store: rows and series, migrations, files that cannot be used moved aside, dead runs, diffs."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core.events import NullReporter, RunSummary, SampleImage, SavedFile, StepMetrics
from guitrainer.core.runs import checks as C
from guitrainer.core.runs import state as run_state
from guitrainer.core.runs import store as S
from guitrainer.core.runs.compare import aligned, config_diff
from guitrainer.core.runs.store import RunStore


def _metrics(step: int, loss: float, *, batch: int = 2, sps: float = 0.5) -> StepMetrics:
    return StepMetrics(step=step, total_steps=10, epoch=1, loss=loss, lr=1e-3, seconds_per_step=sps, images_per_second=batch / sps)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_run_row_its_series_and_its_end(tmp_path):
    db = tmp_path / "runs.sqlite3"
    with RunStore(db) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        run = store.begin_run(name="a", config={"network": {"rank": 4}}, model="demo", precision="fp16", total_steps=3)
        assert store.run_row(run).status == "running"
        store.write_batch(run, [(1, 1, 0.5, 1e-3, 65536.0, 0.1, 2, None, None, 0)], run={"steps": 1})
        store.write_batch(run, [(3, 1, 0.3, 1e-3, 32768.0, 0.1, 6, None, None, 1), (2, 1, 0.4, 1e-3, 65536.0, 0.1, 4, None, None, 0)])
        store.end_run(run, "finished", steps=3, final_loss=0.3)
    with RunStore(db) as again:  # a second connection sees everything committed
        row = again.run_row(run)
        assert (row.status, row.steps, row.final_loss, row.precision) == ("finished", 3, 0.3, "fp16")
        s = again.series(run)
        assert s["step"] == [1, 2, 3] and s["loss"] == [0.5, 0.4, 0.3] and s["skipped"] == [0, 0, 1]
        assert s["grad_scale"] == [65536.0, 65536.0, 32768.0]
        assert again.config(run) == {"network": {"rank": 4}}
        with pytest.raises(ValueError, match="not a run column"):
            again.update_run(run, id=5)
        with pytest.raises(ValueError, match="unknown run status"):
            again.end_run(run, "done")


def test_version_1_database_is_migrated_and_keeps_its_runs(tmp_path):
    db = tmp_path / "runs.sqlite3"
    conn = sqlite3.connect(db)
    conn.executescript(S.MIGRATIONS[0] + "\nPRAGMA user_version = 1;")
    conn.execute(
        "INSERT INTO runs (name, created_at, updated_at, status, config_json) VALUES ('old', 100.0, 150.0, 'finished', '{}')"
    )
    conn.execute("INSERT INTO metrics (run_id, step, loss) VALUES (1, 1, 0.9), (1, 2, 0.8)")
    conn.commit()
    conn.close()
    with RunStore(db) as store:
        assert store.notice == ""  # an older file is upgraded in place, not moved aside
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == S.SCHEMA_VERSION == 2
        (row,) = store.list_runs()
        assert (row.name, row.status, row.heartbeat_at) == ("old", "finished", 150.0)  # heartbeat filled from updated_at
        s = store.series(1)
        assert s["loss"] == [0.9, 0.8] and s["images"] == [None, None]  # the new column, empty for old rows
        store.write_batch(1, [(3, 1, 0.7, 1e-3, None, 0.1, 6.0, None, None, 0)])
        assert store.series(1, ["step", "images"]) == {"step": [1, 2, 3], "images": [None, None, 6.0]}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"this is a text file, not a database\n" * 20, "not an SQLite database"),
        (S.SQLITE_HEADER + os.urandom(4000), "damaged"),
    ],
)
def test_an_unreadable_file_is_moved_aside_and_a_new_store_made(tmp_path, content, reason):
    db = tmp_path / "runs.sqlite3"
    db.write_bytes(content)
    with RunStore(db) as store:
        assert reason in store.notice and str(store.moved_to) in store.notice
        assert store.moved_to.read_bytes() == content  # kept as it was, byte for byte
        assert store.moved_to.name.startswith("runs.sqlite3.damaged-")
        run = store.begin_run(name="fresh", config={})
        assert [r.name for r in store.list_runs()] == ["fresh"] and run == 1
    with RunStore(db) as again:
        assert again.notice == ""  # the new file is fine


def test_a_database_from_a_newer_app_is_left_as_it_is(tmp_path):
    db = tmp_path / "runs.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE future (x)")
    conn.execute("INSERT INTO future VALUES (42)")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(S.StoreUnavailable, match="newer version") as e:
        RunStore(db)
    assert "99" in str(e.value) and "left as it is" in str(e.value)
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["runs.sqlite3"]
    old = sqlite3.connect(db)
    assert old.execute("SELECT x FROM future").fetchone() == (42,)  # the newer app finds its history whole
    old.close()


def test_runs_of_dead_processes_become_interrupted(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as store:
        mine = store.begin_run(name="mine", config={})  # this process: alive
        store.begin_run(name="dead", config={}, pid=_dead_pid())
        reused = store.begin_run(name="reused", config={})
        store.update_run(reused, pid_started=12345.0)  # our pid, but a process that started at another time
        far_fresh = store.begin_run(name="far-fresh", config={})
        far_stale = store.begin_run(name="far-stale", config={})
        store.update_run(far_fresh, host="other-machine", pid=1)
        store.update_run(far_stale, host="other-machine", pid=1)
        store.conn.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (time.time() - S.STALE_SECONDS - 5, far_stale))
        done = store.begin_run(name="done", config={}, pid=_dead_pid())
        store.end_run(done, "finished")
        marked = store.mark_dead_runs()
        assert sorted(r.name for r in marked) == ["dead", "far-stale", "reused"]
        status = {r.name: r.status for r in store.list_runs()}
        assert status == {
            "mine": "running", "dead": "interrupted", "reused": "interrupted",
            "far-fresh": "running", "far-stale": "interrupted", "done": "finished",
        }  # fmt: skip
        assert socket.gethostname() == store.run_row(mine).host
        assert store.mark_dead_runs() == []  # only once


def test_config_diff_lists_exactly_the_changed_settings():
    a = TrainingConfig()
    b = a.copy()
    b.network.rank = 32
    b.optimizer.lr = 5e-5
    b.dataset.folders = [DatasetFolder("/data/10_cat", 10)]
    b.network.alpha = float(a.network.alpha)  # the same value as a float: not a change
    b.precision.training = "bf16"
    changes = config_diff(a.to_dict(), b.to_dict())
    assert [(c.path, c.a, c.b) for c in changes] == [
        ("dataset.folders", [], [{"path": "/data/10_cat", "repeats": 10}]),
        ("network.rank", a.network.rank, 32),
        ("optimizer.lr", a.optimizer.lr, 5e-5),
        ("precision.training", a.precision.training, "bf16"),
    ]
    assert config_diff(a.to_dict(), a.copy().to_dict()) == []
    resumed = b.copy()
    resumed.schedule.resume_from = "/out/x_state"  # how it was launched, not how it trains
    assert config_diff(b.to_dict(), resumed.to_dict()) == []
    assert [c.path for c in config_diff(b.to_dict(), resumed.to_dict(), include_identity=True)] == ["schedule.resume_from"]
    only_b = config_diff({"network": {"rank": 4}}, {"network": {"rank": 4, "new_thing": 1}})
    assert [(c.path, c.a, c.b) for c in only_b] == [("network.new_thing", None, 1)]


def test_alignment_by_images_seen_lines_up_other_batch_sizes():
    small = {"step": [1, 2, 3, 4], "images": [2, 4, 6, 8], "loss": [1.0, 0.9, None, 0.7]}
    big = {"step": [1, 2], "images": [4, 8], "loss": [0.95, 0.75]}
    assert aligned(small, "loss", "images") == ([2.0, 4.0, 8.0], [1.0, 0.9, 0.7])  # the missing point is left out
    assert aligned(big, "loss", "images") == ([4.0, 8.0], [0.95, 0.75])
    assert aligned(big, "loss", "step") == ([1.0, 2.0], [0.95, 0.75])


class _FakeTrainer:
    """Reports ``steps`` steps from ``start`` (batch of 2 images, 0.25 s each) and saves a state at the end."""

    def __init__(self, reporter, state: str, start: int = 0, steps: int = 5, losses: dict[int, float] | None = None):
        self.reporter, self.state, self.start, self.steps = reporter, state, start, steps
        self.losses = losses or {}
        self.device = "cpu"
        self.dataset = list(range(8))

    def run(self) -> RunSummary:
        for i in range(self.start + 1, self.start + self.steps + 1):
            self.reporter.on_step(StepMetrics(i, 20, 1, self.losses.get(i, 1.0 / i), 1e-3, seconds_per_step=0.25, images_per_second=8.0))
        self.reporter.on_sample(SampleImage(os.path.join(self.state, "s.png"), "a red circle", self.start + self.steps))
        os.makedirs(self.state, exist_ok=True)
        with open(os.path.join(self.state, run_state.STATE_FILE), "w") as f:
            f.write("{}")
        self.reporter.on_saved(SavedFile(self.state, "state", self.start + self.steps, 1))
        last = self.start + self.steps
        return RunSummary("stopped", last, 1, self.losses.get(last, 1.0 / last), state_path=self.state)


def _record(db, cfg, trainer_args, inner=None):
    from guitrainer.engine.recording import recording

    inner = inner or NullReporter()
    with recording(inner, cfg, source="test", store_path=db) as rec:
        trainer = _FakeTrainer(rec.reporter, **trainer_args)
        rec.attach(trainer)
        rec.finish(trainer.run())
    return rec, inner


def test_recorder_keeps_every_step_and_a_resumed_run_continues_its_row(tmp_path):
    db, state = tmp_path / "runs.sqlite3", str(tmp_path / "out" / "x_state")
    cfg = TrainingConfig()
    cfg.output.folder, cfg.output.name = str(tmp_path / "out"), "x"
    rec, inner = _record(db, cfg, {"state": state, "steps": 6})
    assert [m.step for m in inner.steps] == [1, 2, 3, 4, 5, 6]  # the inner reporter still gets every call
    with RunStore(db) as store:
        row = store.run_row(rec.run_id)
        assert (row.status, row.steps, row.state_path, row.state_step, row.source) == ("stopped", 6, state, 6, "test")
        assert store.series(rec.run_id)["images"] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
        assert store.run(rec.run_id).dataset["images_per_epoch"] == 8
        assert C.resumable(store, rec.run_id) == (state, "")
        samples = [a for a in store.artifacts(rec.run_id) if a["kind"] == "sample"]
        assert [(a["prompt"], a["step"]) for a in samples] == [("a red circle", 6)]
        assert inner.samples[0].prompt == "a red circle"
    # resume from the state saved at step 4 of a run that got to 6: steps 5, 6 are redone, the row continues
    with RunStore(db) as store:
        store.write_batch(rec.run_id, run={"state_step": 4, "status": "interrupted"})
    cfg.schedule.resume_from = state
    rec2, _ = _record(db, cfg, {"state": state, "start": 4, "steps": 4, "losses": {5: 0.55, 6: 0.66}})
    assert rec2.run_id == rec.run_id
    with RunStore(db) as store:
        s = store.series(rec.run_id, ["step", "loss", "images"])
        assert s["step"] == [1, 2, 3, 4, 5, 6, 7, 8]
        assert s["loss"][4:6] == [0.55, 0.66]  # the redone steps replaced the old ones
        assert s["images"] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0]  # counted on from step 4
        assert store.run_row(rec.run_id).status == "stopped" and len(store.list_runs()) == 1


def test_a_resumed_runs_time_is_the_sum_of_its_parts(tmp_path):
    """Runs ▸ Details counted only the last part of a stopped and resumed run (issue 27, item 8)."""
    db, state = tmp_path / "runs.sqlite3", str(tmp_path / "out" / "x_state")
    cfg = TrainingConfig()
    cfg.output.folder, cfg.output.name = str(tmp_path / "out"), "x"
    rec, _ = _record(db, cfg, {"state": state, "steps": 4})
    cfg.schedule.resume_from = state
    _record(db, cfg, {"state": state, "start": 4, "steps": 2})
    with RunStore(db) as store:
        t = store.run(rec.run_id).timings
    assert len(t["parts"]) == 2 and [p["steps"] for p in t["parts"]] == [4, 2]
    assert t["wall_seconds"] == pytest.approx(sum(p["wall_seconds"] for p in t["parts"]))
    assert t["training_seconds"] == pytest.approx(6 * 0.25) and t["mean_seconds_per_step"] == pytest.approx(0.25)
    assert t["started_at"] == t["parts"][0]["started_at"] and t["ended_at"] == t["parts"][1]["ended_at"]


def test_a_later_run_saving_over_the_state_makes_the_earlier_one_not_resumable(tmp_path):
    db, state = tmp_path / "runs.sqlite3", str(tmp_path / "out" / "x_state")
    cfg = TrainingConfig()
    first, _ = _record(db, cfg, {"state": state, "steps": 3})
    second, _ = _record(db, cfg, {"state": state, "steps": 2})
    with RunStore(db) as store:
        assert C.resumable(store, second.run_id) == (state, "")
        path, why = C.resumable(store, first.run_id)
        assert path is None and "later run" in why
        store.end_run(second.run_id, "finished", total_steps=2)
        assert C.resumable(store, second.run_id) == (None, "it finished all its steps")


def test_recording_failure_is_a_warning_not_a_failed_run(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    rec, inner = _record(blocker / "runs.sqlite3", TrainingConfig(), {"state": str(tmp_path / "s"), "steps": 2})
    assert rec.run_id is None and "not recorded" in inner.warnings[0]
    assert [m.step for m in inner.steps] == [1, 2]


def test_remove_paths_deletes_files_and_folders(tmp_path):
    f, d = tmp_path / "a.safetensors", tmp_path / "a_state"
    f.write_bytes(b"x")
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "x").write_text("y")
    assert C.remove_paths([f, d, tmp_path / "gone"]) == []
    assert not f.exists() and not d.exists()


def test_without_psutil_a_gone_pid_is_dead_and_a_live_one_is_left_to_the_heartbeat(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    assert C.process_alive(_dead_pid(), None) is False
    assert C.process_alive(os.getpid(), 123.0) is None  # it exists, but is it the same process? unknown
    assert C.process_alive(None, None) is None
