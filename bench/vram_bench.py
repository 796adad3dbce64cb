"""Time one VRAM estimate (target: well under 1 ms) and one set of hints.

    python bench/vram_bench.py
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guitrainer.config import TrainingConfig  # noqa: E402
from guitrainer.core.memory import (
    estimate,  # noqa: E402
    hints,  # noqa: E402
)


def main() -> None:
    for family in ("sd15", "sdxl"):
        c = TrainingConfig()
        c.set("model.family", family)
        c.set("network.target_modules", "attention_ff_proj")
        c.set("network.train_text_encoder", True)
        n = 2000
        best = min(timeit.repeat(lambda c=c: estimate.estimate(c), number=n, repeat=5)) / n
        hints_t = min(timeit.repeat(lambda c=c: hints.hints(c), number=50, repeat=3)) / 50
        print(f"{family}: estimate() {best * 1e6:.1f} µs per call; hints() {hints_t * 1e3:.2f} ms per call")


if __name__ == "__main__":
    main()
