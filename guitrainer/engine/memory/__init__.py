"""Measuring memory: a training step's real peak, and the model tables the estimator is built from.

The face the UI uses: :func:`measure_training_step` (the VRAM meter's precise check) and the
:class:`MemoryMeasurement` it returns. The modules:

- :mod:`~guitrainer.engine.memory.measure`: one training step, measured on CUDA or on tracked fake tensors;
- :mod:`~guitrainer.engine.memory.modes`: the dispatch modes and stand-ins that make a step measurable without a GPU;
- :mod:`~guitrainer.engine.memory.model_spec`: model architectures on ``meta`` and the estimator's tables from them;
- :mod:`~guitrainer.engine.memory.variant_spec`: the same tables for network variants.
"""

from __future__ import annotations

from guitrainer.engine.memory.measure import MemoryMeasurement, measure_training_step

__all__ = ["MemoryMeasurement", "measure_training_step"]
