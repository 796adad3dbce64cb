"""Issue 15's CLI items: ``--preset`` finds a preset by a part of its name; a run prints each trainer message
once, above the progress bar, without third-party warnings about packages this app does not use."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guitrainer.cli import resolve_config
from guitrainer.config.presets import DEMO_PRESET, PresetStore


@pytest.mark.parametrize("query", ["demo", "DEMO", "  Demo ", "tiny built-in", DEMO_PRESET])
def test_preset_found_by_any_case_prefix_or_unique_part(query):
    assert PresetStore().find(query).name == DEMO_PRESET


def test_ambiguous_or_unknown_preset_names_the_candidates(capsys):
    with pytest.raises(KeyError) as ei:
        PresetStore().find("sd 1.5")
    assert "matches 2 presets" in ei.value.args[0] and "SD 1.5 character — 6 GB" in ei.value.args[0]
    with pytest.raises(KeyError) as ei:
        PresetStore().find("nothing like it")
    assert "known: " in ei.value.args[0] and DEMO_PRESET in ei.value.args[0]
    from guitrainer.cli import main

    assert main(["--preset", "sd 1.5", "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 'sd 1.5' matches 2 presets") and '"' not in err.splitlines()[0][:8]


def test_resolve_config_uses_the_found_preset():
    import argparse

    args = argparse.Namespace(preset="demo", config=None, overrides=[])
    assert resolve_config(args).model.base == PresetStore().get(DEMO_PRESET).config().model.base


@pytest.mark.slow
def test_a_cli_run_prints_each_message_once_and_no_bitsandbytes_warning(tmp_path):
    env = dict(os.environ, GUITRAINER_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "guitrainer.cli", "--preset", "demo", "--set", "schedule.max_steps=2",
         "--set", "sampling.at_start=false", "--set", f"output.folder={tmp_path / 'out'}"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stderr
    for message in ("loading the base model", "training finished", "12 images, 12 per epoch with repeats"):
        assert text.count(message) == 1, (message, text)
    assert "saved lora:" in text and text.count("saved lora:") == 1
    assert "kernels" not in text and "bitsandbytes" not in text
