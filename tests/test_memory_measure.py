"""The VRAM measurement's own ground truth: real bitsandbytes state, an independent peak, the engine's LoRA.

* 8-bit optimizer state: a real bitsandbytes AdamW8bit / Lion8bit step on real LoRA-shaped CPU tensors
  (bitsandbytes >= 0.50 runs them on CPU), compared with the estimator's formula and with what the
  fake-tensor measurement reports.
* The StorageTracker's peak on a real CPU step, compared with ``torch.profiler``'s allocator events.
* The measured LoRA parameter set, compared with the engine-built model's ``lora_parameters``.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from helpers import config_with

from guitrainer.config import TrainingConfig
from guitrainer.core.memory import network, specs
from guitrainer.core.model import lora_format

pytestmark = pytest.mark.slow  # every test here builds a model and runs training steps

torch.set_num_threads(1)

needs_bnb = pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes not installed")


cfg = config_with  # the default config with section__field=value overrides


def _engine_lora_shapes(family: str, config: TrainingConfig) -> list[tuple[int, ...]]:
    """Shapes of the LoRA tensors the engine injects into ``family``'s UNet (built on meta: no memory)."""
    from guitrainer.engine.memory import measure as memory
    from guitrainer.engine.memory import model_spec

    unet = model_spec.build_on_meta(family, "unet")
    memory.inject_engine_lora(unet, [], config.network)
    return [tuple(p.shape) for p in memory.lora_parameters([unet])]


def _real_bnb_step(
    name: str, shapes: list[tuple[int, ...]], block: int = 512
) -> tuple[list[int], int, list[torch.dtype]]:
    """One real bitsandbytes step over one real tensor per shape (the whole set, no shortcut).

    Returns per-tensor state bytes (storages held by that tensor alone, each rounded up to ``block``), the
    bytes of storages shared by several tensors' states, and each tensor's state1 dtype.
    """
    from guitrainer.engine.optim import build_optimizer

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes]
    optimizer, used = build_optimizer(cfg(optimizer__name=name).optimizer, [{"params": params}])
    assert used == name, "bitsandbytes fell back to AdamW"
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    optimizer.step()
    owners: dict[int, list[int]] = {}
    size: dict[int, int] = {}
    for i, p in enumerate(params):
        for t in optimizer.state[p].values():
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                owners.setdefault(st.data_ptr(), []).append(i)
                size[st.data_ptr()] = math.ceil(st.nbytes() / block) * block
    per_tensor = [0] * len(params)
    shared = 0
    for ptr, who in owners.items():
        if len(set(who)) > 1:
            shared += size[ptr]
        else:
            per_tensor[who[0]] += size[ptr]
    return per_tensor, shared, [optimizer.state[p]["state1"].dtype for p in params]


def _engine_model(targets: str, rank: int) -> list[torch.nn.Module]:
    """The demo model as the engine loads it, with the engine's LoRA on the UNet and the text encoder."""
    from guitrainer.engine.models.demo import ensure_demo_model
    from guitrainer.engine.models.loading import load_folder
    from guitrainer.engine.network import lora

    model = load_folder(ensure_demo_model(), "demo")
    lora.inject_unet_lora(model.denoiser, rank, float(rank), 0.0, targets)
    for te in model.text_encoders:
        lora.inject_text_encoder_lora(te, rank, float(rank))
    return [model.denoiser, *model.text_encoders]


CASES = [("demo", 64, "attention_ff"), ("sd15", 4, "attention")]


@needs_bnb
@pytest.mark.parametrize("name", ["AdamW8bit", "Lion8bit"])
@pytest.mark.parametrize(("family", "rank", "targets"), CASES)
def test_estimator_8bit_state_equals_real_bitsandbytes_state(family: str, rank: int, targets: str, name: str) -> None:
    """The estimator's optimizer_state_bytes against a real bitsandbytes step on the engine's LoRA shapes."""
    from guitrainer.engine.memory.measure import bnb_state_bytes

    c = cfg(model__family=family, network__rank=rank, network__target_modules=targets, optimizer__name=name)
    shapes = _engine_lora_shapes(family, c)
    sizes = [math.prod(s) for s in shapes]
    # both kinds of tensor are present: under min_8bit_size (fp32 state) and at / over it (8-bit state)
    assert min(sizes) < network.BNB_MIN_8BIT_SIZE <= max(sizes)
    per_tensor, shared, dtypes = _real_bnb_step(name, shapes)
    for shape, n, measured, dtype in zip(shapes, sizes, per_tensor, dtypes, strict=True):
        assert dtype == (torch.float32 if n < network.BNB_MIN_8BIT_SIZE else torch.uint8), shape
        assert network.optimizer_state_bytes(name, [shape]) == measured, shape
    real_total = sum(per_tensor) + shared
    estimate = network.optimizer_state_bytes(name, shapes)
    # the estimator leaves out only the shared 256-entry fp32 quantisation map(s): 1 KiB per state
    states = 1 if name == "Lion8bit" else 2
    assert real_total - estimate == shared == states * 1024
    # the per-shape shortcut the fake-tensor measurement uses gives the same bytes as the whole set
    assert bnb_state_bytes(c.optimizer, shapes) == real_total
    print(f"{family} rank {rank} {targets} {name}: real {real_total} B, estimate {estimate} B")


@needs_bnb
def test_fake_measurement_trains_the_engines_lora_with_real_8bit_state() -> None:
    """A fake-tensor measurement: its LoRA is the engine-built model's, its 8-bit state a real bitsandbytes one."""
    from guitrainer.engine.memory.measure import measure_training_step
    from guitrainer.engine.network import lora

    c = cfg(model__family="demo", dataset__resolution=64, network__rank=64, network__target_modules="attention_ff_proj",
            network__train_text_encoder=True, optimizer__name="AdamW8bit", precision__training="fp32")
    m = measure_training_step(c, method="fake", block=1)
    engine = [p for module in _engine_model("attention_ff_proj", 64) for p in lora.lora_parameters(module)]
    n = sum(p.numel() for p in engine)
    assert m.lora_parameter_count == n
    assert m.lora_weights == 4 * n  # fp32 master weights
    per_tensor, shared, _ = _real_bnb_step("AdamW8bit", [tuple(p.shape) for p in engine], block=1)
    assert not m.analytic_optimizer_state
    assert m.optimizer_state == sum(per_tensor) + shared
    assert any("measured from a real bitsandbytes step" in note for note in m.notes)
    position_ids = 77 * 8  # the text encoder's int64 buffer: live, but not a parameter
    assert m.static == m.frozen_weights + m.lora_weights + m.optimizer_state + position_ids


def test_tracker_peak_agrees_with_profiler() -> None:
    """StorageTracker (dispatch-level storage accounting) against torch.profiler's allocator events.

    Same config, separate runs: the profiler run has no dispatch mode active. Both give the peak above the
    level before the step (activations, gradients, temporaries) of a real CPU step on the demo model.
    """
    from guitrainer.engine.memory.measure import measure_training_step, profile_cpu_step

    c = cfg(model__family="demo", dataset__resolution=64, precision__training="fp32",
            precision__cache_text_encoder_outputs=True, network__target_modules="attention_ff")
    tracked = measure_training_step(c, method="cpu", block=1).activations
    profiled = profile_cpu_step(c)
    print(f"tracker {tracked} B, profiler {profiled} B, {(tracked - profiled) / profiled:+.2%}")
    assert profiled > 1_000_000  # a real step's worth of activations, not an empty event list
    assert abs(tracked - profiled) / profiled < 0.03


def test_lora_targets_are_the_engines() -> None:
    """One table (core.lora_format) for the estimator and the engine, and the engine injects exactly its layers."""
    from guitrainer.core.model import lora_format
    from guitrainer.engine.network import lora

    assert lora_format.UNET_LORA_TARGETS is lora_format.UNET_LORA_TARGETS
    assert lora_format.TEXT_ENCODER_LORA_TARGETS is lora_format.TEXT_ENCODER_LORA_TARGETS
    for targets, suffixes in lora_format.UNET_LORA_TARGETS.items():
        unet, *tes = _engine_model(targets, 4)
        names = list(lora.lora_layers(unet))
        assert names and all(n.endswith(suffixes) for n in names), targets
        assert {s for s in suffixes if any(n.endswith(s) for n in names)} == set(suffixes), targets
        te_names = [n for te in tes for n in lora.lora_layers(te)]
        te_suffixes = lora_format.TEXT_ENCODER_LORA_TARGETS[targets]
        assert te_names and all(n.endswith(te_suffixes) for n in te_names), targets


def test_measurement_lora_equals_engine_built_model() -> None:
    """For every target set, the measurement's LoRA tensors are the engine-built model's, in the same order."""
    from guitrainer.engine.memory import measure as memory
    from guitrainer.engine.network import lora

    spec = specs.spec_of("demo")
    for targets in lora_format.UNET_LORA_TARGETS:
        c = cfg(model__family="demo", network__rank=8, network__target_modules=targets, network__train_text_encoder=True)
        engine = [p for module in _engine_model(targets, 8) for p in lora.lora_parameters(module)]
        modules, _ = memory._build(c)
        built = memory.lora_parameters(modules)
        assert [tuple(p.shape) for p in built] == [tuple(p.shape) for p in engine], targets
        assert all(p.dtype == torch.float32 and p.requires_grad for p in built)
        assert sum(p.numel() for p in engine) == 8 * spec.lora_params_per_rank(targets, text_encoder=True), targets


def test_estimator_lora_counts_equal_engine_injection_sd15() -> None:
    """Full-size SD 1.5 UNet and text encoder on meta, LoRA by the engine: the estimator's tables count the same."""
    from guitrainer.engine.memory import measure as memory

    c = cfg(model__family="sd15", network__rank=4, network__target_modules="attention_ff_proj",
            network__train_text_encoder=True)
    modules, _ = memory._build(c)
    n = sum(p.numel() for p in memory.lora_parameters(modules))
    assert n == 4 * specs.spec_of("sd15").lora_params_per_rank("attention_ff_proj", text_encoder=True)


@pytest.mark.parametrize("family", ["demo", "sd15"])
def test_adafactor_measures_on_fake_tensors(family) -> None:
    """"Check precisely" with Adafactor (it reads scalars with .item(), which fake tensors cannot answer).

    The optimizer state is Adafactor's factored second moment: per LoRA matrix [rows, cols] one fp32 row
    vector and one fp32 column vector, plus a 0-dim fp32 step count, each rounded up to 512-byte blocks.
    """
    from guitrainer.engine.memory import measure as memory

    c = cfg(model__family=family, network__rank=4, optimizer__name="Adafactor", precision__training="fp16",
            precision__cache_latents=True, precision__cache_text_encoder_outputs=True)
    result = memory.measure_training_step(c, method="fake")
    shapes = _engine_lora_shapes(family, c)

    def block(nbytes: int) -> int:
        return -(-nbytes // 512) * 512

    expected = sum(block(4 * rows) + block(4 * cols) + block(4) for rows, cols in shapes)
    assert result.optimizer_state == expected
    assert result.peak > result.static > result.optimizer_state
