"""LoRA files written by the Trainer itself (not hand-built ones) load in diffusers as trained, and a NaN loss
under bf16 AMP stops the run as it does under fp32. Tiny demo model, CPU, a few steps."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

from guitrainer.core.runs import state as run_state
from guitrainer.engine.amp_step import AmpStep
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.trainer import Trainer
from guitrainer.engine.verify import verify_lora

sys.path.insert(0, str(Path(__file__).parent))
from helpers import demo_cfg
from helpers.doubles import HashingReporter  # noqa: E402

pytestmark = pytest.mark.slow  # every test here trains the demo model

RANK, ALPHA = 4, 8.0
FILE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


@pytest.mark.parametrize("save", ["fp32", "fp16"])
def test_lora_written_by_the_trainer_verifies_in_diffusers(tmp_path, save):
    torch.set_num_threads(1)
    cfg = demo_cfg(
        tmp_path, schedule__max_steps=3, network__rank=RANK, network__alpha=ALPHA, network__train_text_encoder=True,
        optimizer__lr=1e-2, precision__save=save,
    )
    tr = Trainer(cfg)
    summary = tr.run()
    torch.set_num_threads(1)
    assert summary.status == "finished", summary.message
    path = Path(summary.lora_path)
    tensors, meta = read_lora(path)
    assert meta["ss_network_dim"] == str(RANK) and meta["ss_network_alpha"] == "8" and meta["ss_save_precision"] == save
    assert {k.split("_")[1] for k in tensors} == {"unet", "te"}  # the text encoder part was written
    assert all(float(v) == ALPHA for k, v in tensors.items() if k.endswith(".alpha"))
    assert all(t.dtype == FILE_DTYPES[save] for k, t in tensors.items() if not k.endswith(".alpha"))

    v = verify_lora(path, cfg, reference=tr.session.model)
    assert v.reference == "trained model" and v.save_precision == save
    assert v.keys_total == len(tensors) and v.keys_unused == ()
    assert v.lora_effect > 0.05 and v.lora_effect_te > 1e-3, (v.lora_effect, v.lora_effect_te)  # 3 steps really trained
    limit = {"fp32": 1e-5, "fp16": 2e-3 * v.lora_effect}[save]
    assert v.max_abs_diff_unet <= limit, v.message
    assert v.max_abs_diff_te is not None and v.max_abs_diff_te <= max(1e-5, 2e-3 * v.lora_effect_te), v.message
    assert v.ok and v.message.startswith("diffusers reads this file: every key used"), v.message


def test_nan_loss_in_bf16_stops_and_keeps_last_checkpoint(tmp_path, monkeypatch):
    """As test_engine's fp32 case: bf16 AMP has no grad scaler to skip the step, so a NaN loss must stop the run."""
    torch.set_num_threads(1)
    orig = AmpStep.forward_loss
    seen: list[torch.dtype] = []

    def nan_at_6(self, batch):
        loss = orig(self, batch)
        seen.append(next(self.session.model.denoiser.parameters()).dtype)
        return loss * float("nan") if self.progress.global_step == 5 else loss

    monkeypatch.setattr(AmpStep, "forward_loss", nan_at_6)
    rep = HashingReporter()
    cfg = demo_cfg(
        tmp_path, precision__training="bf16", schedule__max_steps=8, output__save_every_n_epochs=1,
        precision__cache_latents=True, schedule__batch_size=3,  # 12 pictures: 4 steps an epoch
    )
    tr = Trainer(cfg, rep)
    summary = tr.run()
    assert torch.bfloat16 in seen  # the run really was bf16 (frozen weights cast to the compute dtype)
    assert summary.status == "failed"
    assert "loss became NaN at step 6" in summary.message
    assert summary.advice and any("learning rate" in a for a in summary.advice)
    assert len(rep.steps) == 5 and all(s.grad_scale is None for s in rep.steps)
    (ckpt,) = [s.path for s in rep.saved if s.kind == "lora"]  # after epoch 1 (4 steps)
    assert Path(ckpt).name == "demo_lora-000001.safetensors"
    assert hashlib.sha256(Path(ckpt).read_bytes()).hexdigest() == rep.hashes[ckpt]
    tensors, meta = read_lora(ckpt)
    assert meta["ss_mixed_precision"] == "bf16"
    assert all(torch.isfinite(t).all() for t in tensors.values())
    assert all(torch.isfinite(p).all() for p in tr.session.params)  # the NaN step changed nothing
    state = json.loads((tr.saver.state_dir() / run_state.STATE_FILE).read_text())
    assert state["global_step"] == 4
    assert not (tmp_path / "demo_lora.safetensors").exists()
