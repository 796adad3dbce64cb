"""VRAM estimator: parameter tables, monotonicity, agreement with measured steps, and the step tracker."""

from __future__ import annotations

import csv
import itertools
import sys
from pathlib import Path

import pytest
from helpers import config_with

from guitrainer.base import units
from guitrainer.core.memory import estimate, hints, network, specs
from guitrainer.core.model import lora_format

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


cfg = config_with  # the default config with section__field=value overrides


def test_reference_counts() -> None:
    sd15, sdxl = specs.spec_of("sd15"), specs.spec_of("sdxl")
    assert sd15.denoiser == 859_520_964
    assert sdxl.denoiser == 2_567_463_684
    assert sd15.vae == sdxl.vae == 83_653_863
    assert sd15.text_encoders == (123_060_480,)
    assert sdxl.text_encoders == (123_060_480, 694_659_840)
    assert sd15.lora_params_per_rank("attention") == 199_296


@pytest.mark.slow
@pytest.mark.parametrize("family", ["demo", "sd15", "sdxl"])
def test_tables_equal_recomputed(family: str) -> None:
    from guitrainer.engine.memory.model_spec import compute_model_spec

    assert compute_model_spec(family) == specs.spec_of(family)


@pytest.mark.slow
def test_lora_counts_match_peft_on_meta() -> None:
    """The table's rank*(in+out) equals what peft really injects (SD 1.5, attention, rank 4)."""
    from guitrainer.config import TrainingConfig as TC
    from guitrainer.engine.memory import measure as memory

    c = TC()
    c.set("model.family", "sd15")
    c.set("network.rank", 4)
    modules, _ = memory._build(c)
    n = sum(p.numel() for name, p in modules[0].named_parameters() if "lora_" in name)
    assert n == 4 * 199_296


GRID = {
    "schedule.batch_size": (1, 2, 4),
    "dataset.resolution": (512, 768, 1024),
    "network.rank": (4, 16, 64, 128),
}
SWITCHES = ("precision.gradient_checkpointing", "precision.cache_latents", "precision.cache_text_encoder_outputs")


@pytest.mark.parametrize("family", ["demo", "sd15", "sdxl"])
def test_estimate_monotone(family: str) -> None:
    bases = []
    for prec, opt, target, gc, latents in itertools.product(
        ("fp16", "bf16", "fp32"), ("AdamW", "AdamW8bit", "Adafactor"), lora_format.UNET_LORA_TARGETS, (False, True), (False, True)
    ):
        bases.append(cfg(model__family=family, precision__training=prec, optimizer__name=opt,
                         network__target_modules=target, precision__gradient_checkpointing=gc,
                         precision__cache_latents=latents))
    for base in bases:
        for path, values in GRID.items():
            totals = []
            for v in values:
                c = base.copy()
                c.set(path, v)
                totals.append(estimate.estimate(c).total)
            assert totals == sorted(totals), (path, totals)
        for path in SWITCHES:
            off, on = base.copy(), base.copy()
            off.set(path, False)
            on.set(path, True)
            assert estimate.estimate(on).total <= estimate.estimate(off).total, path
        if base.optimizer.name == "AdamW":
            c = base.copy()
            c.set("optimizer.name", "AdamW8bit")
            assert estimate.estimate(c).total <= estimate.estimate(base).total


def test_8bit_state_keeps_fp32_for_small_tensors() -> None:
    # rank 4 on a 320-wide layer: lora_A has 1280 elements (< 4096): fp32 state, 8 B/param
    assert network.optimizer_state_bytes("AdamW8bit", [(4, 320)]) == 2 * 4 * 1280
    # a big tensor: 2 uint8 states + one fp32 absmax per 256 elements each
    n = 128 * 1280
    assert network.optimizer_state_bytes("AdamW8bit", [(128, 1280)]) == 2 * (n + 4 * (n // 256))
    assert network.optimizer_state_bytes("AdamW", [(128, 1280)]) == 8 * n


def test_estimate_parts_and_offloading() -> None:
    c = cfg(model__family="sdxl", precision__training="fp16", precision__cache_latents=False)
    b = estimate.estimate(c, device=type("D", (), {"total_memory": 24 * units.GiB})())
    assert b.device_total == 24 * units.GiB
    assert b.get("vae") >= 83_653_863 * 4  # SDXL's VAE stays fp32 under fp16
    c.set("precision.cache_latents", True)
    c.set("precision.cache_text_encoder_outputs", True)
    b = estimate.estimate(c)
    assert b.get("vae") == 0 and b.get("text_encoders") == 0
    assert all(p.label for p in b.parts)


def test_hints_apply_and_save() -> None:
    c = cfg(model__family="sdxl", schedule__batch_size=2, precision__training="fp32")
    hs = hints.hints(c)
    labels = [h.label for h in hs]
    assert "Gradient checkpointing" in labels and "Batch 2 → 1" in labels
    assert [h.saving for h in hs] == sorted((h.saving for h in hs), reverse=True)
    for h in hs:
        changed = c.copy()
        for k, v in h.changes.items():
            changed.set(k, v)
        assert estimate.estimate(c).total - estimate.estimate(changed).total == h.saving
        assert h.text.startswith(h.label + " −")


def _labels(hs: list[hints.Hint]) -> list[str]:
    return [h.label for h in hs]


def test_hints_respect_what_the_device_can_run() -> None:
    """No hint may lead to a setting the precision rules call an error on that device."""
    from helpers import fake_device

    from guitrainer.core.precision.advisor import advise

    c = cfg(model__family="sdxl", precision__training="fp32", optimizer__name="AdamW")
    ampere = fake_device("rtx3060")
    assert "bf16 AMP" in _labels(hints.hints(c, device=ampere)) and "AdamW8bit" in _labels(hints.hints(c, device=ampere))
    turing = fake_device("t4")
    assert "fp16 AMP" in _labels(hints.hints(c, device=turing)) and "bf16 AMP" not in _labels(hints.hints(c, device=turing))
    no_bnb = fake_device("rtx3060", bitsandbytes=False)
    assert "AdamW8bit" not in _labels(hints.hints(c, device=no_bnb))
    # fp8 frozen weights: the biggest saver for SDXL in fp16 (the UNet's 2.6 G parameters: 2 bytes -> 1), offered
    # where fp8 runs, never on Apple GPUs (MPS has no float8 types)
    fp16 = cfg(model__family="sdxl", precision__training="fp16", precision__gradient_checkpointing=True)
    fp8 = [h for h in hints.hints(fp16, device=turing) if h.label == "fp8 frozen weights"]
    # 1 byte a parameter saved, less the widened copies alive at the peak (0.15 of the UNet in fp16)
    assert fp8 and fp8[0].saving >= 0.6 * specs.spec_of("sdxl").denoiser and fp8[0].changes == {"precision.base_weights": "fp8"}
    assert "fp8 frozen weights" not in _labels(hints.hints(fp16, device=fake_device("mps")))
    # without checkpointing every widened copy is kept for the backward pass: fp8 saves nothing, so not offered
    no_ckpt = cfg(model__family="sdxl", precision__training="fp16", precision__gradient_checkpointing=False)
    assert "fp8 frozen weights" not in _labels(hints.hints(no_ckpt, device=turing))
    gtx1660 = fake_device("gtx1660")  # no tensor cores: the picker recommends fp32, so no precision hint
    assert not any(label.endswith("AMP") for label in _labels(hints.hints(c, device=gtx1660)))
    for name in ("cpu", "cpu_bf16", "gtx1080", "gtx1660", "t4", "rtx3060", "rtx4090", "mps", "mps_old"):
        device = fake_device(name)
        for h in hints.hints(c, device=device):
            changed = c.copy()
            for k, v in h.changes.items():
                changed.set(k, v)
            before = {a.message for a in advise(device, c) if a.level == "error"}
            after = {a.message for a in advise(device, changed) if a.level == "error"}
            assert after <= before, f"{name}: hint {h.label} leads to {after - before}"
    # without a probed device (only a memory size) the old offers stand
    assert {"fp16 AMP", "AdamW8bit"} <= set(_labels(hints.hints(c, device=None)))


def test_estimate_within_10_percent_of_stored_measurements() -> None:
    from vram_calibrate import config_for

    with open(ROOT / "bench" / "vram_grid.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 24
    worst = 0.0
    for r in rows:
        est = estimate.estimate(config_for(r)).allocated
        err = abs(est - int(r["measured_peak"])) / int(r["measured_peak"])
        worst = max(worst, err)
        assert err <= 0.10, (r, est)
    assert worst <= 0.10


@pytest.mark.slow
def test_fake_tracker_agrees_with_real_cpu_step() -> None:
    """The same training step on the demo model, once on fake tensors and once on real CPU tensors.

    Both runs count live storages with the same StorageTracker (raw bytes), so this checks that the fake
    simulation allocates what real execution allocates; the static part is checked against the parameter
    and optimizer-state sizes computed independently. The tracker itself is checked against torch.profiler's
    allocator events in ``tests/test_memory_measure.py::test_tracker_peak_agrees_with_profiler``.
    """
    from guitrainer.engine.memory.measure import measure_training_step

    c = cfg(model__family="demo", dataset__resolution=64, precision__training="fp32",
            precision__cache_text_encoder_outputs=True, network__target_modules="attention_ff")
    fake = measure_training_step(c, method="fake", block=1)
    real = measure_training_step(c, method="cpu", block=1)
    assert real.static == fake.static
    assert abs(fake.peak - real.peak) / real.peak < 0.01
    spec = specs.spec_of("demo")
    n_lora = c.network.rank * spec.lora_params_per_rank("attention_ff")
    assert real.lora_weights == 4 * n_lora
    n_tensors = 2 * sum(c for *_, c, _f in spec.denoiser_lora["attention_ff"])
    assert real.optimizer_state == 8 * n_lora + 4 * n_tensors  # two fp32 moments + a 0-dim fp32 step counter
    assert real.frozen_weights == 4 * spec.denoiser
    assert real.static == real.frozen_weights + real.lora_weights + real.optimizer_state
    assert real.peak > real.static


def test_peak_system_ram_loading() -> None:
    sd15 = estimate.peak_system_ram_loading(cfg(model__family="sd15"))
    sdxl = estimate.peak_system_ram_loading(cfg(model__family="sdxl"))
    assert 4 * units.GiB < sd15 < sdxl < 24 * units.GiB
    single = estimate.peak_system_ram_loading(cfg(model__family="sdxl", model__base="/m/sd_xl_base_1.0.safetensors"))
    assert single > sdxl


def test_fp8_base_weights_halve_the_frozen_weights_against_fp16() -> None:
    """fp8 stores 1 byte per frozen UNet / text-encoder parameter against fp16's 2; the VAE is not stored in fp8."""
    for family in ("sd15", "sdxl"):
        spec = specs.spec_of(family)
        fp16 = estimate.estimate(cfg(model__family=family, precision__training="fp16", precision__cache_latents=False))
        fp8 = estimate.estimate(cfg(model__family=family, precision__training="fp16", precision__cache_latents=False,
                                precision__base_weights="fp8"))
        assert fp8.get("unet") == -(-spec.denoiser // 512) * 512  # one byte per parameter, in 512-byte blocks
        assert abs(fp8.get("unet") * 2 - fp16.get("unet")) <= 512
        assert abs(fp8.get("text_encoders") * 2 - fp16.get("text_encoders")) <= 1024
        assert fp8.get("vae") == fp16.get("vae") and fp8.get("activations") == fp16.get("activations")
        assert "fp8" in fp8.part("unet").label


def test_bf16_lora_weights_halve_weights_grads_and_adamw_state() -> None:
    base = dict(model__family="sdxl", network__rank=256, network__alpha=256.0, precision__training="bf16")
    fp32 = estimate.estimate(cfg(**base))
    bf16 = estimate.estimate(cfg(**base, precision__lora_weights="bf16"))
    for key in ("lora_weights", "lora_grads", "optimizer"):  # torch AdamW keeps its states in the param dtype
        assert abs(bf16.get(key) * 2 - fp32.get(key)) <= 2 * 512 * 4000, key
    eight = estimate.estimate(cfg(**base, precision__lora_weights="bf16", optimizer__name="AdamW8bit"))
    assert eight.get("optimizer") == estimate.estimate(cfg(**base, optimizer__name="AdamW8bit")).get("optimizer")


def test_detect_family_estimates_the_model_the_files_say_not_sd15(tmp_path):
    """Model family 'Detect' with the demo model estimated a 4 GB SD 1.5 run; the files say what the model is."""
    demo = estimate.estimate(config_with(model__family="demo", model__base="demo"))
    auto = estimate.estimate(config_with(model__family="auto", model__base="demo"))
    assert auto.total == demo.total and not any("not known yet" in n for n in auto.notes)
    import json

    folder = tmp_path / "my_model"  # a diffusers folder whose name says nothing about the family
    for part in ("unet", "vae", "text_encoder", "text_encoder_2", "tokenizer", "scheduler"):
        (folder / part).mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline"}))
    (folder / "unet" / "config.json").write_text(json.dumps(
        {"_class_name": "UNet2DConditionModel", "cross_attention_dim": 2048, "addition_embed_type": "text_time"}))
    sdxl = estimate.estimate(config_with(model__family="sdxl", model__base=str(folder)))
    detected = estimate.estimate(config_with(model__family="auto", model__base=str(folder)))
    assert specs.detected_family(str(folder)) == "sdxl" and detected.total == sdxl.total
    unknown = estimate.estimate(config_with(model__family="auto", model__base=str(tmp_path / "nothing_here")))
    assert any("not known yet" in n for n in unknown.notes)


def test_the_cuda_context_and_allocator_slack_are_parts_on_a_cuda_gpu_only() -> None:
    """Issue 27 #8: on a CPU the demo's bar was 73 % "Allocator slack" and showed a 500 MB "CUDA context" until the
    probe answered. Both exist on a CUDA (or ROCm) device only; an unknown device leaves them out."""
    from helpers import fake_device

    c = cfg(model__family="demo")
    gpu_only = {"cuda_context", "slack"}
    keys = lambda device: {p.key for p in estimate.estimate(c, device=device).parts}  # noqa: E731
    assert gpu_only <= keys(fake_device("rtx3060"))
    assert gpu_only <= keys(type("D", (), {"total_memory": 8 * units.GiB})())  # a GPU known by its size
    assert not gpu_only & keys(fake_device("cpu"))
    assert not gpu_only & keys(None)
    on_cpu, on_gpu = estimate.estimate(c, device=fake_device("cpu")), estimate.estimate(c, device=fake_device("rtx3060"))
    assert on_cpu.allocated == on_gpu.allocated  # what the step allocates is the same; only the runtime's parts differ
    assert on_gpu.total - on_cpu.total == on_gpu.get("cuda_context") + on_gpu.get("slack")
    assert estimate.device_kind(None) == "" and estimate.device_kind(fake_device("cpu")) == "cpu"
