"""The rules of block offload (``precision.offload_blocks``): (DeviceInfo, TrainingConfig) -> Advice, as
:mod:`guitrainer.core.precision.rules` has them for the precision choices; :data:`RULES` is run beside those.

Sources: the offloader's own design (:mod:`guitrainer.engine.offload`); torch's checkpointing keeps no weights of a
recomputed block between its forward and its backward (``torch.utils.checkpoint``, non-reentrant), and without it
autograd holds every block's weights for the backward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from guitrainer.config import TrainingConfig
from guitrainer.core.device.info import DeviceInfo
from guitrainer.core.memory.offload import offload_saves_memory
from guitrainer.core.precision.advice import Advice

TOPIC = "precision.offload_blocks"


def rule_offload_needs_checkpointing(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """Offload without gradient checkpointing frees nothing: the engine refuses it, so it is an error here."""
    share = cfg.precision.offload_blocks
    if share > 0 and not cfg.precision.gradient_checkpointing:
        yield Advice(
            "error",
            f"Keeping {share:.0%} of the blocks in system RAM needs gradient checkpointing: without it every block's "
            "weights stay on the GPU for the backward pass, so nothing would be freed.",
            {"precision.gradient_checkpointing": True},
            suggestion_text="turn gradient checkpointing on",
            code="offload_without_checkpointing",
            topic=TOPIC,
        )


def rule_offload_device(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """Where offload has nothing to free (a CPU, an Apple GPU) or is not built (Intel GPUs), say so."""
    share = cfg.precision.offload_blocks
    if share <= 0:
        return
    if not offload_saves_memory(device.kind):
        where = "on a CPU the model is in system RAM already" if device.kind == "cpu" else (
            "an Apple GPU shares one memory with the CPU")
        yield Advice("info", f"Blocks in system RAM do nothing here: {where}.", {TOPIC: 0.0},
                     suggestion_text="set it to 0", code="offload_nothing_to_gain", topic=TOPIC)
    elif device.kind == "xpu":
        yield Advice("warning", "Blocks in system RAM are streamed on NVIDIA and AMD GPUs only: on this Intel GPU "
                     "every block stays on the GPU.", {TOPIC: 0.0}, suggestion_text="set it to 0",
                     code="offload_not_on_xpu", topic=TOPIC)


RuleFn = Callable[[DeviceInfo, TrainingConfig], Iterable[Advice]]

RULES: tuple[RuleFn, ...] = (rule_offload_needs_checkpointing, rule_offload_device)
