"""The numerics monitor on the demo model's UNet and text encoder (CPU, fp16 autocast, a real GradScaler):
headroom per block, gradient underflow, the first non-finite module of an injected overflow, hooks only
while a step is watched or diagnosed, and the fp16 save findings counted by hand."""

from __future__ import annotations

import math

import pytest
import torch

from guitrainer.config import ModelConfig
from guitrainer.core.precision.numerics import FP16_MAX, SaveReport, block_of, is_sampled, skip_message
from guitrainer.engine.export import check_fp16
from guitrainer.engine.models.loading import load_base_model
from guitrainer.engine.network import lora as L
from guitrainer.engine.numerics import NumericsMonitor, RngState, StepWatch, fp16_findings

TO_V = "up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v"


class Harness:
    """The demo UNet + text encoder as the trainer sets them up under fp16 (frozen fp16, fp32 LoRA, scaler)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        m = load_base_model(ModelConfig(base="demo"))
        self.denoiser, self.te, self.tok = m.denoiser, m.text_encoders[0], m.tokenizer
        torch.nn.Module.to(self.denoiser, dtype=torch.float16)
        self.te.to(dtype=torch.float16)
        L.inject_unet_lora(self.denoiser, 4, 4.0)
        L.inject_text_encoder_lora(self.te, 4, 4.0)
        self.params = {
            f"{k}.{n}": p
            for k, mod in (("unet", self.denoiser), ("te", self.te))
            for n, p in mod.named_parameters()
            if p.requires_grad
        }
        for p in self.params.values():
            p.data = p.data.float()
        self.optimizer = torch.optim.AdamW(list(self.params.values()), lr=1e-3)
        self.scaler = torch.amp.GradScaler("cpu")
        self.ids = self.tok(["a red circle", "a blue square"], padding="max_length", max_length=77, return_tensors="pt").input_ids

    def monitor(self, every: int = 50) -> NumericsMonitor:
        return NumericsMonitor({"unet": self.denoiser, "te": self.te}, self.params, "fp16", every=every)

    def forward_backward(self, scale: float | None = None) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.float16):
            hidden = self.te(self.ids)[0]
            latents = torch.randn(2, 4, 8, 8)
            t = torch.randint(0, 1000, (2,))
            pred = self.denoiser(latents, t, hidden).sample
            loss = torch.nn.functional.mse_loss(pred.float(), torch.randn_like(pred.float()))
        (loss * scale if scale is not None else self.scaler.scale(loss)).backward()
        return loss.detach()

    def step(self, monitor: NumericsMonitor, step: int):
        """One training step as the trainer runs it (:class:`StepWatch`): watched when sampled, diagnosed when skipped."""
        watch = StepWatch(monitor)
        with watch.begin(step):
            loss = self.forward_backward()
        watch.gradients()
        before = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        skipped = self.scaler.get_scale() < before
        self.optimizer.zero_grad(set_to_none=True)
        result = watch.end(
            skipped=skipped,
            replay=lambda: self.forward_backward(before),
            scale=before,
            scale_after=self.scaler.get_scale(),
        )
        self.optimizer.zero_grad(set_to_none=True)
        snap = monitor.last if watch.sampled else None
        return float(loss), skipped, result, snap


@pytest.fixture
def harness() -> Harness:
    torch.set_num_threads(1)
    return Harness()


def expected_blocks(h: Harness) -> set[str]:
    """Every block the demo model has, from its own module names (not from the monitor)."""
    blocks = {block_of("unet", n) for n, _ in h.denoiser.named_modules() if n}
    blocks |= {block_of("te", n) for n, _ in h.te.named_modules() if n}
    return blocks


def test_block_names_by_hand():
    assert block_of("unet", TO_V) == "unet.up.1.attn"
    assert block_of("unet", "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.2") == "unet.down.0.ff"
    assert block_of("unet", "mid_block.resnets.1.conv2") == "unet.mid.res"
    assert block_of("unet", "down_blocks.1.downsamplers.0.conv") == "unet.down.1.res"
    assert block_of("unet", "conv_in") == "unet.io"
    assert block_of("te", "text_model.encoder.layers.3.self_attn.q_proj") == "te.attn"
    assert block_of("te", "encoder.layers.0.mlp.fc1") == "te.ff"
    assert block_of("te", "embeddings.token_embedding") == "te.io"


def test_sampled_steps():
    assert [s for s in range(1, 201) if is_sampled(s, 50)] == [1, 50, 100, 150, 200]
    assert not any(is_sampled(s, 0) for s in range(1, 100))


@pytest.mark.slow
def test_clean_steps_report_every_block_and_no_alarm(harness):
    mon = harness.monitor(every=2)
    seen_hooks: list[int] = []
    snaps = []
    for step in range(1, 5):
        loss, skipped, result, snap = harness.step(mon, step)
        seen_hooks.append(mon.hooks_installed)
        assert math.isfinite(loss) and not skipped and result.nonfinite is None and result.message == ""
        if snap is not None:
            snaps.append(snap)
    assert [s.step for s in snaps] == [1, 2, 4]
    assert mon.installed_steps == [1, 2, 4]  # nothing installed on step 3
    assert seen_hooks == [0, 0, 0, 0]  # every hook removed after its step
    for snap in snaps:
        blocks = dict(snap.headroom)
        assert set(blocks) == expected_blocks(harness)
        # random weights near 1: every block far below 65,504, none at the limit, none alarming
        assert all(4.0 < h < math.inf for h in blocks.values()), blocks
        assert snap.nonfinite is None
        assert snap.grad_underflow is not None and 0.0 <= snap.grad_underflow < 0.05


@pytest.mark.slow
def test_headroom_is_the_limit_over_the_largest_activation(harness):
    """A hook scales one module's output to a known peak: its block's headroom is 65,504 / that peak."""
    target = harness.denoiser.get_submodule("mid_block.attentions.0.transformer_blocks.0.ff.net.2")

    def to_peak(_m, _a, out):
        return out / out.abs().amax() * 16000.0

    handle = target.register_forward_hook(to_peak)
    mon = harness.monitor()
    harness.step(mon, 1)
    handle.remove()
    headroom = dict(mon.last.headroom)
    assert headroom["unet.mid.ff"] == pytest.approx(FP16_MAX / 16000.0, rel=1e-3)
    assert min(headroom.values()) == headroom["unet.mid.ff"]


@pytest.mark.slow
def test_injected_overflow_is_named_and_the_step_skipped(harness):
    """x1e6 under fp16 in attn2.to_v: the step is skipped and to_v is the first non-finite module."""
    module = harness.denoiser.get_submodule(TO_V)
    peaks: list[float] = []

    def blow_up(_m, _a, out):
        peaks.append(float(out.detach().float().abs().amax()))
        return out * 1e6

    handle = module.register_forward_hook(blow_up)
    mon = harness.monitor(every=50)
    loss, skipped, result, _ = harness.step(mon, 7)  # not a sampled step: only the diagnosis hooks
    handle.remove()
    found = result.nonfinite
    assert skipped
    assert found is not None
    assert found.module == f"unet.{TO_V}"
    assert found.where == "activation" and found.kind == "inf" and found.precision == "fp16"
    # the fp32 recompute gives the real magnitude: 1e6 x the module's own largest output
    assert found.value == pytest.approx(peaks[0] * 1e6, rel=1e-2)
    assert found.value > FP16_MAX
    msg = result.message
    assert msg == skip_message(7, found)
    assert result.metrics_fields()["nonfinite_module"] == f"unet.{TO_V}"
    assert msg.startswith(f"step 7 skipped: inf first seen in unet.{TO_V} (fp16 activation ")
    assert "> 65,504)" in msg
    assert mon.installed_steps == [7] and mon.hooks_installed == 0


@pytest.mark.slow
def test_diagnosis_leaves_the_random_streams_as_the_step_left_them(harness):
    """A skipped step's replay does not change what the next steps draw."""
    mon = harness.monitor(every=0)
    rng = RngState.capture()
    harness.forward_backward()
    expected = torch.rand(3)
    rng.restore()
    harness.forward_backward()
    harness.optimizer.zero_grad()
    mon.diagnose(1, lambda: harness.forward_backward(1.0), rng)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.slow
def test_gradient_overflow_is_found_in_the_backward(harness):
    """Finite activations but an inf gradient: the module whose output's gradient went inf first is named."""
    module = harness.denoiser.get_submodule("conv_out")

    class InfGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[override]
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):  # type: ignore[override]
            return g * float("inf")

    handle = module.register_forward_hook(lambda _m, _a, out: InfGrad.apply(out))
    mon = harness.monitor(every=0)
    _, skipped, result, _ = harness.step(mon, 3)
    handle.remove()
    found = result.nonfinite
    assert skipped and found is not None
    assert found.where == "gradient"
    # conv_out's output gradient is finite (the inf is born in its hook's backward), its input's is not:
    # the first output gradient seen non-finite is that of conv_act, which feeds conv_out
    assert found.module == "unet.conv_act"
    assert "gradient of its output, loss scale 65,536); loss scale lowered to 32,768" in result.message


def test_fp16_findings_counted_by_hand():
    t = torch.tensor([70000.0, -1e5, 1.0, 1e-8, 3e-8, 1e-6, 0.0, 2e-5])
    # over 65,504: 70000, -1e5 -> 2; become 0 in fp16 (< 2**-25 = 2.98e-8): 1e-8 -> 1;
    # subnormal (0 < |h| < 2**-14 = 6.1e-5): 3e-8, 1e-6, 2e-5 -> 3; non-zero: 7
    (f,) = fp16_findings({"w": t})
    assert (f.over_max, f.to_zero, f.subnormal, f.nonzero, f.values) == (2, 1, 3, 7, 8)
    assert f.peak == 1e5
    report = SaveReport("x.safetensors", "fp16", "bf16", fp16_findings({"w": t, "ok": torch.ones(4)}))
    assert report.choice == "switched to bf16"
    assert report.over_max == 2 and len(report.harmed) == 1
    assert "2 values in 1 of 2 tensors exceed 65,504 (largest 1.0e5): switched to bf16." in report.headline()
    # the export's check reads the same counts: 1 of 7 non-zero values lost is over its 0.1 % threshold
    fp16 = check_fp16({"w": t, "ok": torch.ones(4)})
    assert fp16.overflow == {"w": 1e5} and fp16.underflow == {"w": pytest.approx(1 / 7)}
