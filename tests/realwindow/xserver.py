"""A private X server for real-window tests: Xvfb on a free display, with openbox as window manager.

Used by the real-window conftest (one server for the session) and by the screenshot driver (one per
screen size). Only the processes started here are stopped here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

#: the programs the real-window tests drive the app with (Debian packages: xvfb, openbox, xdotool, imagemagick)
TOOLS = {"Xvfb": "xvfb", "openbox": "openbox", "xdotool": "xdotool", "import": "imagemagick"}


def missing_tools() -> list[str]:
    """Programs of :data:`TOOLS` not on PATH, as 'program (package)'."""
    return [f"{exe} ({pkg})" for exe, pkg in TOOLS.items() if shutil.which(exe) is None]


class XServer:
    """Xvfb + openbox on a display Xvfb picks itself (``-displayfd``), stopped by :meth:`stop`."""

    def __init__(self, width: int = 1920, height: int = 1080) -> None:
        self.size = (width, height)
        self.display = ""
        self._xvfb: subprocess.Popen | None = None
        self._wm: subprocess.Popen | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="xserver_"))

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) pointed at this display."""
        env = dict(os.environ if base is None else base)
        env["DISPLAY"] = self.display
        env.pop("WAYLAND_DISPLAY", None)
        return env

    def start(self, timeout_s: float = 20.0) -> XServer:
        read_fd, write_fd = os.pipe()
        w, h = self.size
        self._xvfb = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp", "-noreset"],
            pass_fds=(write_fd,),
            stdout=subprocess.DEVNULL,
            stderr=open(self._dir / "xvfb.log", "wb"),  # noqa: SIM115 - the child keeps it
        )
        os.close(write_fd)
        number = b""
        deadline = time.monotonic() + timeout_s
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while not number.endswith(b"\n") and time.monotonic() < deadline:
                chunk = pipe.read(1)
                if not chunk:
                    break
                number += chunk
        if not number.strip():
            self.stop()
            raise RuntimeError(f"Xvfb did not start: {(self._dir / 'xvfb.log').read_text(errors='replace')[-2000:]}")
        self.display = f":{number.decode().strip()}"
        ready = self._dir / "wm_ready"
        self._wm = subprocess.Popen(
            ["openbox", "--sm-disable", "--startup", f"touch {ready}"],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=open(self._dir / "openbox.log", "wb"),  # noqa: SIM115
        )
        while not ready.exists():
            if time.monotonic() > deadline or self._wm.poll() is not None:
                self.stop()
                raise RuntimeError(f"openbox did not start: {(self._dir / 'openbox.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        return self

    def screenshot(self, path: Path) -> Path:
        """The whole screen as a PNG (ImageMagick's ``import -window root``)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["import", "-window", "root", str(path)], env=self.env(), check=True, timeout=30)
        return path

    def stop(self) -> None:
        for proc in (self._wm, self._xvfb):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self._wm = self._xvfb = None
        shutil.rmtree(self._dir, ignore_errors=True)
