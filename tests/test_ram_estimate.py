"""The memory estimate with blocks in system RAM (``precision.offload_blocks``) and the system-RAM breakdown
(core/memory/system_ram.py): the GPU's part drops by the offloaded share of the block weights (less the two
blocks streamed at once), the RAM's pinned part grows by it; the caches, the parked modules, the CPU case."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import config_with, fake_device

from guitrainer.base import units
from guitrainer.core.memory import estimate, offload, specs, system_ram
from guitrainer.core.memory.network import allocated

GPU = fake_device("rtx3060")


def cfg(**settings: object):
    base = {"model__family": "sdxl", "precision__training": "bf16", "precision__gradient_checkpointing": True}
    return config_with(**{**base, **settings})


@pytest.mark.parametrize("family", ["sd15", "sdxl", "demo"])
def test_the_gpu_part_drops_by_the_offloaded_share_and_the_ram_part_grows_by_it(family):
    spec = specs.spec_of(family)
    plain = estimate.estimate(cfg(model__family=family), spec, GPU)
    half = estimate.estimate(cfg(model__family=family, precision__offload_blocks=0.5), spec, GPU)
    plan = offload.plan(spec.offload_blocks, 0.5)
    blocks = sum(map(sum, spec.offload_blocks))
    # half of each block list, evenly spread: close to half of the block weights (UNet blocks differ in size)
    assert 0.35 < plan.offloaded / blocks < 0.65, plan
    w = 2  # bf16
    assert plain.get("unet") - half.get("unet") == pytest.approx(plan.offloaded * w, abs=512)
    assert half.get("offload_stream") == allocated(plan.in_flight * w) > 0
    assert plain.get("offload_stream") == 0
    saved = plain.total - half.total
    assert saved == pytest.approx((plan.offloaded - plan.in_flight) * w, abs=1024)
    ram_plain = system_ram.estimate_ram(cfg(model__family=family), spec, GPU, images=0, machine_total=0)
    ram_half = system_ram.estimate_ram(cfg(model__family=family, precision__offload_blocks=0.5), spec, GPU, images=0,
                                       machine_total=0)
    assert ram_half.get("pinned_blocks") == plan.offloaded * w
    assert ram_half.training - ram_plain.training == plan.offloaded * w


def test_every_block_offloaded_leaves_two_on_the_gpu_and_fp8_halves_the_pinned_part():
    spec = specs.spec_of("sdxl")
    all_off = estimate.estimate(cfg(precision__offload_blocks=1.0), spec, GPU)
    plan = offload.plan(spec.offload_blocks, 1.0)
    assert plan.blocks == plan.total_blocks == 16 + 70  # ResNets, transformer blocks
    assert plan.offloaded == sum(map(sum, spec.offload_blocks))
    assert plan.in_flight == sum(sorted((b for lst in spec.offload_blocks for b in lst), reverse=True)[:2])
    assert all_off.get("unet") == allocated((spec.denoiser - plan.offloaded) * 2)
    bf16 = system_ram.estimate_ram(cfg(precision__offload_blocks=1.0), spec, GPU, images=0, machine_total=0)
    fp8 = system_ram.estimate_ram(cfg(precision__offload_blocks=1.0, precision__base_weights="fp8"), spec, GPU,
                                  images=0, machine_total=0)
    assert bf16.get("pinned_blocks") == 2 * fp8.get("pinned_blocks") == 2 * plan.offloaded


@pytest.mark.parametrize("settings, device, note", [
    ({"precision__gradient_checkpointing": False}, GPU, "need gradient checkpointing"),
    ({}, fake_device("mps"), "Apple GPU"),
])
def test_offload_the_run_would_not_do_is_not_counted_and_says_why(settings, device, note):
    spec = specs.spec_of("sdxl")
    plain = estimate.estimate(cfg(**settings), spec, device)
    half = estimate.estimate(cfg(precision__offload_blocks=0.5, **settings), spec, device)
    assert half.total == plain.total and half.get("offload_stream") == 0
    assert any(note in n for n in half.notes)


def test_a_family_without_a_block_table_says_offload_is_not_counted():
    spec = dataclasses.replace(specs.spec_of("sdxl"), offload_blocks=())
    half = estimate.estimate(cfg(precision__offload_blocks=0.5), spec, GPU)
    assert half.get("unet") == estimate.estimate(cfg(), spec, GPU).get("unet")
    assert any("no block table" in n for n in half.notes)


def test_caches_and_parked_modules_by_hand():
    """SD 1.5 at 512 px, fp16, 100 images flipped: 200 latents of 4 × 64 × 64 in fp16 = 6,553,600 bytes; text:
    100 captions of 77 × 768 fp16 = 11,827,200 bytes; parked: the VAE (83.7 M params) and CLIP-L (123 M) in fp16."""
    spec = specs.spec_of("sd15")
    c = config_with(model__family="sd15", precision__training="fp16", dataset__resolution=512, dataset__flip_augment=True,
                    precision__cache_latents=True, precision__cache_text_encoder_outputs=True)
    ram = system_ram.estimate_ram(c, spec, GPU, images=100, machine_total=0)
    assert ram.get("latent_cache") == 200 * 4 * 64 * 64 * 2 == 6_553_600
    assert ram.get("text_cache") == 100 * 77 * 768 * 2 == 11_827_200
    assert ram.get("parked") == (spec.vae + sum(spec.text_encoders)) * 2
    assert ram.get("dataset") == 0  # the pixels go once the latents are cached
    # decoded images, fp32 3 × 512 × 512 = 3 MiB each: 50 are 150 MiB, kept; 100 are 300 MiB, over the 256 MiB
    # the dataset keeps, so none are
    uncached = config_with(model__family="sd15", dataset__resolution=512, precision__cache_latents=False)
    few = system_ram.estimate_ram(uncached, spec, GPU, images=50, machine_total=0)
    assert few.get("dataset") == 50 * 3 * 4 * 512 * 512 and few.get("latent_cache") == 0
    assert system_ram.estimate_ram(uncached, spec, GPU, images=100, machine_total=0).get("dataset") == 0
    unknown = system_ram.estimate_ram(c, spec, GPU, machine_total=0)
    assert unknown.get("latent_cache") == 0 and any("images unknown" in n for n in unknown.notes)


def test_the_peak_is_the_baseline_and_the_larger_of_loading_and_training():
    spec = specs.spec_of("sdxl")
    ram = system_ram.estimate_ram(cfg(precision__offload_blocks=1.0), spec, GPU, images=10, machine_total=0)
    assert ram.loading == estimate.peak_system_ram_loading(cfg(), spec)  # with the window: the old figure
    assert ram.training == sum(p.bytes for p in ram.parts if p.key != "loading")
    assert ram.peak == max(ram.loading, ram.training)
    headless = system_ram.estimate_ram(cfg(), spec, GPU, images=10, window=False, machine_total=0)
    assert headless.get("baseline") == system_ram.BASELINE_HEADLESS


def test_on_a_cpu_the_training_itself_is_in_ram_and_nothing_is_offloaded():
    spec = specs.spec_of("demo")
    cpu = fake_device("cpu")
    c = config_with(model__family="demo", precision__training="fp32", precision__gradient_checkpointing=True)
    ram = system_ram.estimate_ram(c, spec, cpu, images=8, machine_total=0)
    assert ram.get("training") == estimate.estimate(c, spec, cpu).allocated
    c.precision.offload_blocks = 0.5
    with_offload = system_ram.estimate_ram(c, spec, cpu, images=8, machine_total=0)
    assert with_offload.parts == ram.parts  # no pinned part, the same training part
    assert with_offload.get("parked") == spec.vae * 4  # the VAE stays in RAM after caching the latents


@pytest.mark.real_machine_ram
def test_the_machine_ram_is_read_without_new_dependencies():
    total = system_ram.machine_ram()
    assert total is not None and total > units.GiB
    with open("/proc/meminfo", encoding="ascii") as f:
        mem_total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    assert abs(total - mem_total) < 64 * units.MiB


def test_the_meter_offers_half_the_blocks_in_ram_where_it_frees_the_gpu():
    """A hint with checkpointing on too (offload needs it); not on a CPU or an Apple GPU, where it frees nothing."""
    from guitrainer.core.memory import hints

    c = cfg(precision__gradient_checkpointing=False)
    offered = {h.label: h for h in hints.hints(c, device=GPU)}
    hint = offered["Half the blocks in RAM"]
    assert hint.changes == {"precision.offload_blocks": 0.5, "precision.gradient_checkpointing": True}
    with_ckpt = estimate.estimate(cfg(), device=GPU).total - estimate.estimate(cfg(precision__offload_blocks=0.5), device=GPU).total
    assert hint.saving > with_ckpt > 0  # checkpointing's own saving comes with it
    for device in ("cpu", "mps"):
        assert "Half the blocks in RAM" not in {h.label for h in hints.hints(c, device=fake_device(device))}
    assert "Half the blocks in RAM" not in {h.label for h in hints.hints(cfg(precision__offload_blocks=0.5), device=GPU)}
