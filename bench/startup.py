"""Seconds from process start to the main window shown (offscreen), median of 5.

Usage: QT_QPA_PLATFORM=offscreen python bench/startup.py
Goal: <= 1.5 s on the 2-core dev machine; torch must not be imported.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(home: str) -> tuple[float, bool]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", GUITRAINER_HOME=home)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "guitrainer", "--quit-after-show"], capture_output=True, text=True, env=env, timeout=60
    )
    elapsed = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return elapsed, "torch imported: True" in out.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        one_run(home)  # warm the OS file cache; first-ever start is reported separately
        runs = [one_run(home) for _ in range(5)]
    times = [t for t, _ in runs]
    print(f"startup to window shown (process start -> shown, incl. quit): runs {', '.join(f'{t:.3f}' for t in times)} s")
    print(f"median {statistics.median(times):.3f} s; torch imported: {any(t for _, t in runs)}")


if __name__ == "__main__":
    main()
