"""TensorBoard event files for those who use it: ``<output folder>/logs/<label>_<YYYYmmddHHMMSS>/``.

kohya's scripts write ``--logging_dir`` + ``<prefix><time>`` per launch, and people point
``tensorboard --logdir`` at that ``logs`` folder; we follow the same layout and tag names
(``loss/current``, ``lr/unet``), so their dashboards and habits carry over. The folder carries the run's
label (:meth:`guitrainer.core.runs.names.RunFiles.logs`); a resumed run writes on into its folder. The
writer is tensorboardX's ``SummaryWriter`` (maintained, no TensorFlow, writes the standard event format).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

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


class TensorBoardLog:
    """Scalars per step into one event file folder. Raises ImportError without tensorboardX.

    ``purge_step``: a resumed run writing on into its folder; TensorBoard drops what the earlier files hold
    from that step on (the steps redone after the state), so each step shows once.
    """

    def __init__(self, folder: str | Path, purge_step: int | None = None):
        from tensorboardX import SummaryWriter

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._writer: Any = SummaryWriter(logdir=str(self.folder), flush_secs=10, purge_step=purge_step)

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
