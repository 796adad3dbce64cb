"""core/precision/numerics.py without torch: the words of a skip, the advice of a NaN stop, the save report's numbers."""

from __future__ import annotations

import math

from guitrainer.core.events import StepMetrics
from guitrainer.core.precision.numerics import (
    NonFinite,
    SaveReport,
    TensorFinding,
    alarm,
    block_title,
    format_limit,
    format_value,
    nan_advice,
    skip_message,
)

TO_V = "unet.up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v"


def test_value_formats():
    assert format_value(71000.0) == "7.1e4"
    assert format_value(3.2e-8) == "3.2e-8"
    assert format_value(0.5) == "0.5" and format_value(4.0) == "4" and format_value(7900.4) == "7,900"
    assert format_value(math.inf) == "inf" and format_value(math.nan) == "nan"
    assert format_limit("fp16") == "65,504"
    assert format_limit("bf16") == "3.4e38"


def test_skip_message_names_module_and_overflow():
    found = NonFinite(TO_V, "inf", "activation", "fp16", value=71000.0)
    assert skip_message(812, found) == f"step 812 skipped: inf first seen in {TO_V} (fp16 activation 7.1e4 > 65,504)"


def test_skip_message_for_a_gradient_and_for_a_value_born_between_modules():
    grad = NonFinite("unet.conv_act", "inf", "gradient", "fp16", scale=65536.0)
    assert skip_message(3, grad, scale_after=32768.0) == (
        "step 3 skipped: inf first seen in unet.conv_act (gradient of its output, loss scale 65,536); "
        "loss scale lowered to 32,768"
    )
    between = NonFinite("unet.x.attn1.to_out.0", "nan", "activation", "fp16", inside="unet.x.attn1")
    text = skip_message(9, between)
    assert "nan first seen in unet.x.attn1 (in its own code, before unet.x.attn1.to_out.0)" in text
    assert "replayed" in skip_message(4, None)


def test_nan_advice_names_the_module_and_precision_choices():
    found = NonFinite(TO_V, "inf", "activation", "fp16", value=7e4)
    fp16 = nan_advice(found, "fp16")
    assert any("bf16" in a and TO_V in a for a in fp16)
    assert any("learning rate" in a and TO_V in a for a in fp16)
    assert any("fp8 checkpoint" in a for a in fp16)
    stored_fp8 = nan_advice(found, "fp16", "fp8")
    assert any("Base model weights: Same as training" in a and TO_V in a for a in stored_fp8)
    assert not any("VAE" in a for a in fp16)
    vae = nan_advice(NonFinite("vae.encoder.mid_block.attentions.0", "inf", "activation", "fp16"), "fp16")
    assert "VAE" in vae[0] and "fp32" in vae[0]
    fp32 = nan_advice(found, "fp32")
    assert not any("switch to bf16" in a for a in fp32) and not any("train in fp32" in a for a in fp32)


def test_save_report_choice_and_headline():
    over = TensorFinding("lora_unet_a.lora_up.weight", 64, peak=1.2e5, over_max=3, nonzero=64)
    small = TensorFinding("lora_unet_b.lora_down.weight", 128, peak=0.5, to_zero=2, subnormal=5, nonzero=100)
    fine = TensorFinding("lora_unet_c.alpha", 1, peak=4.0, nonzero=1)
    switched = SaveReport("x.safetensors", "fp16", "bf16", (over, small, fine))
    assert switched.choice == "switched to bf16"
    assert [t.name for t in switched.harmed] == [over.name, small.name]
    assert switched.headline() == (
        "3 values in 1 of 3 tensors exceed 65,504 (largest 1.2e5): switched to bf16. "
        "Of 193 values, 2 become zero and 5 become subnormal."
    )
    kept = SaveReport("x.safetensors", "fp16", "fp16", (fine,))
    assert kept.choice == "kept fp16"
    assert kept.headline() == "Every value fits in fp16 (largest 4 of 65,504): kept fp16."
    assert SaveReport("x", "fp16", "fp16", (over,)).choice == "kept fp16 despite the overflow"
    assert "nothing to check" in SaveReport("x", "bf16", "bf16", checked=False).headline()


def test_alarm_thresholds():
    assert not alarm(None, None)
    assert not alarm(4.0, 0.05)
    assert alarm(3.9, None)
    assert alarm(100.0, 0.051)
    assert block_title("unet.up.1.attn") == "unet up 1 attention"


def test_step_metrics_numerics_fields_are_optional():
    m = StepMetrics(step=1, total_steps=2, epoch=1, loss=0.1, lr=1e-4)
    assert m.headroom == () and m.grad_underflow is None and m.nonfinite_module is None and m.numerics_message == ""


def test_console_reporter_speaks_only_when_numerics_draw_the_eye():
    import io

    from guitrainer.core.events import SavedFile
    from guitrainer.engine.reporting import ConsoleReporter

    out = io.StringIO()
    rep = ConsoleReporter(quiet=True, stream=out)
    base = {"total_steps": 100, "epoch": 1, "loss": 0.1, "lr": 1e-4}
    rep.on_step(StepMetrics(step=1, headroom=(("unet.mid.attn", 900.0),), grad_underflow=0.001, **base))
    assert out.getvalue() == ""
    rep.on_step(StepMetrics(step=50, headroom=(("unet.mid.attn", 3.2), ("unet.io", 50.0)), grad_underflow=0.001, **base))
    assert out.getvalue() == (
        "warning: numerics at step 50: lowest headroom 3.2x (unet mid attention) LoRA gradient underflow 0.1%\n"
    )
    switched = SaveReport("a.safetensors", "fp16", "bf16", (TensorFinding("w", 4, 1e5, over_max=1, nonzero=4),))
    rep.on_saved(SavedFile("a.safetensors", "lora", save_report=switched))
    assert out.getvalue().endswith(f"save precision: {switched.headline()}\n")
