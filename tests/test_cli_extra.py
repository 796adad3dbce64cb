"""guitrainer-train: --set for text lists, bad user presets, Ctrl+C stops gracefully and saves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from guitrainer.base import paths
from guitrainer.cli import _stop_on_sigint, main
from guitrainer.config.presets import DEMO_PRESET
from guitrainer.core.events import Control

DEMO = DEMO_PRESET
REPO = Path(__file__).resolve().parent.parent


def _checked(capsys, *args: str) -> dict:
    rc = main(["--preset", DEMO, *args, "--check"])
    out = capsys.readouterr().out
    assert rc in (0, 1)
    return tomllib.loads("\n".join(line for line in out.splitlines() if not line.startswith("#")))


def test_set_prompt_with_commas_is_one_prompt(capsys):
    data = _checked(capsys, "--set", "sampling.prompts=masterpiece, 1girl, red hair")
    assert data["sampling"]["prompts"] == ["masterpiece, 1girl, red hair"]
    data = _checked(capsys, "--set", 'sampling.prompts=["a, b", "c"]')
    assert data["sampling"]["prompts"] == ["a, b", "c"]
    data = _checked(capsys, "--set", "optimizer.betas=0.8, 0.9")
    assert data["optimizer"]["betas"] == [0.8, 0.9]


def test_set_text_field_keeps_text_that_looks_like_a_number(capsys):
    data = _checked(capsys, "--set", "output.name=2024", "--set", "sampling.prompts=true")
    assert data["output"]["name"] == "2024"
    assert data["sampling"]["prompts"] == ["true"]
    data = _checked(capsys, "--set", "network.rank=8")
    assert data["network"]["rank"] == 8  # numbers still parse for number fields


def test_bad_user_preset_does_not_stop_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GUITRAINER_HOME", str(tmp_path / "home"))
    user = paths.user_presets_dir()
    user.mkdir(parents=True)
    (user / "bad.toml").write_text('schema_version = "x"\n', encoding="utf-8")
    (user / "junk.toml").write_bytes(bytes(range(256)))
    assert main(["--list-presets"]) == 0
    captured = capsys.readouterr()
    assert DEMO in captured.out
    assert "bad.toml" in captured.err and "schema_version" in captured.err and "junk.toml" in captured.err
    assert main(["--preset", DEMO, "--check"]) in (0, 1)
    rc = main(["--preset", str(user / "bad.toml"), "--check"])  # named directly: an error, not a crash
    assert rc == 2 and "bad.toml" in capsys.readouterr().err


def test_sigint_handler_first_stops_second_aborts_then_restores():
    control, interrupted = Control(), threading.Event()
    before = signal.getsignal(signal.SIGINT)
    reached: list[str] = []
    with pytest.raises(KeyboardInterrupt), _stop_on_sigint(control, interrupted):
        signal.raise_signal(signal.SIGINT)
        reached.append("first")  # a graceful stop: no exception
        assert control.stop_requested and interrupted.is_set()
        signal.raise_signal(signal.SIGINT)  # the second aborts
        reached.append("second")
    assert reached == ["first"]
    assert signal.getsignal(signal.SIGINT) is before


def test_sigint_handler_is_not_installed_off_the_main_thread():
    seen: list[object] = []

    def body() -> None:
        with _stop_on_sigint(Control(), threading.Event()):
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [before]


@pytest.mark.slow
def test_ctrl_c_saves_the_lora_and_a_state_then_exits_130(tmp_path, tmp_path_factory):
    env = dict(os.environ)
    env["GUITRAINER_HOME"] = str(tmp_path_factory.getbasetemp() / "guitrainer_home")  # the cached demo model
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "guitrainer.cli", "--preset", DEMO, "--set", f"output.folder={out}",
           "--set", "schedule.max_steps=100000"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = bytearray()
    reader = threading.Thread(target=lambda: [err.extend(b) for b in iter(lambda: proc.stderr.read1(4096), b"")])
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not re.search(rb"\b[1-9]\d*/100000\b", bytes(err)):  # the progress bar shows a step
            assert proc.poll() is None, bytes(err).decode(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "no training step within 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    text = stdout.decode()
    assert proc.returncode == 130, bytes(err).decode(errors="replace")[-2000:]
    lora = out / "demo_lora.safetensors"
    state = out / "demo_lora_state"
    assert lora.is_file() and lora.stat().st_size > 0
    assert state.is_dir() and any(state.iterdir())
    assert f"saved {lora}" in text and str(state) in text
    assert re.search(r"stopped at step [1-9]", text)
