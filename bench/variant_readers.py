"""How far each reader's merge of a full-size SD 1.5 / SDXL LoHa or LoKr file is from the trained weights, per save
precision: the numbers behind ``core/model/variant_readers.py``'s save-precision note.

Every UNet layer a default LoHa / LoKr network trains (rank 16, alpha 16, conv rank 8, conv alpha 4, LoKr factor -1)
is built at full size: its base weight as the layer's own initialisation, its factors as peft initialises them
plus a uniform drift of +-0.05 (what 500 Adam steps at the default learning rate 1e-4 can move a weight at most;
no real SD weights or training run here, so this stands in for a trained file: a longer run moves the factors
further and makes the products larger, which helps fp16). The file's tensors are cast to the save precision and
merged by each reader's rules (:func:`guitrainer.engine.network.client_merge.module_weight`): ComfyUI in fp32 from
the file's tensors, A1111 in the file's dtype (base weight and change added in it), on fp32 base weights (A1111
with ``--no-half``) and on fp16 ones (its default on a GPU), each merged weight stored in the model's dtype.
Reported: the worst and the median module's ``||W'_reader - W'_trained|| / ||W'_trained - W||``, where
W'_trained is the trained weight as the model's dtype holds it (so an fp16 model's own rounding is not counted).

    PYTHONPATH=. python bench/variant_readers.py [sd15|sdxl ...]      # ~15 min for both on 2 loaded CPU cores
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from guitrainer.config import NetworkConfig  # noqa: E402
from guitrainer.engine.memory import model_spec  # noqa: E402
from guitrainer.engine.network import client_merge, lycoris_keys, variants  # noqa: E402

DRIFT = 500 * 1e-4  # the most 500 Adam steps at lr 1e-4 move one weight
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _materialise(layer: nn.Module, gen: torch.Generator) -> torch.Tensor:
    """Give one meta adapter layer real tensors: the base weight's own init, peft's factor init plus the drift."""
    base = layer.get_base_layer()
    if isinstance(base, nn.Conv2d):
        weight = nn.Conv2d(base.in_channels, base.out_channels, base.kernel_size, bias=False).weight.detach()
    else:
        weight = nn.Linear(base.in_features, base.out_features, bias=False).weight.detach()
    for name, p in list(layer.named_parameters()):
        if not name.startswith(("hada_", "lokr_")):
            continue
        owner_path, _, key = name.rpartition(".")
        owner = layer.get_submodule(owner_path)
        owner[key] = nn.Parameter(torch.empty(p.shape))
    layer.reset_adapter_parameters(variants.ADAPTER)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.startswith(("hada_", "lokr_")):
                p.add_(torch.empty(p.shape).uniform_(-DRIFT, DRIFT, generator=gen))
    return weight


def measure(family: str, kind: str) -> dict[str, dict[str, list[float]]]:
    """reader -> precision -> every module's relative error (conv modules and linear ones together)."""
    unet = model_spec.build_on_meta(family, "unet")
    variants.inject_unet(unet, NetworkConfig(type=kind))
    gen = torch.Generator().manual_seed(0)
    out: dict[str, dict[str, list[float]]] = {f"{r}, {m} model": {p: [] for p in DTYPES}
                                               for m in ("fp32", "fp16") for r in ("comfyui", "a1111")}
    for layer in variants.adapter_layers(unet).values():
        weight = _materialise(layer, gen)
        layer.get_base_layer().weight = nn.Parameter(weight, requires_grad=False)
        delta = variants.effective_delta(layer)
        size = float(delta.norm())
        parts = lycoris_keys.layer_tensors(layer)
        for model in ("fp32", "fp16"):
            held = weight.to(DTYPES[model])  # the model's weight; the best it can hold of the trained one:
            truth = (weight + delta).to(DTYPES[model]).float()
            for precision, dtype in DTYPES.items():
                cast = {k: v.to(dtype) for k, v in parts.items()}
                for reader in ("comfyui", "a1111"):
                    merged = client_merge.module_weight(cast, held, reader).to(DTYPES[model]).float()
                    out[f"{reader}, {model} model"][precision].append(float((merged - truth).norm()) / size)
        layer.get_base_layer().weight = nn.Parameter(torch.empty(0), requires_grad=False)  # free it
    return out


def main(families: list[str]) -> None:
    print("| family | type | reader | fp32 worst / median | fp16 worst / median | bf16 worst / median |")
    print("|---|---|---|---|---|---|")
    for family in families:
        for kind in ("loha", "lokr"):
            t0 = time.perf_counter()
            result = measure(family, kind)
            for reader, per in result.items():
                cells = [f"{max(v):.2g} / {statistics.median(v):.2g}" for v in per.values()]
                print(f"| {family} | {kind} | {reader} | " + " | ".join(cells) + " |")
            print(f"<!-- {family} {kind}: {len(next(iter(result.values()))['fp32'])} modules, {time.perf_counter() - t0:.0f} s -->")


if __name__ == "__main__":
    main(sys.argv[1:] or ["sd15", "sdxl"])
