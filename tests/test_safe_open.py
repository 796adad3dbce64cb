"""Issue 27 (10, 11): the one helper every reader of a user-given path goes through. A named pipe, a device, a
folder, a name too long, a NUL or a ``~user`` with no such user is told in plain words before anything is opened;
nothing blocks and nothing is read without end."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from guitrainer.base import safe_open
from guitrainer.base.safe_open import Look, PathError

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
needs_linux = pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="no /dev and /proc as on Linux")


def _fifo(tmp_path: Path, name: str = "pipe") -> Path:
    p = tmp_path / name
    os.mkfifo(p)
    return p


def _returns_soon(fn, *args, **kwargs):
    """``fn(*args)`` run in a thread with a hang guard (a blocked open on a FIFO never returns)."""
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), f"{fn.__name__} hung"
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result.get("value")


@needs_fifo
def test_a_named_pipe_is_refused_before_it_is_opened(tmp_path):
    pipe = _fifo(tmp_path)
    assert safe_open.look(pipe).kind == "fifo"
    assert safe_open.problem(pipe) == "is a named pipe (FIFO), not a file"
    for reader in (safe_open.read_bytes, safe_open.read_text, safe_open.read_json):
        with pytest.raises(PathError) as ei:
            _returns_soon(reader, pipe, limit=1000)
        assert ei.value.reason == "is a named pipe (FIFO), not a file" and ei.value.kind == "fifo"
        assert str(ei.value) == f"“{pipe}” is a named pipe (FIFO), not a file"


@needs_fifo
def test_a_pipe_put_there_after_the_look_is_caught_by_fstat_and_never_blocks(tmp_path, monkeypatch):
    """The race the stat-first rule cannot close alone: O_NONBLOCK makes the open return, fstat sees the pipe."""
    pipe = _fifo(tmp_path)
    small = tmp_path / "small"
    small.write_bytes(b"x")
    monkeypatch.setattr(safe_open, "require", lambda path, want="file": Look("file", os.stat(small)))
    with pytest.raises(PathError, match="named pipe"):
        _returns_soon(safe_open.read_bytes, pipe, limit=1000)


@needs_linux
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_devices_are_refused_never_read(device):
    assert safe_open.look(device).kind == "device"
    with pytest.raises(PathError) as ei:
        _returns_soon(safe_open.read_bytes, device, limit=1 << 20)
    assert ei.value.reason == "is a device, not a file"


@needs_linux
def test_proc_files_that_say_0_bytes_are_read_to_the_limit_only():
    with pytest.raises(PathError, match=r"Input/output error"):  # /proc/self/mem is a "regular file" of 0 bytes
        safe_open.read_bytes("/proc/self/mem", limit=1 << 20)
    assert len(safe_open.read_bytes("/proc/self/status", limit=1 << 20)) > 0
    with pytest.raises(PathError, match="larger than a status file can be"):
        safe_open.read_bytes("/proc/self/status", limit=10, what="a status file")


def test_a_file_over_the_limit_is_refused_by_its_size_before_a_byte_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.toml"
    big.write_bytes(b"x" * 5000)
    opened: list[object] = []

    def no_open(*args: object, **kwargs: object) -> int:
        opened.append(args)
        raise AssertionError("opened")

    monkeypatch.setattr(os, "open", no_open)
    with pytest.raises(PathError) as ei:
        safe_open.read_text(big, limit=4096, what="a config file")
    assert ei.value.reason == "is 5 KB, larger than a config file can be (4 KB)" and not opened


def test_the_kinds_and_the_odd_paths_are_said_in_words(tmp_path):
    (tmp_path / "file").write_text("x")
    assert safe_open.problem(tmp_path) == "is a folder, not a file"
    assert safe_open.problem(tmp_path / "file", "folder") == "is a file, not a folder"
    assert safe_open.problem(tmp_path / "file", "any") == "" and safe_open.problem(tmp_path, "any") == ""
    assert safe_open.problem(tmp_path / "nothing") == "does not exist"
    assert safe_open.problem(tmp_path / "file" / "below") == "does not exist"  # ENOTDIR: a file on the way
    assert safe_open.problem(tmp_path / ("n" * 300)) == "has a name longer than 255 bytes, which no file system allows"
    assert safe_open.problem(f"{tmp_path}/a\x00b") == "holds a NUL character, which no path can hold"
    assert safe_open.problem("~nosuchuser_27/x.toml") == (
        "does not exist (there is no user “nosuchuser_27” for “~nosuchuser_27”)")
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    assert safe_open.problem(loop) == "is a symbolic link that leads back to itself (a loop)"


def test_text_and_json_say_what_is_wrong_with_the_content(tmp_path):
    p = tmp_path / "c.json"
    p.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}')  # a byte-order mark, as Windows editors write
    assert safe_open.read_json(p, limit=100) == {"a": 1}
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PathError, match="is not UTF-8 text"):
        safe_open.read_text(p, limit=100)
    p.write_text('{"a": ')
    with pytest.raises(PathError, match="is not valid JSON"):
        safe_open.read_json(p, limit=100)


def test_a_control_character_in_a_path_cannot_break_the_message(tmp_path):
    e = PathError(f"{tmp_path}/a\nb\u202ec", "does not exist")
    assert "\n" not in str(e) and "\u202e" not in str(e) and "a\\nb\\u202ec" in str(e)


@needs_fifo
def test_a_special_file_inside_a_folder_is_found(tmp_path):
    (tmp_path / "unet").mkdir()
    (tmp_path / "unet" / "config.json").write_text("{}")
    assert safe_open.first_special_file(tmp_path) is None
    pipe = _fifo(tmp_path / "unet", "diffusion_pytorch_model.safetensors")
    assert safe_open.first_special_file(tmp_path) == pipe


def test_the_mode_kinds():
    assert safe_open.kind_of(stat.S_IFREG) == "file" and safe_open.kind_of(stat.S_IFDIR) == "folder"
    assert safe_open.kind_of(stat.S_IFIFO) == "fifo" and safe_open.kind_of(stat.S_IFCHR) == "device"
    assert safe_open.kind_of(stat.S_IFBLK) == "device" and safe_open.kind_of(stat.S_IFSOCK) == "socket"
