"""Atomic writes: the old file survives a failed write; modes are kept; messages are plain words."""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from guitrainer.base import fileio


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    target = tmp_path / "caption.txt"
    target.write_text("old", encoding="utf-8")

    def boom(tmp):
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        fileio.atomic_write_with(target, boom)
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["caption.txt"]


def test_mode_of_replaced_file_is_kept_and_new_files_follow_umask(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("x")
    target.chmod(0o640)
    fileio.atomic_write_bytes(target, b"y")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    fresh = tmp_path / "b.txt"
    umask = os.umask(0o022)
    try:
        fileio.atomic_write_bytes(fresh, b"z")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644


def test_full_disk_message_names_file_and_way_out(tmp_path, monkeypatch):
    target = tmp_path / "lora.safetensors"

    def full(_tmp):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(fileio.WriteError) as ei:
        fileio.atomic_write_with(target, full)
    assert "disk is full" in str(ei.value) and str(target) in str(ei.value) and "another folder" in str(ei.value)
    assert not target.exists()


def test_numbered_path_never_overwrites(tmp_path):
    p = tmp_path / "my_lora.safetensors"
    assert fileio.numbered_path(p) == p
    p.write_bytes(b"1")
    assert fileio.numbered_path(p).name == "my_lora_2.safetensors"
    (tmp_path / "my_lora_2.safetensors").write_bytes(b"2")
    assert fileio.numbered_path(p).name == "my_lora_3.safetensors"


def test_output_folder_that_is_a_file_is_named(tmp_path):
    blocker = tmp_path / "out"
    blocker.write_text("not a folder")
    with pytest.raises(fileio.WriteError) as ei:
        fileio.atomic_write_bytes(blocker / "lora.safetensors", b"x")
    assert str(ei.value).startswith(f"The output folder {blocker} is a file, not a folder")


def test_other_libraries_words_for_a_full_disk_are_the_disk_is_full(tmp_path, monkeypatch):
    """safetensors' and PyTorch's own errors (issue 27, 14), worded as they are on a real full tmpfs."""
    target = tmp_path / "state" / "optimizer.pt"
    for error in (RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
                  RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")):
        monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1 << 30, 1 << 30, 0))

        def fail(_tmp, error=error):
            raise error

        with pytest.raises(fileio.WriteError) as ei:
            fileio.atomic_write_with(target, fail)
        assert str(ei.value).startswith(f"The disk is full: could not write {target}")
        assert not list(target.parent.iterdir())  # the part written is gone


def test_a_pytorch_write_cut_short_with_room_left_says_so_without_guessing_full(tmp_path):
    target = tmp_path / "rng.pt"

    def cut(_tmp):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    with pytest.raises(fileio.WriteError) as ei:
        fileio.atomic_write_with(target, cut)
    assert "stopped short while it was written" in str(ei.value) and "disk full" in str(ei.value)


@pytest.mark.skipif(not shutil.which("unshare") or sys.platform != "linux", reason="needs Linux mount namespaces")
def test_a_real_full_disk_is_said_so_by_every_writer(tmp_path):
    """On a 256 KB tmpfs (in a private mount namespace: nothing changes outside the child): torch.save, safetensors'
    save_file and the latent cache each say the disk is full and where, in words, never the library's own."""
    full = tmp_path / "full"
    full.mkdir()
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(f"""
        import json, pathlib, torch
        from safetensors.torch import save_file
        from guitrainer.base import fileio
        from guitrainer.engine.cache import TensorCache
        full = pathlib.Path({str(full)!r})
        big = {{"w": torch.zeros(200_000)}}
        said = []
        for name, writer in (("state.pt", lambda f: torch.save(big, f)), ("lora.safetensors", lambda f: save_file(big, str(f)))):
            try:
                fileio.atomic_write_with(full / name, writer)
            except fileio.WriteError as e:
                said.append(str(e))
        cache = TensorCache(full / "latents")
        warned = []
        cache.warn = warned.append
        cache.put("ab" * 32, big)
        print(json.dumps({{"said": said, "warned": warned, "in_memory": len(cache.memory)}}))
    """), encoding="utf-8")
    cmd = f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(full))} && exec {shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    r = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode and "mount" in r.stderr and "permission" in r.stderr.lower():
        pytest.skip("no permission to mount here")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert [s.split(":")[0] for s in out["said"]] == ["The disk is full"] * 2, out
    assert str(full / "state.pt") in out["said"][0] and str(full / "lora.safetensors") in out["said"][1]
    (warning,) = out["warned"]
    assert str(full / "latents") in warning and "the disk is full" in warning and "in memory" in warning
    assert out["in_memory"] == 1
