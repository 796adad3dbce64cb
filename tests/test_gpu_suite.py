"""bench/gpu_suite.py on a machine without CUDA: a clear message, exit 0, no results file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SUITE = Path(__file__).resolve().parent.parent / "bench" / "gpu_suite.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_suite", SUITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the suite would really run")
def test_without_cuda_it_says_so_and_writes_nothing(tmp_path, capsys):
    suite = _load()
    out = tmp_path / "results.json"
    assert suite.main(["--out", str(out)]) == 0
    assert "no CUDA device here" in capsys.readouterr().out
    assert not out.exists()


def test_a_section_that_does_not_fit_the_budget_is_skipped_and_recorded(tmp_path):
    suite = _load()
    s = suite.Suite(tmp_path / "r.json", budget=10.0, smoke=True)
    ran: list[str] = []
    s.section("small", 1, lambda: ran.append("small") or {"ok": True})
    s.section("big", 60, lambda: ran.append("big"))
    s.section("broken", 1, lambda: 1 / 0)
    assert ran == ["small"]
    import json

    data = json.loads((tmp_path / "r.json").read_text())
    assert data["small"]["result"] == {"ok": True}
    assert data["big"]["skipped"].startswith("time budget")
    assert data["broken"]["error"].startswith("ZeroDivisionError")
