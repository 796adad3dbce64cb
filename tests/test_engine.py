"""Training engine on the tiny demo model, on CPU: precision paths, safety stops, exact resume, CLI."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import demo_cfg
from helpers.doubles import HashingReporter, StopAt

from guitrainer.config.presets import DEFAULT_PRESET, DEMO_PRESET, PresetStore
from guitrainer.core.events import Control, NullReporter, StepMetrics
from guitrainer.core.runs import state as run_state
from guitrainer.engine import trainer as T
from guitrainer.engine.amp_step import AmpStep
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.trainer import Trainer

DEMO = DEMO_PRESET
REPO = Path(__file__).resolve().parent.parent


class InfGrad(torch.autograd.Function):
    """Identity forward; infinite gradient backward."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        return g * float("inf")


def test_demo_preset_is_the_default_and_exists():
    assert DEFAULT_PRESET == DEMO
    cfg = PresetStore().get(DEMO).config()
    assert cfg.model.base == "demo"


# --------------------------------------------------------------------------- precision paths

PRECISION_STEPS = 30  # the issue: "30 fp32 steps lower the loss"; AMP runs compared after as many


@pytest.fixture(scope="module")
def precision_runs(tmp_path_factory):
    """fp32 / bf16 / fp16 runs of the same seed; each with its trainer, reporter and losses."""
    torch.set_num_threads(1)
    home = tmp_path_factory.getbasetemp() / "guitrainer_home"
    out = tmp_path_factory.mktemp("precision")
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GUITRAINER_HOME", str(home))
        for prec in ("fp32", "bf16", "fp16"):
            cfg = demo_cfg(out / prec, precision__training=prec, schedule__max_steps=PRECISION_STEPS, precision__cache_latents=True)
            rep = NullReporter()
            tr = Trainer(cfg, rep)
            summary = tr.run()
            torch.set_num_threads(1)
            runs[prec] = {
                "trainer": tr,
                "reporter": rep,
                "summary": summary,
                "after": tr.evaluation_loss(repeats=1),
                "before": tr.evaluation_loss(repeats=1, adapters=False) if prec == "fp32" else None,
            }
    return runs


@pytest.mark.slow
def test_fp32_training_lowers_the_loss(precision_runs):
    r = precision_runs["fp32"]
    assert r["summary"].status == "finished", r["summary"].message
    assert len(r["reporter"].steps) == PRECISION_STEPS
    assert r["after"] < r["before"] - 0.005, (r["before"], r["after"])
    assert all(s.grad_scale is None for s in r["reporter"].steps)
    assert Path(r["summary"].lora_path).is_file()


@pytest.mark.slow
@pytest.mark.parametrize("prec", ["bf16", "fp16"])
def test_amp_matches_fp32_within_5_percent(precision_runs, prec):
    ref, run = precision_runs["fp32"], precision_runs[prec]
    assert run["summary"].status == "finished", run["summary"].message
    assert abs(run["after"] - ref["after"]) / ref["after"] < 0.05
    # the per-step training losses follow the fp32 run too (same seed: same noise and timesteps). Half-precision
    # rounding lets the trajectories drift a little over 30 steps (2-3 % here, once 5.0 % at step 24 in a CI
    # run), so this follows them at 10 %; the criterion is the end-of-run loss above, at 5 %.
    for a, b in zip(ref["reporter"].steps, run["reporter"].steps):
        assert abs(a.loss - b.loss) / a.loss < 0.10, (a.step, a.loss, b.loss)
    # and it learned: the AMP model is below the base model's loss
    assert run["after"] < ref["before"]


@pytest.mark.slow
def test_fp16_keeps_fp32_master_weights_and_reports_scale(precision_runs):
    r = precision_runs["fp16"]
    unet = r["trainer"].session.model.denoiser
    lora = {n: p for n, p in unet.named_parameters() if "lora_" in n}
    frozen = {n: p for n, p in unet.named_parameters() if "lora_" not in n}
    assert lora and all(p.dtype == torch.float32 and p.requires_grad for p in lora.values())
    assert all(p.dtype == torch.float16 and not p.requires_grad for p in frozen.values())
    steps = r["reporter"].steps
    assert len(steps) == PRECISION_STEPS
    assert all(s.grad_scale is not None and s.grad_scale > 0 for s in steps)
    assert steps[-1].skipped_total == r["summary"].skipped_steps
    bf = precision_runs["bf16"]["trainer"].session.model.denoiser
    assert all(p.dtype == torch.bfloat16 for n, p in bf.named_parameters() if "lora_" not in n)
    assert all(s.grad_scale is None for s in precision_runs["bf16"]["reporter"].steps)
    tensors, meta = read_lora(r["summary"].lora_path)
    assert meta["ss_mixed_precision"] == "fp16"
    assert all(t.dtype == torch.float32 for t in tensors.values())  # save precision fp32 here


@pytest.mark.slow
def test_fp16_inf_gradient_is_skipped_and_scale_backs_off(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    orig = AmpStep.forward_loss

    def poisoned(self, batch):
        loss = orig(self, batch)
        return InfGrad.apply(loss) if self.progress.global_step == 2 else loss  # the 3rd step

    monkeypatch.setattr(AmpStep, "forward_loss", poisoned)
    rep = NullReporter()
    tr = Trainer(demo_cfg(tmp_path, precision__training="fp16", schedule__max_steps=4, precision__cache_latents=True), rep)
    summary = tr.run()
    assert summary.status == "finished", summary.message
    s = rep.steps
    assert [m.skipped for m in s] == [False, False, True, False]
    assert s[2].grad_scale == s[1].grad_scale / 2
    assert s[3].skipped_total == 1 and summary.skipped_steps == 1
    assert math.isfinite(s[2].loss)
    assert all(torch.isfinite(p).all() for p in tr.session.params)


@pytest.mark.slow
def test_fp16_too_many_skipped_steps_stop_with_advice(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    orig = AmpStep.forward_loss
    monkeypatch.setattr(AmpStep, "forward_loss", lambda self, batch: InfGrad.apply(orig(self, batch)))
    monkeypatch.setattr(T, "MAX_CONSECUTIVE_SKIPS", 3)
    rep = NullReporter()
    summary = Trainer(demo_cfg(tmp_path, precision__training="fp16", schedule__max_steps=8, precision__cache_latents=True), rep).run()
    assert summary.status == "failed"
    assert len(rep.steps) == 3 and summary.skipped_steps == 3
    assert "in a row" in summary.message
    assert any("bf16" in a for a in summary.advice) and any("learning rate" in a for a in summary.advice)
    assert summary.lora_path is None


@pytest.mark.slow
def test_nan_loss_in_fp32_stops_and_keeps_last_checkpoint(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    orig = AmpStep.forward_loss

    def nan_at_6(self, batch):
        loss = orig(self, batch)
        return loss * float("nan") if self.progress.global_step == 5 else loss

    monkeypatch.setattr(AmpStep, "forward_loss", nan_at_6)
    rep = HashingReporter()
    cfg = demo_cfg(tmp_path, schedule__max_steps=8, output__save_every_n_epochs=1, precision__cache_latents=True,
                   schedule__batch_size=3)  # 12 pictures: 4 steps an epoch
    tr = Trainer(cfg, rep)
    summary = tr.run()
    assert summary.status == "failed"
    assert "loss became NaN at step 6" in summary.message
    assert summary.advice and any("learning rate" in a for a in summary.advice)
    assert len(rep.steps) == 5
    (ckpt,) = [s.path for s in rep.saved if s.kind == "lora"]  # after epoch 1 (4 steps)
    assert Path(ckpt).name == "demo_lora-000001.safetensors"
    assert hashlib.sha256(Path(ckpt).read_bytes()).hexdigest() == rep.hashes[ckpt]
    tensors, _ = read_lora(ckpt)
    assert all(torch.isfinite(t).all() for t in tensors.values())
    import json

    state = json.loads((tr.saver.state_dir() / run_state.STATE_FILE).read_text())
    assert state["global_step"] == 4
    assert not (tmp_path / "demo_lora.safetensors").exists()


@pytest.mark.slow
def test_stop_and_resume_is_bit_exact(tmp_path):
    torch.set_num_threads(1)
    common = {"schedule__max_steps": 10, "network__dropout": 0.1, "dataset__flip_augment": True}
    straight_rep = NullReporter()
    straight = Trainer(demo_cfg(tmp_path / "a", **common), straight_rep).run()
    assert straight.status == "finished"

    control = Control()
    first_rep = StopAt(control, 5)
    first = Trainer(demo_cfg(tmp_path / "b", **common), first_rep, control).run()
    assert first.status == "stopped" and first.steps == 5
    assert first.state_path and Path(first.state_path).is_dir() and Path(first.lora_path).is_file()

    second_rep = NullReporter()
    second = Trainer(demo_cfg(tmp_path / "b", schedule__resume_from=first.state_path, **common), second_rep).run()
    assert second.status == "finished", second.message
    assert [s.step for s in second_rep.steps] == [6, 7, 8, 9, 10]
    # a resume is the same run: it keeps the stopped run's label and writes on into its file (core/runs/names.py)
    assert Path(second.lora_path) == Path(first.lora_path) and Path(second.lora_path).name == "demo_lora.safetensors"
    assert [s.loss for s in straight_rep.steps] == [s.loss for s in first_rep.steps + second_rep.steps]
    a, _ = read_lora(straight.lora_path)
    b, _ = read_lora(second.lora_path)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_resume_refuses_a_different_network(tmp_path):
    control = Control()
    first = Trainer(demo_cfg(tmp_path, schedule__max_steps=2), StopAt(control, 1), control).run()
    assert first.status == "stopped"
    summary = Trainer(demo_cfg(tmp_path, schedule__resume_from=first.state_path, network__rank=8), NullReporter()).run()
    assert summary.status == "failed" and "network.rank" in summary.message


@pytest.mark.slow
def test_out_of_memory_fails_with_advice(tmp_path, monkeypatch):
    def oom(self, batch):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(AmpStep, "forward_loss", oom)
    summary = Trainer(demo_cfg(tmp_path, schedule__max_steps=2), NullReporter()).run()
    assert summary.status == "failed" and "out of memory" in summary.message
    assert any("gradient checkpointing" in a for a in summary.advice)
    assert any("8-bit" in a for a in summary.advice)


@pytest.mark.slow
def test_other_errors_propagate(tmp_path, monkeypatch):
    def boom(self, batch):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(AmpStep, "forward_loss", boom)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        Trainer(demo_cfg(tmp_path, schedule__max_steps=2), NullReporter()).run()


@pytest.mark.slow
def test_no_usable_images_fail_before_training(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    (folder / "broken.png").write_bytes(b"not a png")
    cfg = demo_cfg(tmp_path / "out", dataset__folders=[str(folder)])
    rep = NullReporter()
    summary = Trainer(cfg, rep).run()
    assert summary.status == "failed" and "no usable training images" in summary.message
    assert rep.steps == [] and any("broken.png" in w for w in rep.warnings)


@pytest.mark.slow
def test_text_encoder_lora_8bit_optimizer_and_checkpointing_run(tmp_path):
    torch.set_num_threads(1)
    rep = NullReporter()
    cfg = demo_cfg(
        tmp_path,
        schedule__max_steps=2,
        network__train_text_encoder=True,
        optimizer__name="AdamW8bit",
        precision__gradient_checkpointing=True,
        precision__training="bf16",
        schedule__gradient_accumulation=2,
        schedule__lr_scheduler="cosine",
        schedule__warmup_steps=1,
    )
    tr = Trainer(cfg, rep)
    summary = tr.run()
    assert summary.status == "finished", summary.message
    assert tr.session.optimizer_name == "AdamW8bit"
    assert len(tr.session.optimizer.param_groups) == 2
    assert [g["name"] for g in tr.session.optimizer.param_groups] == ["unet", "text_encoder"]
    assert tr.session.optimizer.param_groups[0]["initial_lr"] == cfg.optimizer.lr
    assert tr.session.optimizer.param_groups[1]["initial_lr"] == cfg.optimizer.text_encoder_lr
    tensors, meta = read_lora(summary.lora_path)
    assert any(k.startswith("lora_te_") for k in tensors) and any(k.startswith("lora_unet_") for k in tensors)
    te_up = [v for k, v in tensors.items() if k.startswith("lora_te_") and k.endswith("lora_up.weight")]
    assert any(v.abs().sum() > 0 for v in te_up)  # the text encoder's LoRA moved off its zero init
    assert rep.steps[0].images_per_second > 0 and rep.steps[0].seconds_per_step > 0


@pytest.mark.slow
def test_pause_save_now_and_sample_request(tmp_path):
    import threading

    control = Control()
    paused = threading.Event()

    class Poke(NullReporter):
        """Asks for save + sample + pause after step 1; notes when the loop says it is paused."""

        def on_step(self, metrics: StepMetrics) -> None:
            super().on_step(metrics)
            if metrics.step == 1:
                control.request_save()
                control.request_sample()
                control.pause()

        def on_status(self, text: str) -> None:
            super().on_status(text)
            if text.startswith("paused at step"):
                paused.set()

    def resume_once_paused() -> None:  # like the UI: resume is pressed after the pause is shown, never before
        if paused.wait(timeout=120):
            control.resume()

    resumer = threading.Thread(target=resume_once_paused, daemon=True)
    resumer.start()
    rep = Poke()
    summary = Trainer(demo_cfg(tmp_path, schedule__max_steps=2, precision__cache_latents=True), rep, control).run()
    resumer.join(timeout=10)
    assert summary.status == "finished"
    assert any("paused at step 1" in s for s in rep.statuses) and any("resumed" in s for s in rep.statuses)
    assert any("sample" in s.lower() for s in rep.statuses)
    assert (tmp_path / "demo_lora-step000001.safetensors").is_file()
    assert [s.step for s in rep.steps] == [1, 2]


# --------------------------------------------------------------------------- CLI


@pytest.mark.slow
@pytest.mark.parametrize("prec", ["fp32", "bf16", "fp16"])
def test_cli_demo_preset_writes_a_lora(tmp_path, prec, capsys):
    from guitrainer.cli import main

    torch.set_num_threads(1)
    short = ["--set", "schedule.max_steps=4", "--set", "sampling.every_n_steps=0", "--set", "sampling.at_start=false"]
    rc = main(["--preset", DEMO, "--set", f"output.folder={tmp_path}", "--set", f"precision.training={prec}", *short, "--quiet"])
    torch.set_num_threads(1)
    assert rc == 0, capsys.readouterr().err
    out = tmp_path / "demo_lora.safetensors"
    assert out.is_file()
    tensors, meta = read_lora(out)
    assert meta["ss_mixed_precision"] == prec and meta["ss_network_module"] == "networks.lora"
    assert meta["ss_network_alpha"] == "16" and meta["ss_network_dim"] == "16"  # the preset's LoCon, rank 16
    assert meta["ss_network_args"] and '"conv_dim": "8"' in meta["ss_network_args"]
    assert any(k.startswith("lora_te") for k in tensors)  # the preset trains the text encoder too
    assert all(t.dtype == torch.float16 for t in tensors.values())  # the preset saves fp16
    assert f"saved {out}" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_subprocess_runs_the_demo(tmp_path, tmp_path_factory):
    env = dict(os.environ)
    env["GUITRAINER_HOME"] = str(tmp_path_factory.getbasetemp() / "guitrainer_home")
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "guitrainer.cli", "--preset", DEMO, "--set", f"output.folder={tmp_path}", "--set", "schedule.epochs=1"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "demo_lora.safetensors").is_file()


@pytest.mark.slow
def test_continue_from_an_existing_lora(tmp_path):
    torch.set_num_threads(1)
    first = Trainer(demo_cfg(tmp_path / "a", schedule__max_steps=2, network__train_text_encoder=True), NullReporter()).run()
    src, _ = read_lora(first.lora_path)
    rep = NullReporter()
    cfg = demo_cfg(tmp_path / "b", schedule__max_steps=1, model__init_lora=first.lora_path, optimizer__lr=1e-30)
    second = Trainer(cfg, rep).run()
    assert second.status == "finished", second.message
    assert any("not trained here" in w for w in rep.warnings)  # the text encoder part of the file
    out, _ = read_lora(second.lora_path)
    assert out.keys() == {k for k in src if k.startswith("lora_unet_")}
    assert all(torch.equal(out[k], src[k]) for k in out)  # lr 1e-30 (0 is refused): the loaded LoRA comes out unchanged


@pytest.mark.slow
def test_intermediate_saves_keep_only_the_newest(tmp_path):
    torch.set_num_threads(1)
    cfg = demo_cfg(
        tmp_path, schedule__max_steps=12, output__save_every_n_epochs=1, output__keep_last=1, precision__cache_latents=True,
        schedule__batch_size=3,  # 12 pictures: 4 steps an epoch
    )
    rep = NullReporter()
    summary = Trainer(cfg, rep).run()
    assert summary.status == "finished" and summary.epochs == 3
    saved = [Path(s.path).name for s in rep.saved if s.kind == "lora"]
    assert saved == ["demo_lora-000001.safetensors", "demo_lora-000002.safetensors", "demo_lora.safetensors"]
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["demo_lora-000002.safetensors", "demo_lora.safetensors"]
    _, meta = read_lora(tmp_path / "demo_lora.safetensors")
    assert meta["ss_steps"] == "12" and meta["ss_epoch"] == "3"
