"""The lab's CLI path (guitrainer.lab_cli.run) on the demo model: the table or JSON, the exit status."""

from __future__ import annotations

import json

from guitrainer.core.measurements import MeasurementStore
from guitrainer.lab_cli import run
from guitrainer.presets import DEFAULT_PRESET, PresetStore


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
