"""Shared test helpers. The tests folder is on ``sys.path`` (rootdir conftest): ``from helpers import ...``.

Test modules never import each other; what several of them need lives here:

- :mod:`helpers.devices`: fake machines (``fake_device``), no torch;
- :mod:`helpers.configs`: ``config_with`` (defaults + overrides) and ``demo_cfg`` (the Demo preset);
- :mod:`helpers.doubles`: reporters (``StopAt``, ``HashingReporter``) and a fake trainer for the UI worker;
- :mod:`helpers.taggers`: a tiny ONNX tagger and a fake Hugging Face hub (import it directly).
- :mod:`helpers.fuzz`: the config fuzz's mutations and the child process that runs ``--check`` on them under a
  watchdog (import it directly, or ``python -m helpers.fuzz``).
"""

from __future__ import annotations

from helpers.configs import config_with, demo_cfg
from helpers.devices import FAKE_DEVICES, FAKE_GPUS, fake_device

__all__ = ["FAKE_DEVICES", "FAKE_GPUS", "config_with", "demo_cfg", "fake_device"]
