"""The Demo preset from start to its last sample: seconds, and what the Demo's measure read.

    python bench/demo_run.py [--runs 1]

Runs ``guitrainer-train --preset demo`` in a fresh process (as pressing Train does: the model loaded, the
dataset drawn if missing, latents cached, 240 steps, samples at steps 0, 40, …, 240, the LoRA saved) with the
thread count the app uses (the engine takes all cores but one), and prints the wall time from process start to
exit, the time from the first to the last sample line, the CPU and the "Demo measure" lines the run logged.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from guitrainer.core.device.hardware import cpu_name  # noqa: E402


def one_run(folder: Path) -> tuple[float, float | None, list[str]]:
    """(seconds to exit, seconds from the start to the last sample's log line, the Demo measure lines)."""
    env = {**os.environ, "GUITRAINER_HOME": str(folder / "home"), "GUITRAINER_RUNS_DB": str(folder / "runs.sqlite3")}
    cmd = [sys.executable, "-m", "guitrainer.cli", "--preset", "demo", "--set", f"output.folder={folder / 'out'}"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last_sample = None
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if re.search(r"making \d+ sample images? at step", line):
            last_sample = time.perf_counter() - t0
    code = proc.wait()
    total = time.perf_counter() - t0
    if code:
        print("\n".join(lines[-30:]))
        raise SystemExit(f"the Demo run failed (exit status {code})")
    return total, last_sample, [ln for ln in lines if "Demo measure:" in ln]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores")
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="demo_run.") as tmp:
            total, sample_at, measures = one_run(Path(tmp))
        at = f"{sample_at:.1f} s" if sample_at is not None else "—"
        print(f"run {i + 1}: {total:.1f} s from process start to exit; the last sample started at {at}")
        for m in measures[-2:]:
            print("  " + m[m.index("Demo measure:"):])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
