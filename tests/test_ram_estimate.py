"""The memory estimate with blocks in system RAM (``precision.offload_blocks``) and the system-RAM breakdown
(core/memory/system_ram.py): the GPU's part drops by the offloaded share of the block weights (less the two
blocks streamed at once), the RAM's pinned part grows by it; the caches, the parked modules, the CPU case."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import config_with, fake_device

from guitrainer.base import units
from guitrainer.core.memory import estimate, load_files, offload, specs, system_ram
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


# --------------------------------------------------------------------------- loading: each part in its training dtype

FLUX_DEV = {"denoiser": 11_901_408_320, "clip_l": 123_060_480, "t5": 4_762_310_656,
            "vae": 34_274_208 + 49_545_475}  # core/families/flux1.py SPEC: the VAE's encoder + decoder


def _flux(training: str, **settings: object):
    base = {"model__family": "flux1", "model__base": "black-forest-labs/FLUX.1-dev", "precision__training": training}
    return config_with(**{**base, **settings})


def test_loading_full_size_flux1_dev_in_bf16_by_hand():
    """A bf16 run builds every part in bf16 (2 B/param) beside the fp16 pages of the part loading (2 B/param):
    transformer 2 × 11,901,408,320 + 2 × 11,901,408,320 = 47,605,633,280 at its load (the peak; at T5's, the last:
    2 × 16,870,599,139 loaded + 2 × 4,762,310,656 pages = 43,265,819,590), plus the 1.5 GiB baseline.
    main built everything in fp32 first: at T5, 4 × 16,870,599,139 + 2 × 4,762,310,656 = 77,007,017,868 (above the
    transformer's 6 × 11,901,408,320 = 71,408,449,920)."""
    spec = specs.spec_of("flux1")
    assert (spec.denoiser, spec.text_encoders, spec.vae) == (FLUX_DEV["denoiser"], (FLUX_DEV["clip_l"], FLUX_DEV["t5"]),
                                                              FLUX_DEV["vae"])
    baseline = int(1.5 * 2**30)
    assert estimate.peak_system_ram_loading(_flux("bf16")) == 47_605_633_280 + baseline == 49_216_246_016
    assert estimate.peak_system_ram_loading(_flux("fp32")) == 77_007_017_868 + baseline
    ram = system_ram.estimate_ram(_flux("bf16"), spec, GPU, images=0, window=True, machine_total=0)
    assert ram.loading == 49_216_246_016
    assert "bf16" in next(p for p in ram.parts if p.key == "loading").tooltip


def test_split_files_without_readable_headers_count_every_part_beside_its_fp16_pages():
    """Split files read whole: every part's pages (2 B/param) stay mapped beside its bf16 copy until the load ends:
    4 × (11,901,408,320 + 83,819,683 + 123,060,480 + 4,762,310,656) = 4 × 16,870,599,139 = 67,482,396,556."""
    c = _flux("bf16", model__base="/nowhere/flux1-dev.safetensors",
              model__text_encoders=["/nowhere/clip_l.safetensors", "/nowhere/t5xxl_fp16.safetensors"],
              model__vae="/nowhere/ae.safetensors")
    assert estimate.peak_system_ram_loading(c) == 67_482_396_556 + int(1.5 * 2**30)


def test_split_files_are_counted_from_their_headers(tmp_path):
    """A bf16 transformer file (1,000 bf16 elements: 2,000 B) and an fp16 text encoder (500 fp16 elements: 1,000 B,
    and 3 int64 ids: 24 B). A bf16 run copies only the fp16 tensor (2 × 500 = 1,000 B) beside the 1,000 B it was
    cast from; the uncopied tensors' pages (2,000 + 24 B) are read by the move: 1,000 + max(1,000, 2,024) = 3,024 B.
    An fp32 run copies both floating tensors (4 × 1,500 = 6,000 B) beside their 3,000 B of pages: 9,000 B."""
    import torch
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(10, 100, dtype=torch.bfloat16)}, str(tmp_path / "transformer.safetensors"))
    save_file({"w": torch.zeros(50, 10, dtype=torch.float16), "ids": torch.arange(3)}, str(tmp_path / "te.safetensors"))
    files = [tmp_path / "transformer.safetensors", tmp_path / "te.safetensors"]
    assert load_files.read_whole_bytes(files, "bf16") == 3_024
    assert load_files.read_whole_bytes(files, "fp32") == 9_000
    assert load_files.read_whole_bytes([*files, tmp_path / "missing.safetensors"], "bf16") is None
    c = config_with(model__family="flux1", model__base=str(files[0]), model__text_encoders=[str(files[1])],
                    precision__training="bf16")
    assert load_files.files_read_whole(c) == files
    assert estimate.peak_system_ram_loading(c) == 3_024 + int(1.5 * 2**30)


@pytest.mark.parametrize(("family", "training", "on_cpu", "widths"), [
    ("sd15", "fp32", False, (4, 4, 4)),
    ("sd15", "bf16", False, (2, 2, 2)),
    ("sd15", "fp16", False, (2, 2, 2)),  # SD 1.5's VAE runs in fp16 whatever its config says
    ("sdxl", "fp16", False, (2, 4, 2)),  # SDXL's may overflow: built in fp32, its config decides after the load
    ("sd15", "fp16", True, (2, 4, 2)),  # on a CPU no VAE runs in fp16
    ("sdxl", "bf16", False, (2, 2, 2)),
])
def test_the_parts_are_counted_in_the_dtype_the_run_builds_them_in(family, training, on_cpu, widths):
    c = config_with(model__family=family, precision__training=training)
    assert estimate.load_widths(c, specs.spec_of(family), on_cpu) == widths


def test_a_diffusers_folder_is_counted_from_its_headers_part_by_part(tmp_path):
    """unet/ 1,000 fp16 elements (2,000 B), vae/ 100 fp32 (400 B), text_encoder/ 500 bf16 (1,000 B), for a bf16 run.
    While the UNet loads: its copy 2,000 B beside its 2,000 B of pages = 4,000; the VAE: 2,000 + its copy 200 + its
    400 B of pages = 2,600; the text encoder is not copied. After the load: the copies 2,200 + the text encoder's
    pages 1,000 = 3,200. Peak 4,000 B. An fp16 run copies only the VAE (200 B) beside 400 B while it loads, and keeps
    2,000 + 1,000 B of pages: max(600, 200 + 3,000) = 3,200 B."""
    import torch
    from safetensors.torch import save_file

    for part, dtype, n in (("unet", torch.float16, 1000), ("vae", torch.float32, 100), ("text_encoder", torch.bfloat16, 500)):
        (tmp_path / part).mkdir()
        save_file({"w": torch.zeros(n, dtype=dtype)}, str(tmp_path / part / "weights.safetensors"))
    (tmp_path / "tokenizer").mkdir()  # no weights: not a part
    c = config_with(model__family="sd15", model__base=str(tmp_path), precision__training="bf16")
    parts = load_files.folder_parts(c)
    assert [p[0].parent.name for p in parts] == ["unet", "vae", "text_encoder"]
    assert load_files.folder_bytes(parts, "bf16") == 4_000
    assert load_files.folder_bytes(parts, "fp16") == 3_200
    assert estimate.peak_system_ram_loading(c) == 4_000 + int(1.5 * 2**30)
    (tmp_path / "vae" / "weights.safetensors").unlink()
    (tmp_path / "vae" / "diffusion_pytorch_model.bin").write_bytes(b"")  # a .bin part: the spec's formula instead
    assert load_files.folder_parts(c) == []
