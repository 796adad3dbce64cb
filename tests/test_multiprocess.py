"""Several processes for real: 2 CPU processes (gloo) train the demo model under ``torchrun``.

What ``accelerate launch --multi_gpu`` does on several GPUs, here on this CPU-only machine: the data
is sharded, DDP keeps the LoRA weights equal on every process, only the main process writes, and a
stop (Ctrl+C to the launcher, or asked on the main process only) ends every process at the same step.

Run as a script under ``torchrun`` (see :func:`_drive`), this file is also the engine-level driver of
the stop tests, where the stop is asked deterministically on the main process's Control only.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from guitrainer.config.presets import DEMO_PRESET

DEMO = DEMO_PRESET
REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 120  # a hang (a process left in a collective) fails the test instead of blocking it


def _distributed_unavailable() -> str | None:
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if not dist.is_gloo_available():
        return "this torch build has no gloo backend (needed for several CPU processes)"
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_distributed_unavailable() is not None, reason=str(_distributed_unavailable())),
]

#: "process 1 of 2 (pid 123): 2 batches of each epoch; epoch 1: [6, 3], [2, 0]"
SHARE = re.compile(r"process (\d) of 2 \(pid (\d+)\): (\d+) batches of each epoch; epoch 1: (.*)$", re.M)
#: "process 1 of 2 (pid 123): finished at step 4; LoRA weights 4d4a1b81d279b5d5"
DONE = re.compile(r"process (\d) of 2 \(pid \d+\): (\w+) at step (\d+); LoRA weights (\w+)", re.M)


def _launch(*args: str) -> list[str]:
    """torchrun with 2 processes on this machine (``--standalone``: a free port, no rendezvous server)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ)  # GUITRAINER_HOME: the test's private user data folder (conftest)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO))
    return env


def _stop_launcher(proc: subprocess.Popen[str]) -> None:
    """End a launcher still running and its workers: SIGTERM, which torchrun passes on to the workers
    (each in its own session, so killing the launcher alone would leave them running), then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def _run(cmd: list[str]) -> tuple[int, str, str]:
    """Run a launcher to its end: (exit status, stdout, stderr); a hang fails after TIMEOUT seconds."""
    pipe = subprocess.PIPE
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=pipe, stderr=pipe, text=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop_launcher(proc)
        pytest.fail(f"the processes did not end within {TIMEOUT} s (one waits in a collective?)")
    return proc.returncode, out, err


def _cli(out: Path, *settings: str) -> list[str]:
    short = ("schedule.batch_size=2", "sampling.every_n_steps=0", "sampling.at_start=false")  # the Demo preset, small
    sets = [a for s in (f"output.folder={out}", *short, *settings) for a in ("--set", s)]
    return _launch("-m", "guitrainer.cli", "--preset", DEMO, *sets, "--quiet")


def _done_lines(log: str) -> dict[int, tuple[str, int, str]]:
    """rank -> (status, step, LoRA weights fingerprint) from every process's last log line."""
    return {int(r): (status, int(step), digest) for r, status, step, digest in DONE.findall(log)}


def _loras(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def test_two_processes_shard_the_data_stay_in_sync_and_only_the_main_one_writes(tmp_path):
    from guitrainer.engine.network.lora import read_lora

    out = tmp_path / "out"
    code, stdout, stderr = _run(_cli(out, "schedule.max_steps=4"))
    log = stdout + stderr
    assert code == 0, log[-4000:]

    # the demo's 12 images in batches of 2: 6 batches an epoch, 3 for each process, none seen twice
    shares = {int(r): ast.literal_eval(f"[{text}]") for r, _pid, _n, text in SHARE.findall(log)}
    assert sorted(shares) == [0, 1], log[-4000:]
    assert all(len(batches) == 3 for batches in shares.values())
    seen = [pos for batches in shares.values() for batch in batches for pos in batch]
    assert sorted(seen) == list(range(12))
    assert "training 4 steps" in log

    # both trained every step, and DDP kept their weights identical
    done = _done_lines(log)
    assert sorted(done) == [0, 1] and {d[:2] for d in done.values()} == {("finished", 4)}
    assert done[0][2] == done[1][2]

    # only the main process wrote: one LoRA, one state, one "saved" line
    assert [p.name for p in _loras(out)] == ["demo_lora.safetensors"]
    assert sorted(p.name for p in out.iterdir()) == ["demo_lora.safetensors", "demo_lora_state"]
    assert stdout.count("saved ") == 1
    tensors, meta = read_lora(out / "demo_lora.safetensors")
    assert meta["ss_steps"] == "4" and meta["ss_network_dim"] == "16"  # the Demo preset's rank
    assert tensors and all(t.isfinite().all() for t in tensors.values())


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process group is POSIX")
def test_ctrl_c_to_the_launcher_stops_every_process_at_one_step_and_the_main_one_saves(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        _cli(out, "schedule.max_steps=100000"),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    hung = threading.Event()
    watchdog = threading.Timer(TIMEOUT, lambda: (hung.set(), _stop_launcher(proc)))  # a hang fails the test
    watchdog.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # until both processes train
            lines.append(line)
            if len(SHARE.findall("".join(lines))) == 2:
                break
        time.sleep(1.0)  # a few steps
        # Ctrl+C in a terminal reaches the launcher only (torchrun starts each worker in its own session);
        # torchrun passes SIGINT on to every worker
        proc.send_signal(signal.SIGINT)
        lines.extend(proc.stdout)
        proc.wait()
    finally:
        watchdog.cancel()
        _stop_launcher(proc)
    log = "".join(lines)
    assert not hung.is_set(), f"the processes did not end within {TIMEOUT} s (one waits in a collective?)"
    assert "aborted" not in log, log[-4000:]  # one Ctrl+C: a graceful stop, never the abort of a second one
    done = _done_lines(log)
    assert sorted(done) == [0, 1], log[-4000:]
    (status0, step0, weights0), (status1, step1, weights1) = done[0], done[1]
    assert status0 == status1 == "stopped" and step0 == step1 > 0 and weights0 == weights1
    assert [p.name for p in _loras(out)] == ["demo_lora.safetensors"]
    assert (out / "demo_lora_state" / "trainer_state.json").is_file()
    assert f"resume from {out / 'demo_lora_state'}" in log


def test_a_stop_asked_on_the_main_process_only_stops_every_process(tmp_path):
    """The engine's own path: the main process's Control is set (before set-up ends, then at step 2),
    the other process's never is; every process stops at the same point, nothing waits forever."""
    code, stdout, stderr = _run(_launch(str(Path(__file__).resolve()), str(tmp_path)))
    log = stdout + stderr
    assert code == 0, log[-4000:]
    for rank in (0, 1):
        assert f"rank {rank} set-up: stopped at 0 (stopped while loading the base model" in log, log[-4000:]
        assert f"rank {rank} training: stopped at 2" in log, log[-4000:]
    setup = tmp_path / "setup"
    assert not setup.exists() or not any(setup.iterdir())  # nothing trained, so nothing written
    done = _done_lines(log)
    assert {d[:2] for d in done.values()} == {("stopped", 2)} and done[0][2] == done[1][2]
    assert [p.name for p in _loras(tmp_path / "training")] == ["demo_lora.safetensors"]


def _drive(out: Path) -> int:
    """Under torchrun: two runs of the engine where only the main process's Control is ever set."""
    import logging

    from guitrainer.config.presets import PresetStore
    from guitrainer.core.events import Control, NullReporter, StepMetrics
    from guitrainer.engine.trainer import Trainer

    logging.basicConfig(level=logging.INFO, format=f"[rank {os.environ['RANK']}] %(message)s")

    class StopAtStep2(NullReporter):
        """Asks for a stop after step 2; a reporter is only ever called on the main process."""

        def __init__(self, control: Control):
            super().__init__()
            self.control = control

        def on_step(self, metrics: StepMetrics) -> None:
            if metrics.step == 2:
                self.control.request_stop()

    rank = int(os.environ["RANK"])
    for name in ("set-up", "training"):
        cfg = PresetStore().get(DEMO).config()
        cfg.output.folder = str(out / name.replace("-", ""))
        cfg.schedule.max_steps = 1000
        control = Control()
        if name == "set-up" and rank == 0:
            control.request_stop()  # pressed while the model loads
        summary = Trainer(cfg, StopAtStep2(control), control).run()
        print(f"rank {rank} {name}: {summary.status} at {summary.steps} ({summary.message})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_drive(Path(sys.argv[1])))


def test_two_processes_train_a_tiny_flux_in_step(tmp_path):
    """The same for Flux.1 (issue 29: ``accelerate launch`` on the new families): a tiny Flux from a diffusers
    folder, 2 processes, bf16; both train every step with equal LoRA weights, and only the main one writes a file
    in Flux's kohya layout."""
    from helpers import tiny_flux
    from PIL import Image

    from guitrainer.engine.network.lora import read_lora

    base = tiny_flux.save_diffusers(tiny_flux.build(seed=3), tmp_path / "tiny_flux")
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        Image.new("RGB", (64, 64), (60 * i, 200 - 40 * i, 90)).save(data / f"{i}.png")
        (data / f"{i}.txt").write_text(f"a photo of shape {i}", encoding="utf-8")
    out = tmp_path / "out"
    code, stdout, stderr = _run(_cli(out, f"model.base={base}", "model.family=auto", f"dataset.folders=['{data}']",
                                     "dataset.resolution=64", "schedule.batch_size=1", "schedule.max_steps=2",
                                     "precision.training=bf16"))
    log = stdout + stderr
    assert code == 0, log[-4000:]
    done = _done_lines(log)
    assert sorted(done) == [0, 1] and {d[:2] for d in done.values()} == {("finished", 2)}, log[-4000:]
    assert done[0][2] == done[1][2]
    (lora,) = _loras(out)
    tensors, meta = read_lora(lora)
    assert meta["ss_base_model_version"].startswith("flux1") and stdout.count("saved ") == 1
    assert any(k.startswith("lora_unet_double_blocks_0_") for k in tensors)
    assert all(t.isfinite().all() for t in tensors.values())
