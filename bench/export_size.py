"""LoRA file size and save time for a full-size SD 1.5 UNet, per rank and save precision.

The UNet is built on the meta device from ``resources/models/sd15/unet/config.json`` (no weights, no
download); only the LoRA tensors of its attention projections (to_q/k/v/out.0, the "attention" targets)
are real, random, and saved through the same path as training: fp16 range check, cast, atomic write (fsync).

    python bench/export_size.py [--ranks 16 128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from guitrainer.core.model.lora_format import UNET_LORA_TARGETS
from guitrainer.engine import export as X
from guitrainer.engine.network import lora as L

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "resources" / "models" / "sd15" / "unet" / "config.json"


def attention_linears() -> dict[str, tuple[int, int]]:
    """Module path -> (in, out) of the SD 1.5 UNet's attention projections."""
    from diffusers import UNet2DConditionModel

    config = json.loads(CONFIG.read_text())
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(config)
    leaves = UNET_LORA_TARGETS["attention"]
    return {
        n: (m.in_features, m.out_features)
        for n, m in unet.named_modules()
        if isinstance(m, torch.nn.Linear) and n.endswith(leaves)
    }


def lora_state_dict(layers: dict[str, tuple[int, int]], rank: int, alpha: float) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    sd: dict[str, torch.Tensor] = {}
    for name, (fan_in, fan_out) in layers.items():
        key = L.kohya_module_name("lora_unet", name)
        sd[f"{key}.lora_down.weight"] = torch.randn(rank, fan_in, generator=g) / rank
        sd[f"{key}.lora_up.weight"] = torch.randn(fan_out, rank, generator=g) * 1e-3
        sd[f"{key}.alpha"] = torch.tensor(alpha)
    return sd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    layers = attention_linears()
    print(f"SD 1.5 UNet, {len(layers)} attention projections (to_q/k/v/out.0)")
    print("| rank | save precision | LoRA params | file size | fp16 check | save time (median) |")
    print("|---:|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for rank in args.ranks:
            sd = lora_state_dict(layers, rank, rank / 2)
            params = sum(v.numel() for k, v in sd.items() if not k.endswith(".alpha"))
            for precision in ("fp32", "fp16", "bf16"):
                path = Path(tmp) / f"r{rank}_{precision}.safetensors"
                t0 = time.perf_counter()
                X.check_fp16(sd)
                check = time.perf_counter() - t0
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    if precision == "fp16":
                        X.check_fp16(sd)
                    X.save_lora(path, sd, {"ss_network_dim": str(rank)}, precision, check=False)
                    times.append(time.perf_counter() - t0)
                size = path.stat().st_size
                shown_check = f"{check * 1000:.0f} ms" if precision == "fp16" else "-"
                print(
                    f"| {rank} | {precision} | {params / 1e6:.2f} M | {size / 2**20:.1f} MiB | {shown_check} | "
                    f"{statistics.median(times) * 1000:.0f} ms |"
                )


if __name__ == "__main__":
    main()
