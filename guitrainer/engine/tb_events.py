"""TensorBoard event files for those who use it: ``<output folder>/logs/<name>_<YYYYmmddHHMMSS>/``.

kohya's scripts write ``--logging_dir`` + ``<prefix><time>`` per launch, and people point
``tensorboard --logdir`` at that ``logs`` folder; we follow the same layout and tag names
(``loss/current``, ``lr/unet``), so their dashboards and habits carry over. The writer is
tensorboardX's ``SummaryWriter`` (maintained, no TensorFlow, writes the standard event format).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from guitrainer.base.names import safe_name

log = logging.getLogger(__name__)

#: StepMetrics-like field -> TensorBoard tag (kohya's names where kohya has one)
TAGS: dict[str, str] = {
    "loss": "loss/current",
    "lr": "lr/unet",
    "grad_scale": "loss/scale",
    "seconds_per_step": "time/seconds_per_step",
    "val_loss": "loss/validation",
    "class_loss": "loss/class",
}


def log_folder(output_folder: str | Path, name: str, when: datetime | None = None) -> Path:
    """``<output_folder>/logs/<name>_<YYYYmmddHHMMSS>``: one folder per launch, as kohya does."""
    stamp = (when or datetime.now()).strftime("%Y%m%d%H%M%S")
    return Path(output_folder) / "logs" / f"{safe_name(name, 'lora')}_{stamp}"


class TensorBoardLog:
    """Scalars per step into one event file folder. Raises ImportError without tensorboardX."""

    def __init__(self, folder: str | Path):
        from tensorboardX import SummaryWriter

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._writer: Any = SummaryWriter(logdir=str(self.folder), flush_secs=10)

    def add(self, step: int, values: dict[str, float | None]) -> None:
        """One step's scalars; None and non-finite values are left out (TensorBoard would plot NaN)."""
        for key, tag in TAGS.items():
            v = values.get(key)
            if v is not None and math.isfinite(float(v)):
                self._writer.add_scalar(tag, float(v), int(step))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
