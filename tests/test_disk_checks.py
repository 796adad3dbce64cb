"""Issue 27 (12): ``--check`` refuses or warns on everything on disk that training cannot use (the state to resume
from, the validation folder, the output folder, a folder with no images), in the very words the start check uses:
both come from :func:`guitrainer.core.checks.inputs.disk_problems`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image

from guitrainer.config import TrainingConfig
from guitrainer.core.checks.inputs import check_inputs
from guitrainer.core.checks.start import check_start
from guitrainer.core.runs import state as run_state

REPO = Path(__file__).resolve().parent.parent


def _images(folder: Path, n: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64, 64), (i * 40, 0, 0)).save(folder / f"{i}.png")
    return folder


def _cfg(tmp_path: Path, **settings: object) -> TrainingConfig:
    cfg = TrainingConfig()
    cfg.set("dataset.folders", [str(_images(tmp_path / "imgs"))])
    cfg.set("output.folder", str(tmp_path / "out"))
    for key, value in settings.items():
        cfg.set(key.replace("__", "."), value)
    return cfg


def _state(folder: Path, **config: object) -> Path:
    folder.mkdir(parents=True)
    info = {"global_step": 3, "epoch": 0, "batch_pos": 0, "total_steps": 10, "config": config}
    (folder / run_state.STATE_FILE).write_text(json.dumps(info), encoding="utf-8")
    return folder


def _errors(cfg: TrainingConfig, field: str) -> tuple[list[str], list[str]]:
    """``--check``'s errors about ``field`` and the start check's errors, each: the same sentences."""
    checked = [e.removeprefix(f"{field}: ") for e in check_inputs(cfg, captions=False).errors if e.startswith(f"{field}:")]
    started = [e for e in check_start(cfg).errors if not e.startswith("Setting ")]
    return checked, started


def _both_say(cfg: TrainingConfig, field: str, needle: str) -> str:
    checked, started = _errors(cfg, field)
    assert checked, f"--check says nothing about {field}"
    assert checked == [e for e in started if e in checked] and set(checked) <= set(started), (checked, started)
    assert any(needle in e for e in checked), checked
    return checked[0]


def test_a_resume_state_that_is_not_one_is_refused_by_check_and_start(tmp_path):
    (tmp_path / "plain").mkdir()
    said = _both_say(_cfg(tmp_path, schedule__resume_from=str(tmp_path / "plain")), "schedule.resume_from",
                     "is not a saved training state")
    assert said == f"“{tmp_path / 'plain'}” is not a saved training state."
    _both_say(_cfg(tmp_path, schedule__resume_from=str(tmp_path / "gone")), "schedule.resume_from", "does not exist")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_resume_state_that_is_a_pipe_is_refused_naming_it(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    _both_say(_cfg(tmp_path, schedule__resume_from=str(tmp_path / "pipe")), "schedule.resume_from", "named pipe")


def test_a_resume_state_made_with_another_rank_is_refused_by_check_too(tmp_path):
    state = _state(tmp_path / "run_state", network={"rank": 4})
    cfg = _cfg(tmp_path, schedule__resume_from=str(state), network__rank=8)
    _both_say(cfg, "schedule.resume_from", "Rank (dim) = 4")


def test_a_validation_folder_training_cannot_read_is_refused(tmp_path):
    _both_say(_cfg(tmp_path, validation__folder=str(tmp_path / "gone")), "validation.folder",
              f"The validation folder “{tmp_path / 'gone'}” does not exist.")
    (tmp_path / "empty").mkdir()
    _both_say(_cfg(tmp_path, validation__folder=str(tmp_path / "empty")), "validation.folder",
              "No usable validation images")
    (tmp_path / "file").write_text("x")
    _both_say(_cfg(tmp_path, validation__folder=str(tmp_path / "file")), "validation.folder", "is a file, not a folder")
    assert not _errors(_cfg(tmp_path, validation__folder=str(_images(tmp_path / "val"))), "validation.folder")[0]


def test_a_folder_with_no_images_is_refused_by_check_too(tmp_path):
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "notes.md").write_text("x")
    _both_say(_cfg(tmp_path, dataset__folders=[str(tmp_path / "none")]), "dataset.folders[0]",
              "No usable training images")


@pytest.mark.parametrize("where", ["file", "under_file", "/dev/null"])
def test_an_output_folder_that_cannot_be_written_is_refused(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    folder = {"file": blocker, "under_file": blocker / "sub", "/dev/null": Path("/dev/null")}[where]
    if where == "/dev/null" and not folder.exists():
        pytest.skip("no /dev/null here")
    said = _both_say(_cfg(tmp_path, output__folder=str(folder)), "output.folder", "Cannot write to the output folder")
    assert {"file": "it is a file, not a folder", "under_file": "“" + str(blocker) + "” is a file, not a folder",
            "/dev/null": "it is a device, not a folder"}[where] in said


def test_check_only_looks_while_the_start_makes_the_output_folder(tmp_path):
    cfg = _cfg(tmp_path)
    assert not check_inputs(cfg, captions=False).errors and not (tmp_path / "out").exists()
    assert check_start(cfg).ok and (tmp_path / "out").is_dir()


@pytest.mark.skipif(not shutil.which("unshare") or sys.platform != "linux", reason="needs Linux mount namespaces")
def test_an_output_folder_on_a_read_only_disk_is_refused_by_check_and_start(tmp_path):
    """A real read-only mount, in a private mount namespace (nothing changes outside the child process)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    script = textwrap.dedent(f"""
        import json
        from guitrainer.config import TrainingConfig
        from guitrainer.core.checks.inputs import check_inputs
        from guitrainer.core.checks.start import check_start
        cfg = TrainingConfig()
        cfg.output.folder = {str(ro / "out")!r}
        print(json.dumps([check_inputs(cfg, captions=False).errors, check_start(cfg).errors]))
    """)
    probe = tmp_path / "probe.py"
    probe.write_text(script, encoding="utf-8")
    cmd = f"mount -t tmpfs -o ro,size=1m tmpfs {shlex.quote(str(ro))} && exec {shlex.quote(sys.executable)} {shlex.quote(str(probe))}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    if r.returncode and "mount" in r.stderr and "permission" in r.stderr.lower():
        pytest.skip("no permission to mount here")
    assert r.returncode == 0, r.stderr
    checked, started = json.loads(r.stdout.strip().splitlines()[-1])
    said = f"Cannot write to the output folder “{ro / 'out'}”: the disk is mounted read-only."
    assert f"output.folder: {said}" in checked and said in started
