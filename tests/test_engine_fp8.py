"""precision.base_weights = "fp8": frozen weights stored in float8 e4m3, cast up layer by layer (demo, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from guitrainer.config import TrainingConfig
from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
from guitrainer.core.events import NullReporter
from guitrainer.engine.feedback import Feedback
from guitrainer.engine.session import build_session
from guitrainer.engine.trainer import Trainer
from guitrainer.engine.verify import verify_lora

FP8 = getattr(torch, "float8_e4m3fn", None)
pytestmark = [
    pytest.mark.skipif(FP8 is None, reason="this PyTorch has no float8 types"),
    pytest.mark.slow,  # every test here trains or builds the demo model
]


def demo_cfg(out: Path, base_weights: str, **settings: object) -> TrainingConfig:
    cfg = PresetStore().get(DEFAULT_PRESET).config()
    cfg.output.folder = str(out)
    cfg.precision.training = "bf16"
    cfg.precision.save = "fp32"
    cfg.precision.base_weights = base_weights
    for key, value in settings.items():
        cfg.set(key.replace("__", "."), value)
    return cfg


def frozen_bytes(modules: list[torch.nn.Module]) -> int:
    return sum(p.numel() * p.element_size() for m in modules for n, p in m.named_parameters() if "lora_" not in n)


def test_fp8_storage_halves_the_frozen_weights_and_keeps_the_lora_fp32(tmp_path):
    plain = build_session(demo_cfg(tmp_path / "a", "auto"), Feedback())
    fp8 = build_session(demo_cfg(tmp_path / "b", "fp8"), Feedback())
    unet = fp8.model.denoiser
    linear = [m.base_layer if hasattr(m, "base_layer") else m for m in unet.modules() if isinstance(m, torch.nn.Linear)]
    assert any(m.weight.dtype == FP8 for m in linear)  # stored in fp8
    assert all(p.dtype == torch.float32 and p.requires_grad for p in fp8.params)  # the LoRA: fp32 master weights
    norms = [m for m in unet.modules() if isinstance(m, torch.nn.GroupNorm | torch.nn.LayerNorm)]
    assert norms and all(m.weight.dtype == torch.bfloat16 for m in norms)  # precision-sensitive layers kept
    # the weights part: 1 byte per cast weight instead of bf16's 2; norms, biases, embeddings stay 2 bytes
    before = frozen_bytes([plain.model.denoiser, *plain.model.text_encoders])
    after = frozen_bytes([fp8.model.denoiser, *fp8.model.text_encoders])
    print(f"frozen weights: bf16 {before} B, fp8 {after} B, ratio {after / before:.3f}")
    assert 0.5 <= after / before < 0.62


def test_fp8_base_trains_within_10_percent_of_bf16_and_exports_a_file_that_verifies(tmp_path):
    torch.set_num_threads(1)
    runs = {}
    for base in ("auto", "fp8"):
        rep = NullReporter()
        cfg = demo_cfg(tmp_path / base, base, schedule__max_steps=30)
        summary = Trainer(cfg, rep).run()
        assert summary.status == "finished", summary.message
        runs[base] = (cfg, summary, rep)
    ref, fp8 = runs["auto"][2].steps, runs["fp8"][2].steps
    assert len(ref) == len(fp8) == 30
    for a, b in zip(ref, fp8):
        assert abs(a.loss - b.loss) / a.loss < 0.10, (a.step, a.loss, b.loss)
    cfg, summary, _rep = runs["fp8"]
    v = verify_lora(summary.lora_path, cfg)  # diffusers reads the file the fp8 run wrote
    assert v.ok and v.keys_unused == () and v.lora_effect > 0, v.message


def test_the_tracker_measures_half_the_weights_and_a_lower_peak_with_checkpointing():
    """Fake-tensor measurement (no GPU) of SD 1.5 at 512 px, fp16, gradient checkpointing on: the stored frozen
    weights are about half (Linear / Conv weights 1 byte instead of 2; norms, biases of skipped layers and
    embeddings stay 2), and the peak drops by about that much. Without checkpointing the up-cast copies of the
    weights are kept for the backward, so fp8 storage pays off with checkpointing on."""
    from guitrainer.core.memory import estimate
    from guitrainer.engine.memory.measure import measure_training_step

    measured = {}
    for base in ("auto", "fp8"):
        c = TrainingConfig()
        c.model.family, c.precision.training, c.precision.base_weights = "sd15", "fp16", base
        c.precision.gradient_checkpointing = True
        measured[base] = measure_training_step(c, method="fake")
        breakdown = estimate.estimate(c)
        assert breakdown.allocated == pytest.approx(measured[base].peak, rel=0.10), base  # the estimator agrees
        assert (breakdown.get("unet") + breakdown.get("text_encoders")) == pytest.approx(
            measured[base].frozen_weights, rel=0.10)
    auto, fp8 = measured["auto"], measured["fp8"]
    ratio = fp8.frozen_weights / auto.frozen_weights
    print(f"frozen {auto.frozen_weights / 2**20:.0f} -> {fp8.frozen_weights / 2**20:.0f} MiB ({ratio:.3f}); "
          f"peak {auto.peak / 2**20:.0f} -> {fp8.peak / 2**20:.0f} MiB")  # fmt: skip
    assert 0.5 <= ratio < 0.56
    saved = auto.frozen_weights - fp8.frozen_weights
    assert auto.peak - fp8.peak == pytest.approx(saved, rel=0.25)


def test_an_fp8_run_makes_sample_images(tmp_path):
    # the pipeline runs the fp8-stored UNet (cast up to bf16) with the fp32 LoRA, as the training step does
    rep = NullReporter()
    cfg = demo_cfg(tmp_path, "fp8", schedule__max_steps=1, sampling__every_n_steps=1, sampling__at_start=False,
                   sampling__prompts=["a red zorb"])
    summary = Trainer(cfg, rep).run()
    assert summary.status == "finished" and not summary.warnings, summary.warnings
    assert len(rep.samples) == 1 and Path(rep.samples[0].path).is_file()


@pytest.mark.parametrize("training", ["fp16", "fp32"])
def test_fp8_storage_trains_under_every_training_precision(tmp_path, training):
    """The backward through a frozen fp8 layer needs the cast copy the forward used: diffusers' in-place
    layerwise casting left autograd a float8 weight and fp16 training failed at step 1 ("expected scalar type
    Half but found Float8_e4m3fn"). Losses match the same run with weights kept in the training precision."""
    torch.set_num_threads(1)
    losses = {}
    for base in ("auto", "fp8"):
        rep = NullReporter()
        cfg = demo_cfg(tmp_path / base, base, precision__training=training, schedule__max_steps=3)
        summary = Trainer(cfg, rep).run()
        assert summary.status == "finished", summary.message
        losses[base] = [m.loss for m in rep.steps]
    assert len(losses["fp8"]) == 3
    for a, b in zip(losses["auto"], losses["fp8"]):
        assert abs(a - b) / a < 0.10, losses
