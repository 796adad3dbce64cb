"""The precision lab: a few real steps per precision, and what it reads from the machine (peak memory, energy).

The face the UI uses: :func:`compare_precisions`. What it takes and returns (``Candidate``, ``LabProgress``,
``LabReport``) is plain data in :mod:`guitrainer.core.precision.lab`, shared with the CLI and the window. The
modules:

- :mod:`~guitrainer.engine.lab.precision_lab`: the lab itself, one short real run per candidate;
- :mod:`~guitrainer.engine.lab.meters`: peak memory and energy, each saying where it comes from.
"""

from __future__ import annotations

from guitrainer.engine.lab.precision_lab import compare_precisions

__all__ = ["compare_precisions"]
