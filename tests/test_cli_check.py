"""guitrainer-train --check: resolves defaults <- preset <- file <- --set, prints TOML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from guitrainer.cli import main


def test_check_prints_resolved_config(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[network]\nrank = 12\n", encoding="utf-8")
    rc = main([str(cfg), "--preset", "SD 1.5 character — 6 GB", "--set", "optimizer.lr=2e-4",
               "--set", "precision.gradient_checkpointing=false", "--check"])
    out = capsys.readouterr().out
    toml_part = "\n".join(line for line in out.splitlines() if not line.startswith("#"))
    data = tomllib.loads(toml_part)
    assert rc in (0, 1)  # 1 only when the device advice has an error
    assert data["network"]["rank"] == 12  # file over preset
    assert data["network"]["alpha"] == 8.0  # from the preset
    assert data["optimizer"]["lr"] == 2e-4  # --set over file
    assert data["precision"]["gradient_checkpointing"] is False


def test_check_reports_bad_field(capsys):
    rc = main(["--preset", "SD 1.5 style — 8 GB", "--set", "network.rank=0", "--check"])
    assert rc == 2
    assert "`network.rank`" in capsys.readouterr().err


def test_unknown_preset_and_missing_args(capsys):
    assert main(["--preset", "nope", "--check"]) == 2
    assert "no preset named" in capsys.readouterr().err
    assert main([]) == 2


# --------------------------------------------------------------------------- issue 27: special files


def _special(tmp_path, special: str) -> str:
    if special == "fifo":
        path = tmp_path / "pipe.safetensors"
        os.mkfifo(path)
        return str(path)
    return special


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="FIFOs and /dev/zero")
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("where", ["config file", pytest.param("model.base", marks=pytest.mark.slow),
                                   pytest.param("model.init_lora", marks=pytest.mark.slow)])
def test_check_on_a_named_pipe_or_dev_zero_ends_with_a_message(tmp_path, where, special):
    """``guitrainer-train X --check`` in a child process: a FIFO used to block it forever, /dev/zero to read until
    memory ran out. It ends with the message (the timeout is only the hang guard; the model cases also probe the
    device, which imports torch)."""
    path = _special(tmp_path, special)
    if where == "config file":
        config = path
    else:
        config = str(tmp_path / "c.toml")
        Path(config).write_text(f"[model]\n{where.split('.')[1]} = {json.dumps(path)}\n", encoding="utf-8")
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "guitrainer.cli", config, "--check"], capture_output=True, text=True,
                          cwd=repo, timeout=120)
    kind = "a named pipe (FIFO)" if special == "fifo" else "a device"
    if where == "config file":
        assert proc.returncode == 2 and f"`(file)`: is {kind}, not a file" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"# error: {where}: ")]
        assert kind in line and path in line
    assert "Traceback" not in proc.stdout + proc.stderr
