"""Key names of each network type for full-size SD 1.5 and SDXL (built on meta: no weights, no download),
compared with kohya sd-scripts' module selection rule applied to the same model.

kohya's rule (networks/lora.py, create_modules): inside every module whose class is in the target list,
each Linear and Conv2d child is a LoRA module named ``<prefix>_<full path with . as _>``. Targets:
UNet ``Transformer2DModel`` (+ ``ResnetBlock2D``, ``Downsample2D``, ``Upsample2D`` with conv_dim, i.e. LoCon
and LyCORIS); text encoders ``CLIPAttention`` / ``CLIPSdpaAttention`` and ``CLIPMLP``. This rule is written
here from kohya's code, apart from guitrainer's suffix tables, so a difference shows up. kohya spells SDXL's
UNet paths in the original (LDM/SGM) layout, ``input_blocks_4_1_...``, SD 1.x's in diffusers' layout; the
original-layout spelling here is the test helper's table (``tests/helpers/lycoris_reader.py``), written apart
from guitrainer's ``engine/network/kohya_names.py``.

    python bench/variant_keys.py            (~10 s on a CPU)
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import torch

from guitrainer.config import NetworkConfig
from guitrainer.engine.memory import model_spec
from guitrainer.engine.network import lycoris_keys, variants
from guitrainer.engine.network.lora import kohya_module_name, te_prefixes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.lycoris_reader import ldm_to_diffusers  # noqa: E402 - the independent layout table

UNET_BLOCKS = ("Transformer2DModel",)
CONV_BLOCKS = ("ResnetBlock2D", "Downsample2D", "Upsample2D")
TE_BLOCKS = ("CLIPAttention", "CLIPSdpaAttention", "CLIPMLP")


def original_spelling(unet: torch.nn.Module) -> dict[str, str]:
    """diffusers path -> original-layout path (longest table prefix), as kohya's SDXL UNet names its modules."""
    table = {diff: ldm for ldm, diff in ldm_to_diffusers(unet.config).items()}
    out: dict[str, str] = {}
    for path, _ in unet.named_modules():
        parts = path.split(".")
        for cut in range(len(parts), 0, -1):
            if ".".join(parts[:cut]) in table:
                out[path] = ".".join([table[".".join(parts[:cut])], *parts[cut:]])
                break
    return out


def kohya_modules(model: torch.nn.Module, prefix: str, blocks: tuple[str, ...], spell: dict[str, str]) -> set[str]:
    out = set()
    for name, module in model.named_modules():
        if type(module).__name__ in blocks:
            for child, m in module.named_modules():
                if isinstance(m, torch.nn.Linear | torch.nn.Conv2d):
                    path = f"{name}.{child}" if child else name
                    out.add(kohya_module_name(prefix, spell.get(path, path)))
    return out


def row(family: str, kind: str) -> tuple[str, int, int, int, str]:
    unet = model_spec.build_on_meta(family, "unet")
    parts = [p for p in ("text_encoder", "text_encoder_2") if p in model_spec.component_configs(family)]
    tes = [model_spec.build_on_meta(family, p) for p in parts]
    spell = original_spelling(unet) if family == "sdxl" else {}
    want = kohya_modules(unet, "lora_unet", UNET_BLOCKS + (CONV_BLOCKS if kind != "lora" else ()), spell)
    for prefix, te in zip(te_prefixes(len(tes)), tes):
        want |= kohya_modules(te, prefix, TE_BLOCKS, {})
    net = NetworkConfig(type=kind, rank=16, alpha=8, conv_rank=8, conv_alpha=4, target_modules="attention_ff_proj")
    with torch.device("meta"):
        variants.inject_unet(unet, net)
        for te in tes:
            variants.inject_text_encoder(te, net)
    keys = lycoris_keys.key_names(unet, tes)
    ours = {k.partition(".")[0] for k in keys}
    missing, extra = sorted(want - ours), sorted(ours - want)
    note = "same modules" if not missing and not extra else f"kohya only: {len(missing)} (e.g. {missing[:1]}), ours only: {len(extra)} {extra[:1]}"
    suffixes = Counter(k.partition(".")[2] for k in keys)
    return note, len(ours), len(want), len(keys), ", ".join(f"{s} {n}" for s, n in sorted(suffixes.items()))


def main() -> int:
    print("| family | type | modules (ours) | modules (kohya rule) | keys | comparison | keys by suffix |")
    print("|---|---|---|---|---|---|---|")
    for family in ("sd15", "sdxl"):
        for kind in ("lora", "locon", "loha", "lokr", "dora"):
            note, ours, want, keys, by = row(family, kind)
            print(f"| {family} | {kind} | {ours} | {want} | {keys} | {note} | {by} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
