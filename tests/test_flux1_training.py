"""A tiny Flux trains through the real Trainer (fp32, and bf16 over fp8-stored frozen weights): samples are
written, and the LoRA file it saves merges, by ComfyUI's rules, to exactly what the run trained."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import comfy_reader, demo_cfg, tiny_flux
from PIL import Image

from guitrainer.core.events import NullReporter
from guitrainer.engine.families.flux1 import convert
from guitrainer.engine.network.lora import ADAPTER, lora_layers, read_lora
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow


def _images(folder: Path) -> Path:
    folder.mkdir()
    for i in range(4):
        Image.new("RGB", (64, 64), (60 * i, 200 - 40 * i, 90)).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a photo of shape {i}")
    return folder


@pytest.mark.parametrize(("precision", "base_weights"), [("fp32", "auto"), ("bf16", "fp8")])
def test_the_trainer_trains_flux_and_saves_what_it_trained(tmp_path, precision, base_weights):
    tiny = tiny_flux.build(seed=1)
    base_t, base_c = tiny.transformer.state_dict(), tiny.clip.state_dict()
    cfg = demo_cfg(
        tmp_path / "out",
        model__base=str(tiny_flux.save_diffusers(tiny, tmp_path / "flux")),
        model__family="auto",
        dataset__folders=[str(_images(tmp_path / "data"))],
        dataset__resolution=64,
        schedule__max_steps=4,
        schedule__batch_size=2,
        precision__training=precision,
        precision__base_weights=base_weights,
        network__target_modules="attention_ff_proj",
        network__train_text_encoder=True,
        sampling__prompts=["a photo of shape 1"],
        sampling__every_n_steps=2,
        sampling__steps=2,
        sampling__size=64,
    )
    rep = NullReporter()
    trainer = Trainer(cfg, rep)
    summary = trainer.run()
    assert summary.status == "finished", summary.message
    model = trainer.session.model
    assert model.family == "flux1"
    if base_weights == "fp8":
        # T5's feed-forward output stays in the compute dtype: its forward casts the hidden states to wo's dtype
        # first, so an fp8 wo would round them to fp8 (the family's skip list keeps it, as SD 3.5's does)
        t5 = model.text_encoders[1]
        wo = [m.weight.dtype for n, m in t5.named_modules() if n.endswith("DenseReluDense.wo")]
        wi = [m.weight.dtype for n, m in t5.named_modules() if n.endswith("DenseReluDense.wi_0")]
        assert wo and set(wo) == {torch.bfloat16}, wo
        assert wi and set(wi) == {torch.float8_e4m3fn}, wi
    assert [s.step for s in rep.samples] == [2, 4] and all(Image.open(s.path).size == (64, 64) for s in rep.samples)

    tensors, meta = read_lora(summary.lora_path)
    assert meta["ss_base_model_version"] == "flux1" and meta["modelspec.architecture"] == "flux-1-dev/lora"
    comfy_model = {f"diffusion_model.{k}": v for k, v in convert.diffusers_to_bfl(base_t).items()}
    comfy_model |= {f"clip_l.transformer.text_model.{k}": v for k, v in base_c.items() if not k.endswith("position_ids")}
    merged, loaded = comfy_reader.merge(comfy_model, tensors)
    assert loaded.not_loaded == [] and len(loaded.patches) == 2 * 10 + 2 * 3 + 2 * 6

    def delta(module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {f"{n}.weight": layer.get_delta_weight(ADAPTER).detach().float() for n, layer in lora_layers(module).items()}

    trained_t, trained_c = delta(model.denoiser), delta(model.text_encoders[0])
    assert any(d.abs().max() > 0 for d in trained_t.values())  # the run moved the LoRA off its zero start
    expected = {f"diffusion_model.{k}": v for k, v in convert.diffusers_to_bfl(
        {k: v + trained_t.get(k, 0) for k, v in base_t.items()}).items()}
    expected |= {f"clip_l.transformer.text_model.{k}": v + trained_c.get(k, 0) for k, v in base_c.items()
                 if not k.endswith("position_ids")}
    for k, v in expected.items():
        torch.testing.assert_close(merged[k], v, rtol=0, atol=1e-5, msg=k)
