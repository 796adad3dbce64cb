"""What the numerics monitor costs: two demo runs side by side in one process, one sampling every 50 steps
(``precision.numerics_every = 50``), one not sampling (``= 0``), taking strict turns step by step so
that the machine's load falls on both alike.

Both run the Demo preset in fp16 AMP with cached latents for ``--steps`` steps. Reported:

* overhead: sum of the monitored run's step times / the other's, minus 1 (goal <= 3 % over 200 steps);
* one sampled step: its time against the median unsampled step of the same run (hooks on every module,
  the gradient count, the per-block reduction).

Step times are the trainer's own ``seconds_per_step`` (the optimizer step: forward, backward, update,
and the monitor's work, which runs inside it).

    python bench/numerics_overhead.py [--steps 200] [--every 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from guitrainer.config.presets import DEFAULT_PRESET, PresetStore  # noqa: E402
from guitrainer.core.events import NullReporter, StepMetrics  # noqa: E402
from guitrainer.core.precision.numerics import is_sampled  # noqa: E402


class Turns:
    """Two runs take turns: each waits for its turn before its first step and after each step."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.turn = -1  # nobody, until both runs are set up
        self.done = [False, False]
        self.ready = [threading.Event(), threading.Event()]

    def start(self) -> None:
        with self.cond:
            self.turn = 0
            self.cond.notify_all()

    def wait(self, who: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == who or self.done[1 - who])

    def hand_over(self, who: int, last: bool = False) -> None:
        with self.cond:
            self.done[who] = last
            self.turn = 1 - who
            self.cond.notify_all()


class TurnReporter(NullReporter):
    def __init__(self, turns: Turns, who: int, total: int):
        super().__init__()
        self.turns, self.who, self.total = turns, who, total

    def on_status(self, text: str) -> None:
        super().on_status(text)
        if text.startswith("training "):  # set up; the loop starts next
            self.turns.ready[self.who].set()
            self.turns.wait(self.who)

    def on_step(self, metrics: StepMetrics) -> None:
        super().on_step(metrics)
        last = metrics.step >= self.total
        self.turns.hand_over(self.who, last)
        if not last:
            self.turns.wait(self.who)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from guitrainer.engine.trainer import Trainer

    out = Path(tempfile.mkdtemp(prefix="numerics_bench_"))
    turns = Turns()
    runs: list[tuple[Trainer, TurnReporter]] = []
    for who, every in enumerate((0, args.every)):
        cfg = PresetStore().get(DEFAULT_PRESET).config()
        cfg.output.folder = str(out / f"every{every}")
        cfg.precision.training = "fp16"
        cfg.precision.cache_latents = True
        cfg.precision.cache_to_disk = False
        cfg.precision.numerics_every = every
        cfg.schedule.max_steps = args.steps
        rep = TurnReporter(turns, who, args.steps)
        runs.append((Trainer(cfg, rep), rep))
    threads = [threading.Thread(target=tr.run, name=f"run{i}") for i, (tr, _) in enumerate(runs)]
    t0 = time.perf_counter()
    for t, ready in zip(threads, turns.ready):  # set up one after the other (accelerate's state is shared)
        t.start()
        ready.wait()
    turns.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    plain = [m.seconds_per_step for m in runs[0][1].steps]
    watched = [m.seconds_per_step for m in runs[1][1].steps]
    assert len(plain) == len(watched) == args.steps, (len(plain), len(watched))
    steps = [m.step for m in runs[1][1].steps]
    sampled = [i for i, s in enumerate(steps) if is_sampled(s, args.every)]
    unsampled = [i for i in range(len(steps)) if i not in sampled]
    skipped = [sum(m.skipped for m in r.steps) for _, r in runs]
    base = statistics.median(watched[i] for i in unsampled)
    print(f"steps {args.steps} each, sampling every {args.every}: {len(sampled)} sampled steps; wall {wall:.0f} s")
    print(f"skipped steps: unmonitored {skipped[0]}, monitored {skipped[1]}")
    print(f"sum of step times: unmonitored {sum(plain):.2f} s, monitored {sum(watched):.2f} s")
    print(f"overhead (ratio of the sums): {100 * (sum(watched) / sum(plain) - 1):+.2f} %")
    rest = [i for i in range(len(steps)) if i > 0]
    print(f"  without step 1 (first-step warm-up): {100 * (sum(watched[i] for i in rest) / sum(plain[i] for i in rest) - 1):+.2f} %")
    print(f"  unsampled steps alone (the per-step cost of keeping the random state): "
          f"{100 * (sum(watched[i] for i in unsampled) / sum(plain[i] for i in unsampled) - 1):+.2f} %")
    print(f"median step: unmonitored {1e3 * statistics.median(plain):.1f} ms, monitored (unsampled) {1e3 * base:.1f} ms")
    pairs = ", ".join(f"step {steps[i]}: {1e3 * watched[i]:.0f} vs {1e3 * plain[i]:.0f} ms" for i in sampled)
    print(f"sampled steps, monitored vs the unmonitored run's same step: {pairs}")
    extra = [watched[i] - plain[i] for i in sampled]
    print(f"one sampled step costs {1e3 * statistics.mean(extra):+.0f} ms on average (paired), "
          f"{1e3 * statistics.median(extra):+.0f} ms median; {statistics.mean(watched[i] for i in sampled) / base:.2f}x "
          "the median unsampled step")
    blocks = [m for m in runs[1][1].steps if m.headroom]
    print(f"blocks per sampled step: {len(blocks[0].headroom) if blocks else 0}")


if __name__ == "__main__":
    main()
