"""Train the Demo's base model from scratch: a tiny SD-1.x-shaped model that draws flat coloured shapes.

    python resources/make_demo_base.py                 # trains and writes resources/models/demo_base
    python resources/make_demo_base.py --check-only    # re-measures the shipped model's samples (its marker's "check")

Everything comes from :mod:`guitrainer.core.demo.shapes` (the same drawings the Demo dataset and the sample
measure use) and :func:`guitrainer.engine.models.demo.demo_components` (the architecture), with the fixed
seeds in :data:`CONFIG`; nothing is downloaded. Three stages:

1. the VAE, as an autoencoder on random drawings (every shape, the Demo's concept among them: a VAE is a
   general picture codec, as SD's is), reconstruction loss plus a small KL term;
2. its latents of a fixed pool of base-shape drawings, whose standard deviation sets ``scaling_factor``;
3. the UNet and the text encoder together on that pool, captioned "a blue square" (epsilon prediction on
   SD's DDPM schedule, min-SNR-5 loss weights, 10 % of captions dropped so guidance works). The UNet and the
   text encoder never see the concept ("a zorb", a long red bar): that is what the Demo's LoRA teaches.

Then it samples every base prompt through the app's own pipeline (DDIM, 20 steps, guidance 5, seeds 0 and 1),
reads each picture with :mod:`guitrainer.core.demo.measure`, and writes the figures, the seconds each stage
took and the CPU into ``guitrainer_demo.json`` beside the weights. On a 2-core x86 CPU it takes about 40 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from guitrainer.core.demo.measure import read_image  # noqa: E402
from guitrainer.core.demo.shapes import (  # noqa: E402
    BASE_SHAPES,
    CONCEPT,
    PALETTE,
    SIZE,
    base_drawings,
    draw,
    random_drawing,
)
from guitrainer.core.device.hardware import cpu_name  # noqa: E402
from guitrainer.engine.models.demo import (  # noqa: E402
    DEMO_MARKER,
    DEMO_VERSION,
    demo_components,
    demo_vocab,
    write_demo_folder,
    write_demo_tokenizer,
)

TARGET = ROOT / "resources" / "models" / "demo_base"

#: every number the weights depend on; written into the marker, and the test compares the two
CONFIG: dict[str, float | int] = {
    "seed": 1234,
    "vae_steps": 1000,
    "vae_batch": 8,
    "vae_lr": 1e-3,
    "vae_kl_weight": 1e-6,
    "latent_pool": 6144,
    "unet_steps": 4000,
    "unet_batch": 32,
    "unet_lr": 1e-3,
    "unet_warmup": 200,
    "min_snr_gamma": 5.0,
    "caption_dropout": 0.1,
    "check_steps": 20,
    "check_guidance": 5.0,
    "check_seeds": 2,
}


def pictures(drawings: list, size: int = SIZE) -> torch.Tensor:
    """Drawings as a [-1, 1] float batch (N, 3, size, size)."""
    arr = np.stack([np.asarray(draw(d, size), dtype=np.float32) for d in drawings])
    return torch.from_numpy(arr).permute(0, 3, 1, 2) / 127.5 - 1.0


def vae_drawing(rng: random.Random):
    """A drawing for the VAE: a base shape three times in four, the concept's shape otherwise."""
    if rng.random() < 0.25:
        return random_drawing(rng, CONCEPT.shape, rng.choice(list(PALETTE)))
    return random_drawing(rng, rng.choice(BASE_SHAPES), rng.choice(list(PALETTE)))


def train_vae(vae, rng: random.Random) -> None:
    opt = torch.optim.AdamW(vae.parameters(), lr=CONFIG["vae_lr"], weight_decay=0.0)
    steps = int(CONFIG["vae_steps"])
    vae.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = CONFIG["vae_lr"] * 0.5 * (1 + math.cos(math.pi * step / steps))
        x = pictures([vae_drawing(rng) for _ in range(int(CONFIG["vae_batch"]))])
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.sample()).sample
        kl = post.kl().mean()
        loss = F.mse_loss(rec, x) + F.l1_loss(rec, x) + CONFIG["vae_kl_weight"] * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  vae step {step:4d}/{steps}  loss {loss.item():.4f}", flush=True)
    vae.eval()


@torch.no_grad()
def encode_pool(vae, rng: random.Random) -> tuple[torch.Tensor, list[str]]:
    stream = base_drawings(rng)
    drawings = [next(stream) for _ in range(int(CONFIG["latent_pool"]))]
    latents = []
    for i in range(0, len(drawings), 256):
        latents.append(vae.encode(pictures(drawings[i : i + 256])).latent_dist.mean)
    return torch.cat(latents), [d.caption for d in drawings]


def encode_text(tokenizer, text_encoder, captions: list[str]) -> torch.Tensor:
    ids = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="pt").input_ids
    return text_encoder(ids)[0]


def train_denoiser(unet, text_encoder, tokenizer, scheduler, latents: torch.Tensor, captions: list[str], rng: random.Random) -> None:
    params = [*unet.parameters(), *text_encoder.parameters()]
    opt = torch.optim.AdamW(params, lr=CONFIG["unet_lr"], weight_decay=1e-2)
    steps, warmup, batch = int(CONFIG["unet_steps"]), int(CONFIG["unet_warmup"]), int(CONFIG["unet_batch"])
    alphas = scheduler.alphas_cumprod
    snr = alphas / (1 - alphas)
    gen = torch.Generator().manual_seed(int(CONFIG["seed"]))
    unet.train()
    text_encoder.train()
    for step in range(steps):
        scale = (step + 1) / warmup if step < warmup else 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))
        for g in opt.param_groups:
            g["lr"] = CONFIG["unet_lr"] * scale
        idx = torch.randint(0, len(latents), (batch,), generator=gen)
        x0 = latents[idx] * CONFIG["scaling_factor"]
        texts = ["" if rng.random() < CONFIG["caption_dropout"] else captions[i] for i in idx.tolist()]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, scheduler.config.num_train_timesteps, (batch,), generator=gen)
        xt = scheduler.add_noise(x0, noise, t)
        pred = unet(xt, t, encode_text(tokenizer, text_encoder, texts)).sample
        weight = torch.clamp(snr[t], max=CONFIG["min_snr_gamma"]) / snr[t]
        loss = (weight * F.mse_loss(pred, noise, reduction="none").mean(dim=(1, 2, 3))).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 200 == 0 or step == steps - 1:
            print(f"  denoiser step {step:4d}/{steps}  loss {loss.item():.4f}", flush=True)
    unet.eval()
    text_encoder.eval()


def check(folder: Path) -> dict[str, object]:
    """Sample every base prompt through the app's pipeline and read each picture: how many show what they ask."""
    from guitrainer.engine.families import registry

    model = registry.family("demo").load_folder(folder)
    pipe = registry.family("demo").pipeline(model)
    shown, rows = 0, []
    for color in PALETTE:
        for shape in BASE_SHAPES:
            prompt = f"a {color} {shape}"
            for seed in range(int(CONFIG["check_seeds"])):
                g = torch.Generator().manual_seed(seed)
                img = pipe(prompt, num_inference_steps=int(CONFIG["check_steps"]), guidance_scale=CONFIG["check_guidance"],
                           height=SIZE, width=SIZE, generator=g).images[0]
                r = read_image(img)
                ok = r.shows(shape, color)
                shown += ok
                rows.append(f"{prompt} seed {seed}: {r.describe()}{'' if ok else '  <- not shown'}")
    total = len(PALETTE) * len(BASE_SHAPES) * int(CONFIG["check_seeds"])
    for row in rows:
        print("  " + row)
    print(f"  shown: {shown}/{total}")
    return {"shown": shown, "samples": total, "steps": CONFIG["check_steps"], "guidance": CONFIG["check_guidance"]}




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check-only", action="store_true", help="re-measure the shipped model, train nothing")
    parser.add_argument("--out", type=Path, default=TARGET, help=f"where to write the model (default {TARGET})")
    args = parser.parse_args()
    if args.check_only:  # the weights stay; the check's figures in the marker are measured again
        marker_path = args.out / DEMO_MARKER
        marker = json.loads(marker_path.read_text(encoding="utf-8"))
        marker["check"] = check(args.out)
        marker_path.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        return 0
    torch.manual_seed(int(CONFIG["seed"]))
    rng = random.Random(int(CONFIG["seed"]))
    tmp = Path(tempfile.mkdtemp(prefix=".demo_base.", dir=args.out.parent))
    try:
        vocab = write_demo_tokenizer(tmp / "tokenizer")
        assert vocab == demo_vocab()[0]
        unet, vae, text_encoder, scheduler = demo_components(vocab, int(CONFIG["seed"]))
        from transformers import CLIPTokenizer

        tokenizer = CLIPTokenizer.from_pretrained(str(tmp / "tokenizer"))
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        print("1/3 the VAE", flush=True)
        train_vae(vae, rng)
        times["vae_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        latents, captions = encode_pool(vae, rng)
        CONFIG["scaling_factor"] = round(1.0 / float(latents.std()), 5)
        vae.register_to_config(scaling_factor=CONFIG["scaling_factor"])
        print(f"2/3 latents of {len(latents)} drawings: scaling_factor {CONFIG['scaling_factor']}", flush=True)
        print("3/3 the UNet and the text encoder", flush=True)
        train_denoiser(unet, text_encoder, tokenizer, scheduler, latents, captions, rng)
        times["denoiser_s"] = round(time.perf_counter() - t0, 1)
        write_demo_folder(tmp, unet, vae, text_encoder, scheduler)
        print("check: the base prompts' samples", flush=True)
        figures = check(tmp)
        marker = {
            "version": DEMO_VERSION,
            "made_by": "resources/make_demo_base.py",
            "config": CONFIG,
            "check": figures,
            "seconds": {**times, "total_s": round(times["vae_s"] + times["denoiser_s"], 1)},
            "machine": f"{cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        }
        (tmp / DEMO_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if args.out.exists():
            shutil.rmtree(args.out)
        tmp.rename(args.out)
        print(json.dumps(marker, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
