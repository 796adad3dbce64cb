"""The numerics monitor inside real demo runs (CPU): an injected overflow is named and its step skipped, a
clean run reports every block without alarm and trains exactly as without monitoring, a NaN stop names
where the NaN began, and hooks exist only on sampled and diagnosed steps."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
import torch
from helpers import configs

from guitrainer.config import TrainingConfig
from guitrainer.core.events import NullReporter, StepMetrics
from guitrainer.core.precision.numerics import block_of
from guitrainer.engine.reporting import ConsoleReporter
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains the demo model

TO_V = "up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v"


def demo_cfg(out: Path, **settings: object) -> TrainingConfig:
    """The Demo preset (tests/helpers) with latents cached in memory."""
    return configs.demo_cfg(out, precision__cache_latents=True, precision__cache_to_disk=False, **settings)


class Inject(ConsoleReporter):
    """Prints like the CLI into a buffer; multiplies ``module``'s output by ``factor`` on step ``at`` only
    (its forward and the diagnosis replay), and records whether any hook was left on the model per step."""

    def __init__(self, module: str, factor: float, at: int):
        self.out = io.StringIO()
        super().__init__(quiet=False, stream=self.out)
        self.module, self.factor, self.at = module, factor, at
        self.trainer: Trainer | None = None
        self.steps: list[StepMetrics] = []
        self.statuses: list[str] = []
        self.armed = at == 1
        self.hooks_after_step: list[int] = []

    def on_status(self, text: str) -> None:
        super().on_status(text)
        self.statuses.append(text)
        if text.startswith("training ") and self.trainer is not None:
            target = self.trainer.session.model.denoiser.get_submodule(self.module)
            target.register_forward_hook(lambda _m, _a, out: out * self.factor if self.armed else out)

    def on_step(self, metrics: StepMetrics) -> None:
        super().on_step(metrics)
        self.steps.append(metrics)
        self.hooks_after_step.append(self.trainer.numerics.monitor.hooks_installed)
        self.armed = metrics.step + 1 == self.at


def test_injected_fp16_overflow_is_named_and_the_step_skipped(tmp_path):
    torch.set_num_threads(1)
    cfg = demo_cfg(tmp_path, precision__training="fp16", schedule__max_steps=3)
    rep = Inject(TO_V, 1e6, at=2)
    tr = Trainer(cfg, rep)
    rep.trainer = tr
    summary = tr.run()
    assert summary.status == "finished", summary.message
    assert [m.skipped for m in rep.steps] == [False, True, False]
    skipped = rep.steps[1]
    assert skipped.nonfinite_module == f"unet.{TO_V}"
    assert skipped.numerics_message.startswith(f"step 2 skipped: inf first seen in unet.{TO_V} (fp16 activation ")
    assert "> 65,504)" in skipped.numerics_message
    assert skipped.numerics_message in rep.statuses  # the status line (GUI) ...
    assert f"{skipped.numerics_message}\n" in rep.out.getvalue()  # ... and the CLI's log
    assert rep.steps[0].nonfinite_module is None and rep.steps[2].nonfinite_module is None
    # hooks: step 1 sampled (the first step), step 2 diagnosed; none left after any step
    assert tr.numerics.monitor.installed_steps == [1, 2]
    assert rep.hooks_after_step == [0, 0, 0]
    assert summary.skipped_steps == 1


@pytest.fixture(scope="module")
def clean_runs(tmp_path_factory):
    """The same fp16 demo run twice: sampling every 2 steps, and never."""
    torch.set_num_threads(1)
    home = tmp_path_factory.getbasetemp() / "guitrainer_home"
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GUITRAINER_HOME", str(home))
        for every in (2, 0):
            out = tmp_path_factory.mktemp(f"every{every}")
            cfg = demo_cfg(
                out, precision__training="fp16", precision__save="fp16", schedule__max_steps=5, precision__numerics_every=every
            )
            rep = NullReporter()
            tr = Trainer(cfg, rep)
            summary = tr.run()
            torch.set_num_threads(1)
            runs[every] = (tr, rep, summary)
    return runs


def test_clean_run_reports_every_block_without_alarm(clean_runs):
    tr, rep, summary = clean_runs[2]
    assert summary.status == "finished", summary.message
    sampled = [m for m in rep.steps if m.headroom]
    assert [m.step for m in sampled] == [1, 2, 4]
    assert tr.numerics.monitor.installed_steps == [1, 2, 4]  # the sampling steps are the only ones hooked
    m = tr.session.model
    blocks = {block_of("unet", n) for n, _ in m.denoiser.named_modules() if n}
    blocks |= {block_of("te", n) for n, _ in m.text_encoders[0].named_modules() if n}
    for s in sampled:
        headroom = dict(s.headroom)
        assert set(headroom) == blocks  # the VAE is fp32 on CPU under fp16: not measured against 65,504
        assert all(4.0 < h < math.inf for h in headroom.values()), headroom
        assert s.grad_underflow is not None and s.grad_underflow < 0.05
    assert all(s.nonfinite_module is None and s.numerics_message == "" for s in rep.steps)
    assert not any("skipped" in t for t in rep.statuses)


def test_monitoring_does_not_change_training(clean_runs):
    watched = [m.loss for m in clean_runs[2][1].steps]
    plain = [m.loss for m in clean_runs[0][1].steps]
    assert watched == plain
    assert clean_runs[0][0].numerics.monitor.installed_steps == []
    assert all(not m.headroom for m in clean_runs[0][1].steps)


def test_nan_stop_names_the_module_in_message_and_advice(tmp_path):
    torch.set_num_threads(1)
    module = "mid_block.attentions.0.transformer_blocks.0.ff.net.2"
    cfg = demo_cfg(tmp_path, precision__training="fp32", schedule__max_steps=4, precision__numerics_every=0)
    rep = Inject(module, float("nan"), at=2)
    tr = Trainer(cfg, rep)
    rep.trainer = tr
    summary = tr.run()
    assert summary.status == "failed"
    assert "loss became NaN at step 2 (fp32)" in summary.message
    assert f"nan first seen in unet.{module} (fp32 activation)" in summary.message
    assert any(f"unet.{module}" in a and "learning rate" in a for a in summary.advice)
    assert tr.numerics.monitor.installed_steps == [2]


def test_each_saved_lora_carries_its_save_report(clean_runs):
    from safetensors.torch import load_file

    _tr, rep, summary = clean_runs[2]
    (saved,) = [f for f in rep.saved if f.kind == "lora"]
    report = saved.save_report
    assert report is not None and report.checked
    assert (report.requested, report.used, report.choice) == ("fp16", "fp16", "kept fp16")
    assert report.step == 5 and report.path == summary.lora_path
    written = load_file(summary.lora_path)
    floats = {k: v for k, v in written.items() if v.is_floating_point()}
    assert {t.name for t in report.tensors} == set(floats)
    assert report.values == sum(v.numel() for v in floats.values())
    assert report.over_max == 0
