"""What each memory saver costs, in the order "Fit to this card" weighs them: the extra step time it adds (a
factor on the step's time) and what it may cost the LoRA's quality, each with where the figure comes from.

The chooser (:mod:`guitrainer.core.memory.fit`) takes the settings that fit with the smallest step-time factor;
among equally fast ones, the smallest quality cost; then the fewest changes. So a faster choice that fits is
never passed over for a slower one, and a saver that costs quality is taken only where nothing as fast fits.

The factors are this table's, not measurements of the user's GPU: the precision lab measures the chosen settings
on the machine itself, and ``bench/gpu_suite.py`` measures them where a GPU is lent (``bench/RESULTS.md``).
Savers that cost nothing here (the caches, the 8-bit optimizer) still count as a change: they are taken only
where the run needs the memory, so a run that fits is left as the user set it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """One setting's value: the step-time factor it brings (1.0: none), its quality cost (0: none; the units are
    only ordered, not summed with time), and the source of both."""

    slower: float
    quality: float
    why: str


#: gradient checkpointing recomputes each block's forward in the backward pass: one more forward per step, a
#: forward being about a third of a training step (Chen et al. 2016, arXiv:1604.06174, "one extra forward
#: pass"); diffusers and sd-scripts document it as trading speed for memory
CHECKPOINTING = Cost(1.30, 0.0, "recomputes each block's forward in the backward pass: about 30 % slower "
                                "(Chen et al. 2016, one extra forward pass per step)")

#: the VAE encodes each image once instead of at every step; the cache keys the crop and the flip, so augmentation
#: is kept (engine/cache.py)
CACHE_LATENTS = Cost(1.0, 0.0, "each image is encoded once, not at every step (its crop and flip kept): no slower")

#: the text encoders run once per caption; refused where the captions change per step or the encoders train
CACHE_TEXT = Cost(1.0, 0.0, "each caption is encoded once, and the text encoders leave the GPU: no slower")

#: 8-bit AdamW keeps the optimizer's two states in 8 bits (block-wise quantised): "8-bit optimizers ... maintain
#: 32-bit performance" on the tasks of Dettmers et al. 2022 (arXiv:2110.02861)
ADAMW_8BIT = Cost(1.0, 0.005, "the optimizer's states in 8 bits; matches 32-bit AdamW in Dettmers et al. 2022")

#: frozen weights kept in a smaller format: fp8 is widened one layer at a time as it computes (one cast of the
#: layer's weight per use, small beside its matmul over every token); int8 and nf4 are bitsandbytes' layers
#: (engine/network/quantised_storage.py), which do more per matmul, so they come after fp8 in the order of cost
BASE_WEIGHTS: dict[str, Cost] = {
    "auto": Cost(1.0, 0.0, "frozen weights in the training precision"),
    "fp8": Cost(1.03, 0.05, "fp8 e4m3 without a scale: 3 mantissa bits, about 3 % per weight (sd-scripts' "
                            "--fp8_base: 'the training results may vary')"),
    "int8": Cost(1.15, 0.01, "int8 with a scale per row: 0.7 % per weight, against about 3 % for fp8 (measured on "
                             "Gaussian weights, research note); bitsandbytes' LLM.int8() quantises the activations "
                             "at every matmul and runs outlier columns in 16 bits, slower than 16-bit matmuls "
                             "(Dettmers et al. 2022; 15 % assumed until the GPU suite measures it)"),
    "nf4": Cost(1.30, 0.10, "4-bit NF4 with double quantisation (QLoRA): matched bf16 in Dettmers et al. 2023 on "
                            "language models; SimpleTuner warns of stability on Flux; 4-bit blocks are dequantised "
                            "at every use (the B200 figures of issue 35: 1.81 steps/s nf4)"),
}

#: blocks kept in system RAM cross the PCIe bus twice per step (forward, backward), overlapped with the blocks
#: between; at the full share and 2-byte weights this table assumes half a step more (about 25 GB/s on PCIe 4.0
#: x16 against Flux's 24 GB of bf16 blocks per pass), less for smaller stored weights
OFFLOAD_AT_FULL_SHARE = 0.50
OFFLOAD_WHY = ("each block in RAM is copied to the GPU twice per step, overlapped with computing the others: "
               "assumed up to half a step more with every block out in 16-bit, less in smaller formats")

#: a batch halved with twice the gradient accumulation trains the same steps on the same images (the same
#: effective batch), with less of the GPU busy at once
BATCH_HALVED = Cost(1.10, 0.0, "the same effective batch through gradient accumulation; a smaller batch keeps "
                               "the GPU less busy: about 10 % slower per halving (assumed)")

#: a half training precision where the device recommends one: faster, not slower, with bf16's small drift; the
#: precision picker chooses it anyway, so Fit changes it only where the memory is needed
HALF_PRECISION = Cost(1.0, 0.01, "the precision this device is recommended (half the weights' memory, faster)")


def offload_slower(share: float, stored_bytes: float) -> float:
    """The step-time factor of keeping ``share`` of the blocks in system RAM, stored in ``stored_bytes`` per
    weight (2 for bf16 / fp16, 1 for fp8 / int8, about 0.52 for nf4)."""
    return 1.0 + OFFLOAD_AT_FULL_SHARE * share * stored_bytes / 2.0
