"""int8 and nf4 storage of frozen weights (``precision.base_weights = "int8" | "nf4"``): the denoiser's frozen
``nn.Linear`` layers replaced by bitsandbytes' 8-bit / 4-bit layers before the LoRA is injected, QLoRA-style.

peft then wraps the quantised layers in its own bnb LoRA layers (``peft.tuners.lora.bnb``): the LoRA's A and B
stay fp32 (or bf16) and train on top; the frozen weight is dequantised to the compute dtype inside each matmul.
The LoRA file is the same whatever the base is stored in, so it is exported and verified against the original
weights. As the peers do it (diffusers' ``BitsAndBytesConfig`` QLoRA path, SimpleTuner's ``nf4-bnb``,
OneTrainer's ``NFLOAT_4`` / ``INT_8``): only Linear layers are quantised (bitsandbytes has no conv layers), and the
family's :attr:`~guitrainer.engine.families.base.Family.storage_skip_patterns` (embedders, final layers) and the
LoRA stay in the compute dtype; so do the text encoders, which are not quantised.

Quantisation runs on the device the model trains on, one layer at a time: beside the model, one layer's
compute-dtype weight, its quantised copy and bitsandbytes' temporaries for it exist at once (on the CPU about 7x
the layer for nf4 and 5x for int8, whatever the model's size: bench/RESULTS.md), never a second copy of the model.
It is deterministic (round to nearest), so a resumed run rebuilds the same frozen weights bit for bit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from guitrainer.core.families.facts import QuantisableLinears

#: bitsandbytes' 4-bit block: one absmax per 64 weights (QLoRA's and bitsandbytes' default)
NF4_BLOCKSIZE = 64
#: QLoRA's double quantisation: the fp32 absmax of each 64-weight block is itself quantised to 8 bits in blocks of
#: 256, with one fp32 scale per such block (Dettmers et al. 2023, §3) — 0.516 byte per weight instead of 0.5625
NF4_DOUBLE_QUANT = True
#: LLM.int8()'s outlier threshold (bitsandbytes' default for ``load_in_8bit``): activation columns above 6 run
#: through a 16-bit matmul, the rest through int8 with a scale per weight row
INT8_THRESHOLD = 6.0

#: layers kept in the compute dtype under int8 / nf4 whatever the family: the LoRA itself
ALWAYS_KEPT = (r"lora_",)

FORMATS = ("int8", "nf4")


@dataclass(frozen=True)
class QuantisedStorage:
    """What :func:`quantise_linears` did: the layers quantised and the ones of the right type it kept."""

    quantised: tuple[str, ...]
    kept: tuple[str, ...]
    largest_layer_bytes: int  # the biggest compute-dtype weight it had beside its quantised copy


def quantisable_linears(module: torch.nn.Module, skip: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Paths of the plain ``nn.Linear`` layers of ``module`` that int8 / nf4 store, and of those ``skip`` (regexes
    on module paths, with :data:`ALWAYS_KEPT`) keeps in the compute dtype."""
    patterns = (*skip, *ALWAYS_KEPT)
    quantised: list[str] = []
    kept: list[str] = []
    for path, m in module.named_modules():
        if type(m) is not torch.nn.Linear:  # not a peft / bnb layer, not a subclass with its own forward
            continue
        (kept if any(re.search(p, path) for p in patterns) else quantised).append(path)
    return quantised, kept


def count_quantisable(module: torch.nn.Module, skip: tuple[str, ...]) -> QuantisableLinears:
    """The estimator's figures for the Linear layers :func:`quantise_linears` would quantise (works on ``meta``)."""
    paths, _kept = quantisable_linears(module, skip)
    weights = [module.get_submodule(p).weight for p in paths]
    return QuantisableLinears(
        weights=sum(w.numel() for w in weights), rows=sum(w.shape[0] for w in weights), layers=len(weights),
        largest=max((w.numel() for w in weights), default=0),
    )


def quantise_linears(
    module: torch.nn.Module, fmt: str, compute: torch.dtype, skip: tuple[str, ...], device: torch.device | None = None,
) -> QuantisedStorage:
    """Replace the frozen Linear layers of ``module`` not matched by ``skip`` by bitsandbytes' ``Linear8bitLt``
    (``fmt = "int8"``) or ``Linear4bit`` NF4 (``"nf4"``) computing in ``compute``. Each layer's weight goes to
    ``device`` (default: where it is) alone, in ``compute``, and is quantised there, so a model loaded in system
    RAM never needs its 16-bit Linears on the GPU all at once. Must run before the LoRA is injected (peft picks
    its bnb LoRA layer by the base layer's type).
    """
    if fmt not in FORMATS:
        raise ValueError(f"`precision.base_weights`: {fmt!r} is not a quantised format ({', '.join(FORMATS)})")
    import bitsandbytes as bnb

    paths, kept = quantisable_linears(module, skip)
    largest = 0
    for path in paths:
        parent_path, _, name = path.rpartition(".")
        parent = module.get_submodule(parent_path) if parent_path else module
        old = getattr(parent, name)
        where = device if device is not None else old.weight.device
        weight = old.weight.data.to(where, compute)
        largest = max(largest, weight.numel() * weight.element_size())
        bias = old.bias is not None
        if fmt == "nf4":
            new = bnb.nn.Linear4bit(old.in_features, old.out_features, bias=bias, compute_dtype=compute,
                                    compress_statistics=NF4_DOUBLE_QUANT, quant_type="nf4", device="meta")
            new.weight = bnb.nn.Params4bit(weight, requires_grad=False, blocksize=NF4_BLOCKSIZE,
                                           compress_statistics=NF4_DOUBLE_QUANT, quant_type="nf4", module=new)
            # on an AVX512-BF16 CPU, bitsandbytes repacks a 4-bit weight in place for its inference kernel at the
            # first no-grad forward in eval mode (sample images, the validation loss): that failed on small layers
            # ("shape '[32, 0]' is invalid") and would make those forwards differ from training's: left off
            new.support_avx512bf16_for_cpu = False
        else:
            new = bnb.nn.Linear8bitLt(old.in_features, old.out_features, bias=bias, has_fp16_weights=False,
                                      threshold=INT8_THRESHOLD, device="meta")
            # Int8Params.to quantises only on the way from the CPU: quantised here on the weight's device, as its
            # own _quantize does (through fp16: a weight beyond ±65504 would overflow; none of the families has one)
            cb, scb, _ = bnb.functional.int8_vectorwise_quant(weight.contiguous().to(torch.float16))
            new.weight = bnb.nn.Int8Params(cb, requires_grad=False, has_fp16_weights=False)
            new.weight.CB, new.weight.SCB = cb, scb
        if bias:
            new.bias = torch.nn.Parameter(old.bias.data.to(where, compute), requires_grad=False)
        if fmt == "nf4":
            new.weight = new.weight.to(where)  # Params4bit.to quantises, on that device
        new.train(old.training)
        setattr(parent, name, new)
        del old, weight
    return QuantisedStorage(tuple(paths), tuple(kept), largest)


def quantised_layers(module: torch.nn.Module) -> dict[str, str]:
    """Module path -> "int8" / "nf4" for every bitsandbytes layer of ``module`` (peft's wrappers looked through)."""
    import bitsandbytes as bnb

    out: dict[str, str] = {}
    for path, m in module.named_modules():
        if isinstance(m, bnb.nn.Linear4bit):
            out[path.removesuffix(".base_layer")] = "nf4"
        elif isinstance(m, bnb.nn.Linear8bitLt):
            out[path.removesuffix(".base_layer")] = "int8"
    return out
