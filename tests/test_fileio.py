"""Atomic writes: the old file survives a failed write; modes are kept; messages are plain words."""

from __future__ import annotations

import errno
import os
import stat

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
