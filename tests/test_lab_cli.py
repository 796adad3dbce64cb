"""The lab's CLI path (guitrainer.lab_cli.run) on the demo model: the table or JSON, the exit status."""

from __future__ import annotations

import json

import pytest

from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
from guitrainer.core.precision.measurements import MeasurementStore
from guitrainer.lab_cli import run


@pytest.fixture(autouse=True)
def _no_measurements_left_behind():
    """The lab keeps what it measured in the (session-wide) user data folder: remove it after each test,
    so a measurement of this machine never steers another test's "recommended here"."""
    yield
    from guitrainer.base.paths import user_data_dir
    from guitrainer.core.precision.measurements import FILE_NAME

    (user_data_dir() / FILE_NAME).unlink(missing_ok=True)


@pytest.mark.slow
def test_compare_prints_the_table_and_json(capsys, monkeypatch):
    cfg = PresetStore().get(DEFAULT_PRESET).config()
    assert run(cfg, steps=1) == 0
    out = capsys.readouterr()
    assert "Precision lab:" in out.out and "fp16 AMP" in out.out and "bf16 AMP" in out.out
    assert "energy:" in out.out
    assert "[1/" in out.err  # progress on stderr
    assert run(cfg, steps=1, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    statuses = {r["candidate"]["training"] + "/" + r["candidate"]["base_weights"]: r["status"] for r in data["results"]}
    assert statuses["fp32/auto"] == statuses["fp16/auto"] == statuses["bf16/auto"] == "ran"
    kept = MeasurementStore().get(data["device_key"], "demo", 64)  # kept for the picker, under this device
    assert kept is not None and kept.measured_at == data["measured_at"]


def test_bad_steps(capsys):
    cfg = PresetStore().get(DEFAULT_PRESET).config()
    assert run(cfg, steps=0) == 2
    assert "--steps" in capsys.readouterr().err


def _cli(*args: str):
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1")
    exe = [sys.executable, "-m", "guitrainer.cli", *args]
    return subprocess.Popen(exe, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
def test_guitrainer_train_compare_precisions_json():
    proc = _cli("--preset", "demo", "--compare-precisions", "--steps", "1", "--json")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    data = json.loads(out)
    assert [r["status"] for r in data["results"][:3]] == ["ran", "ran", "ran"]
    assert data["family"] == "demo" and data["steps"] == 1


@pytest.mark.slow
def test_ctrl_c_cancels_the_lab(tmp_path):
    import signal

    proc = _cli("--preset", "demo", "--compare-precisions", "--steps", "2")
    lines = []
    for line in proc.stderr:  # progress: "[i/n] ..."; Ctrl+C once the second candidate is setting up
        lines.append(line)
        if line.startswith("[2/"):
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(lines) + err
    assert "cancelling after this step" in err
    assert "cancelled" in out and "fp32" in out
