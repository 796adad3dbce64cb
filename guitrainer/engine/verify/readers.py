"""Which program reads a LoRA file as trained: each reader's merge of every module against the trained weights.

Verify's per-reader lines (:func:`reader_verdicts`): the file's modules are merged into the base weights by each
reader's own rules (:mod:`guitrainer.engine.network.client_merge`: ComfyUI / Forge, A1111, LyCORIS; kohya's
networks.lora reads the LoRA keys only), and each merged weight is compared with the trained one, module by
module, as a share of the module's change: ``||W'_reader - W'_trained|| / ||W'_trained - W||``. The worst module
is reported. diffusers is asked itself (:func:`guitrainer.engine.verify.variants.verify_variant_file` loads the
file into a pipeline); what each reader does and why comes from :mod:`guitrainer.core.model.variant_readers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from guitrainer.core.model.variant_readers import READER_NAMES, reader_facts
from guitrainer.engine.network import client_merge, lora, variants

#: a reader reads the file "as trained" when its worst module is off by no more than this share of its change,
#: beyond the file's own rounding (merges in fp32 of the same numbers agree to ~1e-6)
AS_TRAINED = 1e-4
_LABELS = {"loha": "LoHa", "lokr": "LoKr"}


@dataclass(frozen=True)
class ReaderVerdict:
    """One reader's reading of a file.

    Attributes:
        reader: a key of :data:`~guitrainer.core.model.variant_readers.READER_NAMES`.
        as_trained: its merge gives the trained weights (up to the file's rounding).
        worst: the worst module's error as a share of its change (None where it builds nothing).
        module: that module's name ("" for none).
        words: the line Verify shows, e.g. "A1111: off by up to 0.12 of a module's change (…)".
    """

    reader: str
    as_trained: bool
    worst: float | None
    module: str
    words: str


def trained_deltas(sd: dict[str, torch.Tensor], unet: nn.Module, text_encoders: Sequence[nn.Module]) -> dict[str, torch.Tensor]:
    """file module name -> W'_trained - W (fp32) of the injected models' adapter layers the file's modules name."""
    targets = lora.kohya_targets(unet, text_encoders, variants.adapter_layers)
    out: dict[str, torch.Tensor] = {}
    for module in client_merge.grouped(sd):
        name = lora.resolve_module(module, targets, len(text_encoders))
        if name is not None:
            out[module] = variants.effective_delta(targets[name]).float().cpu()
    return out


def _worst(errors: dict[str, float]) -> tuple[float, str]:
    module = max(errors, key=errors.__getitem__)
    return errors[module], module


def _merged_errors(
    modules: dict[str, tuple[dict[str, torch.Tensor], nn.Module]], deltas: dict[str, torch.Tensor], reader: str,
) -> dict[str, float]:
    """module -> ||W'_reader - W'_trained|| / ||W'_trained - W|| by ``reader``'s rules ("plain": without dora_scale)."""
    out: dict[str, float] = {}
    for module, (parts, layer) in modules.items():
        if module not in deltas:
            continue
        weight = layer.weight.detach()
        rule_parts = {k: v for k, v in parts.items() if k != "dora_scale"} if reader == "plain" else parts
        merged = client_merge.module_weight(rule_parts, weight, "comfyui" if reader == "plain" else reader)
        change = deltas[module]
        out[module] = float((merged - (weight.float() + change)).norm()) / max(float(change.norm()), 1e-30)
    return out


def _line(reader: str, errors: dict[str, float], tolerance: float, why: str) -> ReaderVerdict:
    """The verdict of a reader that builds every module: as trained, or how far off and why."""
    name = READER_NAMES[reader]
    if not errors:
        return ReaderVerdict(reader, False, None, "", f"{name}: nothing to compare")
    worst, module = _worst(errors)
    if worst <= tolerance + AS_TRAINED:
        return ReaderVerdict(reader, True, worst, module, f"{name}: reads it as trained (worst module off by {worst:.1g} of its change)")
    return ReaderVerdict(reader, False, worst, module,
                         f"{name}: off by up to {worst:.2g} of a module's change ({module}): {why}")


def reader_verdicts(
    sd: dict[str, torch.Tensor], unet: nn.Module, text_encoders: Sequence[nn.Module],
    deltas: dict[str, torch.Tensor], tolerance: float, precision: str,
) -> list[ReaderVerdict]:
    """ComfyUI / Forge, A1111, LyCORIS and kohya's networks.lora on a kohya / LyCORIS state dict, against ``deltas``
    (:func:`trained_deltas`), on the plain base models ``unet`` / ``text_encoders`` (not changed).

    ``tolerance`` is the file's rounding as a share of a module's change (0 when ``deltas`` were rebuilt from
    the file itself); ``precision`` its dtype ("fp16", …), for the words.
    """
    kind = client_merge.file_kind(sd)
    targets = lora.kohya_targets(unet, text_encoders, client_merge.weight_layers)
    modules: dict[str, tuple[dict[str, torch.Tensor], nn.Module]] = {}
    for module, parts in client_merge.grouped(sd).items():
        name = lora.resolve_module(module, targets, len(text_encoders))
        if name is not None and not client_merge.unsupported(parts, targets[name].weight):
            modules[module] = (parts, targets[name])
    layout = next((client_merge.dora_layout(p["dora_scale"], m.weight) for p, m in modules.values() if "dora_scale" in p), "column")
    facts = reader_facts("dora" if kind == "dora" else kind, layout)
    low = kind in ("loha", "lokr") and precision in ("fp16", "bf16")
    out = [
        _line("comfyui", _merged_errors(modules, deltas, "comfyui"), tolerance, facts["comfyui"]),
        _line("a1111", _merged_errors(modules, deltas, "a1111"), tolerance,
              f"it computes {_LABELS[kind]} in the file's dtype ({precision}); save as fp32 for A1111" if low else facts["a1111"]),
        _lycoris(modules, deltas, tolerance, facts["lycoris"]),
    ]
    if kind == "dora":
        plain = _merged_errors(modules, deltas, "plain")
        worst, module = _worst(plain) if plain else (None, "")
        words = f"{READER_NAMES['kohya']}: drops dora_scale, a plain LoRA there" + (f" (off by up to {worst:.2g})" if worst else "")
        out.append(ReaderVerdict("kohya", False, worst, module, words))
    elif kind in ("loha", "lokr"):
        out.append(ReaderVerdict("kohya", False, None, "", f"{READER_NAMES['kohya']}: {facts['kohya']}"))
    return out


def _lycoris(
    modules: dict[str, tuple[dict[str, torch.Tensor], nn.Module]], deltas: dict[str, torch.Tensor], tolerance: float,
    fact: str,
) -> ReaderVerdict:
    """LyCORIS' create_network_from_weights: the modules it cannot build stop it; then its forward's result."""
    stops = {m: client_merge.lycoris_problem(p, layer) for m, (p, layer) in modules.items()}
    stops = {m: why for m, why in stops.items() if why}
    name = READER_NAMES["lycoris"]
    if stops:
        module, why = next(iter(stops.items()))
        return ReaderVerdict("lycoris", False, None, module,
                             f"{name}: its loader stops on {len(stops)} of {len(modules)} modules ({module}: {why})")
    verdict = _line("lycoris", _merged_errors(modules, deltas, "lycoris"), tolerance, fact)
    twice = [m for m, (p, _layer) in modules.items() if client_merge.lycoris_double_scale(p)]
    if twice:
        words = (f"{verdict.words}; its merge (merge_to) multiplies {len(twice)} modules by alpha / rank twice "
                 f"(e.g. {twice[0]})")
        return ReaderVerdict("lycoris", verdict.as_trained, verdict.worst, verdict.module, words)
    return verdict
