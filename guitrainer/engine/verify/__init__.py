"""Verify: prove a written LoRA file loads elsewhere and merges to what was trained.

:func:`verify_lora` is what the Output page's Verify calls; it sends each file to the verifier that reads it as
the clients do:

- :mod:`~guitrainer.engine.verify.lora`: LoRA and LoCon, through diffusers' ``load_lora_weights``;
- :mod:`~guitrainer.engine.verify.variants`: LoHa, LoKr and DoRA, by the clients' merge rules;
- :mod:`~guitrainer.engine.verify.client_rules`: every file of a family whose files name the original model's
  layers (its :attr:`~guitrainer.engine.families.base.Family.client_layout`), merged by ComfyUI's rules
  (:mod:`~guitrainer.engine.verify.comfy_rules`);
- :mod:`~guitrainer.engine.verify.harness`: what both share (the base model, fixed inputs, tolerances,
  :class:`VerifyResult`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guitrainer.engine.families import registry
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network.client_merge import file_kind
from guitrainer.engine.network.lora import read_lora_as_kohya
from guitrainer.engine.verify.client_rules import verify_by_client_rules
from guitrainer.engine.verify.harness import VerifyResult, base_family
from guitrainer.engine.verify.lora import verify_with_diffusers
from guitrainer.engine.verify.variants import verify_variant_file

__all__ = ["VerifyResult", "verify_lora"]

#: network types diffusers cannot read as the clients do: merged by the clients' rules instead
MERGED_KINDS = ("loha", "lokr", "dora")


def verify_lora(path: str | Path, base: Any, reference: LoadedModel | None = None, *, seed: int = 0) -> VerifyResult:
    """Prove the LoRA file ``path`` loads elsewhere and gives what was trained; the verdict in plain words.

    Args:
        path: a kohya / LyCORIS .safetensors, a diffusers-format file, or a diffusers LoRA folder.
        base: the base model: a LoadedModel without LoRA (copied, not changed), a ModelConfig / TrainingConfig,
            or a model path ("demo", a diffusers folder).
        reference: the trained model (its network injected) to compare with; None compares with the network
            as our own loader reads it from the file.
        seed: seed of the random inputs.
    Raises:
        LoraFormatError: ``path`` is not a readable .safetensors LoRA.
    """
    family = registry.family(base_family(base))
    if family.client_layout is not None:
        return verify_by_client_rules(path, base, family, reference, seed=seed)
    sd_kohya, _meta = read_lora_as_kohya(path)
    if file_kind(sd_kohya) in MERGED_KINDS:
        return verify_variant_file(path, base, reference, seed=seed)
    return verify_with_diffusers(path, base, reference, seed=seed)
